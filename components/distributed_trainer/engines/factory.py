"""The engine of a run's layout."""
from tfx_parallel.components.distributed_trainer.engines.fit_engine import FitEngine
from tfx_parallel.components.distributed_trainer.engines.mesh_engine import MeshEngine


def create(config, plan, device_record: dict):
  """The engine of ``config.layout`` (then ``engine.build(module, spec)``)."""
  cls: type = MeshEngine if config.layout == "mesh" else FitEngine
  return cls(config, plan, device_record)
