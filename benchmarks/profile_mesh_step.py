"""Where a mesh 1x1 step's time goes, next to the fit engine's step (same model and batch).

    python benchmarks/profile_mesh_step.py [--steps N]

The issue #25 benchmark model: the built-in mlp, hidden_units [256, 256], 16 float
features, global batch 256, Adam 0.001. In one process (1 logical CPU, so both engines
run on CPU:0): tf_keras ``fit`` with steps_per_execution 10 (the trainer's default) on an
in-memory dataset, then ``MeshTrainer`` on a 1x1 mesh over the same batches, each phase
of its step timed on its own: packing the batch onto the mesh (one pack per dtype), the gradient function,
the optimizer function and reading the loss back. Prints one JSON line.
"""
import argparse
import json
import time

FEATURES, BATCH, HIDDEN = 16, 256, [256, 256]


def main(steps: int) -> dict:
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime, optimizers  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.models import mlp  # pylint: disable=g-import-not-at-top
  spec = ms.ModelSpec(features=tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32)
                                     for i in range(FEATURES)), label_key="y",
                      hparams={"hidden_units": HIDDEN})
  rng = np.random.default_rng(0)
  x = rng.normal(size=(BATCH * 50, FEATURES)).astype(np.float32)
  y = x.sum(axis=1, keepdims=True).astype(np.float32)
  ds = tf.data.Dataset.from_tensor_slices(({f"x{i}": x[:, i:i + 1] for i in range(FEATURES)}, y))
  ds = ds.batch(BATCH, drop_remainder=True).cache().repeat()
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
  it = iter(ds)
  for _ in range(20):  # trace + warm-up
    tr.step(*next(it))
  phases = {"next batch": 0.0, "pack onto mesh": 0.0, "gradient function": 0.0,
            "optimizer function": 0.0, "read loss": 0.0}
  t_all = time.perf_counter()
  for _ in range(steps):
    t0 = time.perf_counter()
    f, lab = next(it)
    t1 = time.perf_counter()
    key, groups, singles = tr._pack_batch(f, lab)  # pylint: disable=protected-access
    t2 = time.perf_counter()
    loss, grads = tr._gradient_fns[key](groups, singles)  # pylint: disable=protected-access
    t3 = time.perf_counter()
    tr._apply_fn(grads)  # pylint: disable=protected-access
    t4 = time.perf_counter()
    tr.fetch([loss])
    t5 = time.perf_counter()
    for name, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
      phases[name] += dt
  out["mesh_ms_per_step"] = 1000 * (time.perf_counter() - t_all) / steps
  out["mesh_phases_ms_per_step"] = {k: round(1000 * v / steps, 3) for k, v in phases.items()}
  out["ratio_mesh_over_fit_examples_per_sec"] = out["fit_ms_per_step"] / out["mesh_ms_per_step"]
  return out


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--steps", type=int, default=300)
  print(json.dumps(main(p.parse_args().steps)))
