"""Every tensor the mesh engine puts on the devices at each boundary of a run, recorded.

``python tests/mesh_boundary_cases.py`` splits the CPU into 4 logical devices, builds the
built-in mlp (4 features -> 8 -> 6 -> 1, Adam; every variable has a shape of its own) with ``engines.MeshEngine`` on a 2x2 mesh
(the default rules: a Megatron pair, column- then row-split, so both hidden kernels are
split) and runs the boundaries one after another: build, eval, train (2 steps),
checkpoint (``checkpointed()`` + tf.train.Checkpoint), restore (``load_checkpointed()``),
export (``copy_weights_to`` a plain host model).

The recorder wraps the DTensor API calls that create tensors on the mesh (``pack``,
``copy_to_mesh``, ``relayout``, ``DVariable``) of the module object mesh_runtime uses
(``tensorflow.experimental.dtensor``); each call's result (or, inside a tf.function, its
requested layout) is recorded with the boundary it happened in: sharding spec, global
shape, and, for eager results, each device's component shape and device. Host tensors
that ``to_host`` / ``_place`` make are recorded with their device. A negative control
relayouts one split kernel to replicated (what the engine's former ``_full`` did) under
the same recorder, so the rule check is shown to catch a whole copy. Prints one
``RESULT{json}`` line.
"""
import json
import sys
import tempfile

from tfx_parallel.components.common import tfenv

BATCH = 10  # Rows: no activation [BATCH, w] has a variable's shape.


def main():
  tfenv.split_cpu(4)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import engines, model_spec as ms, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import checkpoint  # pylint: disable=g-import-not-at-top

  records = []
  where = {"boundary": "setup"}

  def describe(result, layout):
    row = {"boundary": where["boundary"], "specs": list(layout.sharding_specs),
           "shape": result.shape.as_list() if result.shape.rank is not None else None}
    if tf.executing_eagerly():
      parts = dtensor.unpack(result)
      row["components"] = [[c.shape.as_list(), c.device] for c in parts]
    return row

  def wrap(name, fn, layout_of):
    def recorded(*args, **kwargs):
      result = fn(*args, **kwargs)
      records.append(dict(describe(result, layout_of(result, *args, **kwargs)), api=name))
      return result
    return recorded

  real_pack, real_copy, real_relayout = dtensor.pack, dtensor.copy_to_mesh, dtensor.relayout
  dtensor.pack = wrap("pack", real_pack, lambda r, tensors, layout, *a, **k: layout)
  dtensor.copy_to_mesh = wrap("copy_to_mesh", real_copy, lambda r, t, layout, *a, **k: layout)
  dtensor.relayout = wrap("relayout", real_relayout, lambda r, t, layout, *a, **k: layout)

  features = tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32) for i in range(4))
  spec = ms.ModelSpec(features=features, label_key="y", hparams={"hidden_units": [8, 6]})
  config = TrainerConfig(layout="mesh", mesh=(2, 2), model="mlp", optimizer="adam",
                         learning_rate=0.01, batch_size=BATCH, hidden_units=(8, 6))
  engine = engines.MeshEngine(config, None, {})
  where["boundary"] = "build"
  engine.build(user_module.load(None, None, "mlp"), spec)
  trainer = engine.trainer
  split = {f"model/{p}": list(v.shape) for p, v in
           ((p, v) for p, v in ((k[len("model/"):], v) for k, v in
                                trainer.state_variables().items() if k.startswith("model/")))
           if any(s is not None for s in trainer.shardings.get(p, ()))}
  rng = np.random.default_rng(0)
  x = {f.name: rng.normal(size=(BATCH, 1)).astype(np.float32) for f in features}
  y = rng.normal(size=(BATCH, 1)).astype(np.float32)
  # An eval set of 11 rows: one batch the batch axis divides, and a remainder of 1 row
  # (padded to the batch axis of 2 and masked out).
  ex = {k: np.concatenate([v, v[:1] + 1]) for k, v in x.items()}
  ey = np.concatenate([y, y[:1] - 1])
  eval_ds = tf.data.Dataset.from_tensor_slices((ex, ey)).batch(BATCH)

  where["boundary"] = "eval"
  eval_loss = engine.evaluator(eval_ds)(drive_callbacks=False)[0]
  where["boundary"] = "train"
  losses = [trainer.step(x, y) for _ in range(2)]
  where["boundary"] = "checkpoint"
  directory = tempfile.mkdtemp(prefix="mesh_boundary_")
  checkpoint.save(directory, 2, engine.checkpointed(), {})
  host_devices = sorted({v.device for o in engine.checkpointed().values()
                         for v in o.variables})
  before = [trainer.to_host(v) for v in trainer.model.weights]
  for v in trainer.model.weights:  # Garble, so that the restore must write every value.
    trainer.assign_from_host(v, np.zeros(v.shape, v.dtype.as_numpy_dtype))
  where["boundary"] = "restore"
  checkpoint.restore(checkpoint.latest(directory), engine.checkpointed())
  engine.load_checkpointed()
  restored_equal = all(np.array_equal(a, trainer.to_host(v))
                       for a, v in zip(before, trainer.model.weights))
  where["boundary"] = "export"
  with tf.device("/CPU:0"):
    plain = user_module.build(user_module.load(None, None, "mlp"), spec)
  engine.copy_weights_to(plain)
  export_equal = all(np.array_equal(a, w) for a, w in zip(before, plain.get_weights()))
  export_devices = sorted({v.device for v in plain.weights})
  # The mesh's eval (sharded, padded remainder) against the exported plain model's.
  mesh_eval = engine.evaluator(eval_ds)(drive_callbacks=False)[0]
  plain_eval = float(np.mean((plain(ex).numpy() - ey) ** 2))
  # Negative control: a replicated relayout of a split kernel (the former _full).
  where["boundary"] = "control"
  kernel = next(v for v in trainer.model.weights if f"model/{v.name[:-2]}" in split)
  real = dtensor.Layout.replicated(trainer.mesh, rank=2)
  dtensor.relayout(kernel.read_value(), real)
  print("RESULT" + json.dumps({
      "records": records, "split": split, "eval_loss": eval_loss, "losses": losses,
      "restored_equal": restored_equal, "export_equal": export_equal,
      "checkpoint_host_devices": host_devices, "export_devices": export_devices,
      "mesh_eval": mesh_eval, "plain_eval": plain_eval}))


if __name__ == "__main__":
  sys.exit(main())
