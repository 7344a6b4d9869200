"""Every tensor the mesh engine puts on the devices at each boundary of a run, recorded.

``python tests/mesh_boundary_cases.py`` splits the CPU into 4 logical devices, builds the
built-in mlp (4 features -> 8 -> 6 -> 1, Adam; every variable has a shape of its own) with ``mesh_engine.MeshEngine`` on a 2x2 mesh
(the default rules: a Megatron pair, column- then row-split, so both hidden kernels are
split) and runs the boundaries one after another: build, eval, train (2 steps),
checkpoint (``checkpointed()`` + tf.train.Checkpoint: the DVariables themselves, saved
sharded), restore (tf.train.Checkpoint's DTensor restore into them), export
(``copy_weights_to`` a plain host model).

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
  from tfx_parallel.components.distributed_trainer.engines import factory as engines
  from tfx_parallel.components.distributed_trainer import model_spec as ms, user_module  # pylint: disable=g-import-not-at-top
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
  saved = engine.checkpointed()
  # The run's first save is TensorFlow's DTensor-aware writer; the next streams each
  # variable through host memory (host_blocks) into the same keys and object graph.
  first = checkpoint.save(directory, 2, saved, {}, host_blocks=engine.host_blocks)
  streamed = checkpoint.save(directory, 3, saved, {}, host_blocks=engine.host_blocks)
  entries = checkpoint._streamable(first, saved)  # pylint: disable=protected-access
  readers = [tf.train.load_checkpoint(p) for p in (first, streamed)]
  keys = [sorted(r.get_variable_to_shape_map()) for r in readers]
  streamed_equal = keys[0] == keys[1] and all(
      np.array_equal(readers[0].get_tensor(k), readers[1].get_tensor(k)) for k in keys[0])
  # What the checkpoint saved: the mesh's own variables (no host copy), each in the
  # layout it trains in, one block per device.
  mesh_ids = {id(v) for v in trainer.state_variables().values()}
  saved_vars = [v for o in saved.values() for v in o.variables]
  saved_layouts = {}
  for v in saved_vars:
    layout = dtensor.fetch_layout(v)
    saved_layouts[v.name] = {"mesh": layout.mesh == trainer.mesh,
                             "specs": list(layout.sharding_specs),
                             "blocks": [c.shape.as_list() for c in dtensor.unpack(v.read_value())]}
  before = [trainer.to_host(v) for v in trainer.model.weights]
  where["boundary"] = "garble"  # The test's own writes, not a boundary of a run.
  for v in trainer.model.weights:  # Garble, so that the restore must write every value.
    trainer.assign_from_host(v, np.zeros(v.shape, v.dtype.as_numpy_dtype))
  where["boundary"] = "restore"
  checkpoint.restore(checkpoint.latest(directory), engine.checkpointed())
  restored_equal = all(np.array_equal(a, trainer.to_host(v))
                       for a, v in zip(before, trainer.model.weights))
  restored_blocks = {v.name: [c.shape.as_list() for c in dtensor.unpack(v.read_value())]
                     for v in trainer.state_variables().values()}
  where["boundary"] = "export"
  with tf.device("/CPU:0"):
    plain = user_module.build(user_module.load(None, None, "mlp"), spec)
  engine.copy_weights_to(plain)
  export_equal = all(np.array_equal(a, w) for a, w in zip(before, plain.get_weights()))
  # An early stop's snapshot: the devices' blocks on the host, never a whole split
  # variable; written into a plain model (garbled first) it gives the weights back.
  snapshot = engine.snapshot()
  snapshot_shapes = {v.name: [list(block.shape) for _, block in blocks]
                     for v, blocks in zip(trainer.model.weights, snapshot)}
  with tf.device("/CPU:0"):
    for v in plain.weights:
      v.assign(tf.zeros_like(v))
  engine.copy_weights_to(plain, snapshot)
  snapshot_equal = all(np.array_equal(a, w) for a, w in zip(before, plain.get_weights()))
  snapshot_released = all(x is None for x in snapshot)
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
      "saved_are_the_mesh_variables": sorted(id(v) for v in saved_vars) == sorted(mesh_ids),
      "streamed_entries": len(entries[1]) if entries else 0, "state_count": len(mesh_ids),
      "streamed_equal": streamed_equal, "latest_is_streamed": checkpoint.latest(directory) == streamed,
      "saved_layouts": saved_layouts, "restored_blocks": restored_blocks,
      "export_devices": export_devices, "snapshot_shapes": snapshot_shapes,
      "snapshot_equal": snapshot_equal, "snapshot_released": snapshot_released,
      "weight_shapes": {v.name: v.shape.as_list() for v in trainer.model.weights},
      "split_weights": [v.name for v in trainer.model.weights if f"model/{v.name[:-2]}" in split],
      "mesh_eval": mesh_eval, "plain_eval": plain_eval}))


def _growth_mb(fn) -> float:
  """How far the peak RSS rose above the RSS before ``fn()``, in MB: the peak is reset
  first (hooks_site/rss.py, the planned-vs-measured test's reader of /proc/self)."""
  import gc  # pylint: disable=g-import-not-at-top
  from hooks_site import rss  # pylint: disable=g-import-not-at-top
  gc.collect()
  rss.reset_peak()
  before = rss.status()["VmRSS"]
  kept = fn()
  peak = rss.status()["VmHWM"]
  del kept
  return (peak - before) / 2**20


def memory(hidden: int):
  """Peak RSS growth of a checkpoint save and restore on a mesh 1x4 of the mlp 16 ->
  hidden -> hidden -> 1 (Adam), against the size of its largest split variable, and of a
  negative control (one split kernel relayouted to replicated: a whole copy on each of
  the 4 devices). On logical CPU devices every device's block is host memory, so a
  restore that read the whole tensor on every device would grow by >= 4 such variables.
  The first save is TensorFlow's DTensor writer, the second streams one variable at a
  time through host memory. Run with a fixed malloc mmap threshold (the test sets MALLOC_MMAP_THRESHOLD_), so
  freed tensors return to the system and the next phase's growth shows."""
  tfenv.split_cpu(4)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import factory as engines
  from tfx_parallel.components.distributed_trainer import model_spec as ms, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import checkpoint  # pylint: disable=g-import-not-at-top
  features = tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32) for i in range(16))
  spec = ms.ModelSpec(features=features, label_key="y", hparams={"hidden_units": [hidden] * 2})
  config = TrainerConfig(layout="mesh", mesh=(1, 4), model="mlp", optimizer="adam",
                         learning_rate=0.01, batch_size=8, hidden_units=(hidden, hidden))
  engine = engines.MeshEngine(config, None, {})
  engine.build(user_module.load(None, None, "mlp"), spec)
  trainer = engine.trainer
  rng = np.random.default_rng(0)
  x = {f.name: rng.normal(size=(8, 1)).astype(np.float32) for f in features}
  trainer.step(x, rng.normal(size=(8, 1)).astype(np.float32))
  split = [v for v in trainer.model.weights
           if any(s != "unsharded" for s in dtensor.fetch_layout(v).sharding_specs)]
  largest = max(split, key=lambda v: v.shape.num_elements())
  largest_mb = largest.shape.num_elements() * largest.dtype.size / 2**20
  directory = tempfile.mkdtemp(prefix="mesh_checkpoint_memory_")
  state_mb = sum(v.shape.num_elements() * v.dtype.size
                 for v in trainer.state_variables().values()) / 2**20
  state = list(trainer.state_variables().values())

  def settled(fn):
    """``fn`` and then every device's work done: DTensor's eager ops may return before
    the devices finish (unpacking each variable waits for its blocks)."""
    def run():
      kept = fn()
      for v in state + ([kept] if isinstance(kept, tf.Tensor) else []):
        dtensor.unpack(v.read_value() if isinstance(v, tf.Variable) else v)
      return kept
    return run

  first = _growth_mb(settled(lambda: checkpoint.save(
      directory, 1, engine.checkpointed(), {}, host_blocks=engine.host_blocks)))
  save = _growth_mb(settled(lambda: checkpoint.save(
      directory, 2, engine.checkpointed(), {}, host_blocks=engine.host_blocks)))
  restore = _growth_mb(settled(
      lambda: checkpoint.restore(checkpoint.latest(directory), engine.checkpointed())))
  replicated = dtensor.Layout.replicated(trainer.mesh, rank=largest.shape.rank)
  control = _growth_mb(settled(lambda: dtensor.relayout(largest.read_value(), replicated)))
  print("RESULT" + json.dumps({"largest_mb": largest_mb, "state_mb": state_mb,
                               "first_save_mb": first, "save_mb": save, "restore_mb": restore,
                               "control_mb": control}))


if __name__ == "__main__":
  if sys.argv[1:2] == ["memory"]:
    sys.exit(memory(int(sys.argv[2])))
  sys.exit(main())
