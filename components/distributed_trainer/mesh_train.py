"""The ``mesh`` layout: a DTensor batch x model mesh, run by mesh_runtime.MeshTrainer.

MeshTrainer (mesh_runtime.py, with the layout rules of sharding.py) trains; mesh_fit.py
runs the job through it (input, history, measured bytes, export).
"""


def run(job, config, record=None) -> dict:
  """``record``: keys added to history.json (the device plan)."""
  try:
    from tfx_parallel.components.distributed_trainer import mesh_runtime  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise NotImplementedError(
        "layout 'mesh' needs components/distributed_trainer/mesh_runtime.py (MeshTrainer), "
        f"which this build does not have ({e}); use single, mirrored or multi_worker") from e
  from tfx_parallel.components.distributed_trainer import mesh_fit  # pylint: disable=g-import-not-at-top
  return mesh_fit.run(job, config, record)
