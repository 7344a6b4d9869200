"""Cost of one checkpoint, save and restore: tf.train.Checkpoint (checkpoint.py) against the
private .npz it replaced, side by side in one process.

    python benchmarks/checkpoint_format.py [--reps 5] [--plot benchmarks/plots/checkpoint_format.png]

The .npz path is the one of commit f3d7356 (components/distributed_trainer/checkpoint.py
and engines.py there): gather every model and optimizer variable to host numpy
(``MeshTrainer.state()`` on the mesh, ``get_weights`` + ``optimizer.variables`` on one
device), ``np.savez`` into memory, write to a temporary name, rename; restore: read,
``np.load``, place each array back (``MeshTrainer.load_state`` / ``set_weights``).
The new path: ``checkpoint.save`` (``tf.train.Checkpoint.write``, the .json, the atomic
state file) and ``checkpoint.restore``, of the live model and optimizer, as the trainer
calls them (``tf_*``: on the mesh the DVariables themselves with ``host_blocks``: the
warm-up is the directory's first save, DTensor's own, so the median is of the streamed
saves that follow; restores are DTensor's).

Models: the built-in mlp with Adam, small (16 features, [256, 256]: the issue #25
benchmark model) and large (256 features, [1024, 1024]). Layouts: one device, and a
mesh 2x2 on four logical CPUs (default rules). Median of ``--reps`` runs of each, after
one warm-up (tracing). Prints one JSON line.
"""
import argparse
import io
import json
import os
import statistics
import tempfile
import time
import uuid

MODELS = {"small": (16, [256, 256]), "large": (256, [1024, 1024])}
BATCH = 64


def _npz_save(path, arrays):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  buf = io.BytesIO()
  np.savez(buf, **{f"v{i:04d}": a for i, a in enumerate(arrays)})
  tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
  with tf.io.gfile.GFile(tmp, "wb") as f:
    f.write(buf.getvalue())
  tf.io.gfile.rename(tmp, path, overwrite=True)


def _npz_load(path):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path, "rb") as f:
    data = np.load(io.BytesIO(f.read()), allow_pickle=False)
    return [data[k] for k in sorted(data.files)]


def _median_ms(fn, reps):
  fn()  # warm-up
  times = []
  for _ in range(reps):
    t = time.perf_counter()
    fn()
    times.append(1000 * (time.perf_counter() - t))
  return round(statistics.median(times), 2)


def main(reps: int) -> dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import factory as engines
  from tfx_parallel.components.distributed_trainer import model_spec as ms, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import optimizers  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import checkpoint  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.models import mlp  # pylint: disable=g-import-not-at-top
  out = {"reps": reps, "cases": []}
  tmp = tempfile.mkdtemp(prefix="bench_ckpt_")
  for size, (features, hidden) in MODELS.items():
    spec = ms.ModelSpec(features=tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32)
                                       for i in range(features)), label_key="y",
                        hparams={"hidden_units": hidden})
    rng = np.random.default_rng(0)
    x = {f"x{i}": rng.normal(size=(BATCH, 1)).astype(np.float32) for i in range(features)}
    y = rng.normal(size=(BATCH, 1)).astype(np.float32)
    for layout in ("single", "mesh 2x2"):
      tf_keras.utils.set_random_seed(0)
      if layout == "single":
        model, opt = mlp.build_model(spec), optimizers.make("adam", 0.001)
        model.compile(optimizer=opt, loss="mse")
        model.train_on_batch(x, y)
        host_blocks = None  # As FitEngine: TensorFlow's own writer for every save.

        def gather(model=model, opt=opt):
          return model.get_weights() + [v.numpy() for v in opt.variables]

        def place(arrays, model=model, opt=opt):
          n = len(model.weights)
          model.set_weights(arrays[:n])
          opt.set_weights(arrays[n:])
      else:
        config = TrainerConfig(layout="mesh", mesh=(2, 2), model="mlp", optimizer="adam",
                               learning_rate=0.001, batch_size=BATCH,
                               hidden_units=tuple(hidden))
        engine = engines.MeshEngine(config, None, {})
        engine.build(user_module.load(None, None, "mlp"), spec)
        trainer = engine.trainer
        trainer.step(x, y)
        model, opt = trainer.model, trainer.optimizer
        host_blocks = engine.host_blocks  # After the first save, streamed saves.

        def gather(trainer=trainer):
          return list(trainer.state().values())

        def place(arrays, trainer=trainer):
          trainer.load_state(dict(zip(trainer.state(), arrays)))
      params = sum(int(np.prod(v.shape)) for v in model.weights)
      npz = os.path.join(tmp, f"{size}-{layout[:4]}.npz")
      directory = os.path.join(tmp, f"{size}-{layout[:4]}")
      objects = {"model": model, "optimizer": opt}
      steps = iter(range(1, 10_000))
      row = {"model": size, "params": params, "layout": layout,
             "npz_save_ms": _median_ms(lambda: _npz_save(npz, gather()), reps),
             "tf_save_ms": _median_ms(
                 lambda: checkpoint.save(directory, next(steps), objects, {},
                                         host_blocks=host_blocks), reps),
             "npz_restore_ms": _median_ms(lambda: place(_npz_load(npz)), reps),
             "tf_restore_ms": _median_ms(
                 lambda: checkpoint.restore(checkpoint.latest(directory), objects), reps)}
      for op in ("save", "restore"):
        row[f"{op}_ratio_tf_over_npz"] = round(row[f"tf_{op}_ms"] / row[f"npz_{op}_ms"], 2)
      print(json.dumps(row), flush=True)
      out["cases"].append(row)
  return out


def plot(result: dict, path: str):
  """Save and restore ms per case, the two formats side by side (log scale)."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(9, 4))
  for i, op in enumerate(("save", "restore")):
    ax = fig.add_subplot(1, 2, i + 1)
    cases = result["cases"]
    labels = [f"{c['model']}\n{c['layout']}" for c in cases]
    for j, (key, name) in enumerate((("npz", ".npz (before)"),
                                     ("tf", "tf.train.Checkpoint (used; mesh: sharded)"))):
      xs = [k + 0.35 * (j - 0.5) for k in range(len(cases))]
      ys = [c[f"{key}_{op}_ms"] for c in cases]
      ax.bar(xs, ys, width=0.35, label=name)
    ax.set_xticks(range(len(cases)), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"ms per {op}")
    ax.set_title(f"one checkpoint {op} (median of {result['reps']})")
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--plot", default="", help="also write a PNG of the figures here")
  args = parser.parse_args()
  result = main(args.reps)
  if args.plot:
    plot(result, args.plot)
  print(json.dumps(result))
