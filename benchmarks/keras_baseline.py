"""Plain tf_keras baseline for bench_train: the same linear model, data and global batch.

    python benchmarks/keras_baseline.py --data DIR --batch 512 --steps 800 --out out.json

The input is the usual tf.data idiom (gzip TFRecordDataset -> shuffle -> repeat -> batch
-> parse_example -> prefetch); the model is ``Dense(1)`` with zero init, SGD, MSE,
trained with ``model.fit``. A callback records wall time every ``--log-every`` steps in
the same shape as the trainer's history.json records, so both are reduced alike.
"""
import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tfx_parallel.components.common import tfenv
tfenv.prepare()  # An entry point: before TensorFlow is imported.
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402


def dataset(data_dir: str, keys, batch: int, seed: int, shuffle_buffer: int):
  files = sorted(glob.glob(os.path.join(data_dir, "Split-train", "*")))
  spec = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0) for k in keys}
  spec["y"] = tf.io.FixedLenFeature([], tf.float32, default_value=0.0)

  def parse(serialized):
    p = tf.io.parse_example(serialized, spec)
    return tf.stack([p[k] for k in keys], axis=1), tf.expand_dims(p["y"], 1)

  return (tf.data.TFRecordDataset(files, compression_type="GZIP",
                                  num_parallel_reads=tf.data.AUTOTUNE)
          .shuffle(shuffle_buffer, seed=seed).repeat().batch(batch, drop_remainder=True)
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


class Recorder(tf_keras.callbacks.Callback):
  """Wall-time records every `every` steps: {step, wall_time, examples_per_sec}."""

  def __init__(self, every: int, batch: int):
    super().__init__()
    self.every, self.batch, self.records = every, batch, []

  def on_train_begin(self, logs=None):
    self.t0 = self.t_last = time.perf_counter()

  def on_train_batch_end(self, batch, logs=None):
    step = batch + 1
    if step % self.every == 0:
      now = time.perf_counter()
      self.records.append({"step": step, "wall_time": now - self.t0,
                           "examples_per_sec": self.every * self.batch / (now - self.t_last)})
      self.t_last = now


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--data", required=True)
  p.add_argument("--features", type=int, default=8)
  p.add_argument("--batch", type=int, required=True)
  p.add_argument("--steps", type=int, required=True)
  p.add_argument("--lr", type=float, default=0.1)
  p.add_argument("--log-every", type=int, default=10)
  p.add_argument("--shuffle-buffer", type=int, default=10_000)
  p.add_argument("--out", required=True)
  a = p.parse_args()
  keys = [f"x{j}" for j in range(a.features)]
  model = tf_keras.Sequential([tf_keras.layers.Dense(1, kernel_initializer="zeros",
                                                     input_shape=(a.features,))])
  model.compile(optimizer=tf_keras.optimizers.SGD(a.lr), loss="mse")
  rec = Recorder(a.log_every, a.batch)
  t0 = time.perf_counter()
  hist = model.fit(dataset(a.data, keys, a.batch, 0, a.shuffle_buffer), epochs=1,
                   steps_per_epoch=a.steps, callbacks=[rec], verbose=0)
  elapsed = time.perf_counter() - t0
  out = {"layout": "keras", "records": rec.records, "global_batch_size": a.batch,
         "steps_run": a.steps, "examples_per_sec": a.steps * a.batch / elapsed,
         "final_loss": float(hist.history["loss"][-1])}
  with open(a.out, "w") as f:
    json.dump(out, f)
  print(json.dumps({"examples_per_sec": out["examples_per_sec"]}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
