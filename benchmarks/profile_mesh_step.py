"""Where a mesh 1x1 step's time goes, next to the fit engine's step (same model and batch).

    python benchmarks/profile_mesh_step.py [--steps N]

The issue #25 benchmark model: the built-in mlp, hidden_units [256, 256], 16 float
features, global batch 256, Adam 0.001. In one process (1 logical CPU, so both engines
run on CPU:0): tf_keras ``fit`` with steps_per_execution 10 (the trainer's default) on an
in-memory dataset, then ``MeshTrainer`` on a 1x1 mesh over the same batches, K = 10 steps
per DTensor call (``steps_async`` on K stacked batches, as MeshEngine runs
steps_per_execution 10), each phase of an execution timed on its own and divided by K:
taking K batches from the dataset, packing them onto the mesh (one pack per dtype), the
train function (K steps: forward, gradients, optimizer) and reading the K losses back;
then the loop as MeshEngine.train runs it (``mesh_overlapped_ms_per_step``: tf.data
stacks the next K batches in its threads and they are packed while the current call
runs). Prints one JSON line.
"""
import argparse
import json
import time

FEATURES, BATCH, HIDDEN, K = 16, 256, [256, 256], 10


def model_and_batches():
  """The benchmark model's spec and its global batches (cached, repeated), as
  bench_mesh_step_cost.py uses them too."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  spec = ms.ModelSpec(features=tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32)
                                     for i in range(FEATURES)), label_key="y",
                      hparams={"hidden_units": HIDDEN})
  rng = np.random.default_rng(0)
  x = rng.normal(size=(BATCH * 50, FEATURES)).astype(np.float32)
  y = x.sum(axis=1, keepdims=True).astype(np.float32)
  ds = tf.data.Dataset.from_tensor_slices(({f"x{i}": x[:, i:i + 1] for i in range(FEATURES)}, y))
  return spec, ds.batch(BATCH, drop_remainder=True).cache().repeat()


def main(steps: int) -> dict:
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import optimizers  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.models import mlp  # pylint: disable=g-import-not-at-top
  spec, ds = model_and_batches()
  out = {"steps": steps, "model": f"mlp {HIDDEN}, {FEATURES} features, batch {BATCH}, adam"}

  model = mlp.build_model(spec)
  model.compile(optimizer=optimizers.make("adam", 0.001), loss="mse", steps_per_execution=10)
  model.fit(ds, steps_per_epoch=50, epochs=1, verbose=0)  # trace + warm-up
  t = time.perf_counter()
  model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
  out["fit_ms_per_step"] = 1000 * (time.perf_counter() - t) / steps

  tr = mesh_runtime.MeshTrainer(lambda: mlp.build_model(spec), mesh_shape=(1, 1), rules=None,
                                loss_fn=tf_keras.losses.MeanSquaredError(), optimizer="adam",
                                learning_rate=0.001, global_batch=BATCH)
  it = iter(ds.batch(K))  # K global batches stacked per execution, as MeshEngine feeds them
  for _ in range(5):  # trace + warm-up
    tr.fetch([tr.steps_async(*next(it))])
  phases = {"next k batches": 0.0, "pack onto mesh": 0.0, "train function (k steps)": 0.0,
            "read losses": 0.0}
  calls = max(1, steps // K)
  t_all = time.perf_counter()
  for _ in range(calls):
    t0 = time.perf_counter()
    f, lab = next(it)
    t1 = time.perf_counter()
    key, groups, singles = tr._pack_batch(f, lab)  # pylint: disable=protected-access
    t2 = time.perf_counter()
    losses = tr._train_fns[key](groups, singles)  # pylint: disable=protected-access
    t3 = time.perf_counter()
    tr.fetch([losses])
    t4 = time.perf_counter()
    for name, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
      phases[name] += dt
  out["mesh_ms_per_step"] = 1000 * (time.perf_counter() - t_all) / (calls * K)
  # As MeshEngine.train runs it: tf.data stacks the next k batches in its threads
  # (prefetch) and they are packed while the current execution runs.
  it = iter(ds.batch(K).prefetch(1))
  t_all = time.perf_counter()
  packed = tr.pack_steps(*next(it))
  for _ in range(calls):
    running = tr.run_packed(packed)
    packed = tr.pack_steps(*next(it))
    tr.fetch([running])
  out["mesh_overlapped_ms_per_step"] = 1000 * (time.perf_counter() - t_all) / (calls * K)
  out["mesh_phases_ms_per_step"] = {k: round(1000 * v / (calls * K), 3)
                                    for k, v in phases.items()}
  out["ratio_mesh_over_fit_examples_per_sec"] = out["fit_ms_per_step"] / out["mesh_ms_per_step"]
  out["ratio_overlapped_mesh_over_fit"] = (out["fit_ms_per_step"]
                                           / out["mesh_overlapped_ms_per_step"])
  return out


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--steps", type=int, default=300)
  print(json.dumps(main(p.parse_args().steps)))
