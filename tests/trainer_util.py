"""Helpers for trainer tests: tiny synthetic Examples on disk, and running a layout in
a fresh process (DTensor and MirroredStrategy collectives cannot share one process)."""
import json
import os
import subprocess
import sys

import numpy as np

import tensorflow as tf

TRUE_W = np.array([1.0, 2.0], np.float32)
TRUE_B = 3.0


def write_examples(root: str, rows: int = 2048, num_features: int = 2, shards: int = 2,
                   seed: int = 0, noise: float = 0.01, eval_rows: int = 256):
  """Writes Split-train / Split-eval gzip TFRecords of y = x·w + b + noise."""
  rng = np.random.default_rng(seed)
  w = np.arange(1, num_features + 1, dtype=np.float32)
  for split, n in (("train", rows), ("eval", eval_rows)):
    x = rng.uniform(-1, 1, (n, num_features)).astype(np.float32)
    y = x @ w + TRUE_B + rng.normal(0, noise, n).astype(np.float32)
    d = os.path.join(root, f"Split-{split}")
    os.makedirs(d, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(d, f"data_tfrecord-{i:05d}-of-{shards:05d}.gz"),
                                    options="GZIP") for i in range(shards)]
    for i in range(n):
      feats = {f"x{j}": tf.train.Feature(float_list=tf.train.FloatList(value=[x[i, j]]))
               for j in range(num_features)}
      feats["y"] = tf.train.Feature(float_list=tf.train.FloatList(value=[y[i]]))
      writers[i % shards].write(
          tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    for wr in writers:
      wr.close()
  return [f"x{j}" for j in range(num_features)], "y", rows


def write_rows(root: str, keys, label: str, train_x, train_y, eval_x, eval_y):
  """Writes Split-train / Split-eval gzip TFRecords (one file each) of float columns
  ``keys`` and float label ``label``, as PartitionedExampleGen writes numbers."""
  for split, xs, ys in (("train", train_x, train_y), ("eval", eval_x, eval_y)):
    d = os.path.join(root, f"Split-{split}")
    os.makedirs(d, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(d, "data_tfrecord-00000-of-00001.gz"),
                              options="GZIP") as writer:
      for row, target in zip(xs, ys):
        feats = {k: tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
                 for k, v in zip(keys, row)}
        feats[label] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(target)]))
        writer.write(tf.train.Example(
            features=tf.train.Features(feature=feats)).SerializeToString())


# The last training record's loss / the last eval loss on the seed problem (noise variance
# 1e-4, reached by every layout here): the recorded loss is the mean per-example loss
# over the global batch, so the two agree. multi_worker recorded x2 (workers x the loss,
# issue 38) before fit_engine.FitEngine set tf_keras's distribute_reduction_method.
FINAL_LOSS_OVER_EVAL_MAX = 1.3


def assert_final_loss_is_eval_sized(history):
  """Every layout records the loss single does (tests of each layout's seed run)."""
  ratio = history["records"][-1]["loss"] / history["epochs"][-1]["eval_loss"]
  assert 1 / FINAL_LOSS_OVER_EVAL_MAX < ratio < FINAL_LOSS_OVER_EVAL_MAX, (
      history["layout"], history["records"][-3:], history["epochs"][-1])


def job_dict(tmp: str, examples_uri: str, feature_keys, train_rows: int, **config) -> dict:
  """A training job; ``device`` defaults to "cpu" (logical CPU devices), so the layouts'
  tests run the same on a GPU machine (tests/test_gpu.py asks for the GPUs). The update
  rule defaults to SGD at 0.1, which these tests' step counts and tolerances were written
  for (TrainerConfig's own defaults are Adam at 0.01)."""
  config.setdefault("device", "cpu")
  config.setdefault("optimizer", "sgd")
  config.setdefault("learning_rate", 0.1)
  return dict(config=config, examples_uri=examples_uri, feature_keys=list(feature_keys),
              label_key="y", train_rows=train_rows,
              model_dir=os.path.join(tmp, "model", "Format-Serving"),
              model_run_dir=os.path.join(tmp, "model_run"),
              history_dir=os.path.join(tmp, "history"),
              checkpoint_dir=os.path.join(tmp, "ckpt"), num_shards=2)


def run_job(job: dict, tmp: str, env=None, timeout=300) -> dict:
  """Runs one training process on `job`; returns history.json."""
  os.makedirs(tmp, exist_ok=True)
  path = os.path.join(tmp, "job.json")
  with open(path, "w") as f:
    json.dump(job, f)
  proc = subprocess.run(
      [sys.executable, "-m", "tfx_parallel.components.distributed_trainer.run.train", "--job", path],
      env=dict(os.environ, **(env or {})), capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  with open(os.path.join(job["history_dir"], "history.json")) as f:
    return json.load(f)


def read_history(job: dict) -> dict:
  with open(os.path.join(job["history_dir"], "history.json")) as f:
    return json.load(f)


def run_jobs_in_one_process(jobs, tmp: str, env=None, timeout=600):
  """Runs training ``jobs`` one after another in ONE fresh process (TensorFlow starts
  once; the logical devices are the same for all of them), each writing its history.json.
  Put tf.distribute layouts before mesh (DTensor) ones."""
  os.makedirs(tmp, exist_ok=True)
  path = os.path.join(tmp, "jobs.json")
  with open(path, "w") as f:
    json.dump(jobs, f)
  code = ("import json, sys\n"
          "from tfx_parallel.components.distributed_trainer.run import train\n"
          "for job in json.load(open(sys.argv[1])):\n"
          "  train.run(train.Job(**job))\n")
  proc = subprocess.run([sys.executable, "-c", code, path], env=dict(os.environ, **(env or {})),
                        capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return proc.stdout


def run_script(code: str, timeout=300) -> str:
  """Runs python `code` in a fresh process; returns stdout (asserting success)."""
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=timeout)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return proc.stdout


def run_cases(script: str, *args: str, timeout=600, env=None) -> dict:
  """Runs the cases script `script` (a file beside this one) with `args` in a fresh
  process (its own logical devices; ``env``, else this one's); returns the JSON it
  prints after ``RESULT``."""
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), script)
  proc = subprocess.run([sys.executable, path, *args], capture_output=True, text=True,
                        timeout=timeout, check=False, env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return json.loads(proc.stdout.split("RESULT", 1)[1])


COLORS = ["red", "green", "blue", "teal", "plum"]


def write_classification_examples(root: str, rows: int = 1024, eval_rows: int = 256,
                                  shards: int = 2, seed: int = 0, label_type: str = "float",
                                  drop_label_every: int = 0):
  """Writes Split-train / Split-eval of a 3-class problem: float feature ``x``, string
  feature ``color`` (missing in every 7th row), label ``y`` in 0..2 stored as float (as
  PartitionedExampleGen writes numbers), int or bytes ("c0".."c2"). Returns
  (numeric keys, string keys, train rows)."""
  rng = np.random.default_rng(seed)
  for split, n in (("train", rows), ("eval", eval_rows)):
    x = rng.normal(size=n).astype(np.float32)
    color = rng.integers(0, len(COLORS), n)
    y = ((x > 0.3).astype(int) + (color % 3 == 0) + (x > 1.0)) % 3
    d = os.path.join(root, f"Split-{split}")
    os.makedirs(d, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(d, f"data_tfrecord-{i:05d}-of-{shards:05d}.gz"),
                                    options="GZIP") for i in range(shards)]
    for i in range(n):
      feats = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=[x[i]]))}
      if i % 7:
        feats["color"] = tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[COLORS[color[i]].encode()]))
      if not (drop_label_every and i % drop_label_every == drop_label_every - 1):
        if label_type == "float":
          feats["y"] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(y[i])]))
        elif label_type == "int":
          feats["y"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y[i])]))
        else:
          feats["y"] = tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[f"c{y[i]}".encode()]))
      writers[i % shards].write(
          tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    for wr in writers:
      wr.close()
  return ["x"], ["color"], rows


def write_split(root, split, records) -> str:
  """Serialized tf.Examples as one gzipped TFRecord file of Split-<split>; its path."""
  path = os.path.join(root, f"Split-{split}", "data.gz")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with tf.io.TFRecordWriter(path, "GZIP") as w:
    for r in records:
      w.write(r)
  return path
