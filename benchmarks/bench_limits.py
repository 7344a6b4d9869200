"""Rough physical limits per stage on this machine, to say how close each stage gets.

* ingest: the rate to read the CSV bytes and gzip-write the same rows as TFRecords
  (serialized tf.Examples, zlib level 6 as TFRecordWriter's GZIP), one core, no
  parsing or encoding: rows / (read seconds + compress-and-write seconds). An ideal
  2-core split would double it.
* train: (a) peak FLOP/s of one 1024x1024 float32 matmul on the 2 cores, and the
  compute-bound examples/s of the linear model (about 6 F FLOPs per example: forward
  2F, gradient 2F, update); (b) the rate of one dense matmul of the model's size
  ([global batch 512, 8] x [8, 1]) in a tf.function loop: the per-step dispatch floor
  for any Python-driven training loop, in examples/s.
* eval: reading and parsing the same gzip TFRecords with tf.data (batch 1024,
  parse_example), no model: the input floor of any evaluator.

Each limit is the median of 3 measurements. run_all.py fills the "our figure" column
from the named row of another benchmark (``extra.ours_from``), so the ratio column is
"fraction of the limit reached".
"""
import glob
import gzip
import os
import statistics
import sys
import time
import zlib
from typing import List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil as bu  # noqa: E402

REPS = 3


def _time(fn) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def ingest_limit(rows: int) -> List[float]:
  import numpy as np  # pylint: disable=g-import-not-at-top
  csv = bu.write_csv(os.path.join(bu.work_dir(f"limits_csv_{rows}"), "data.csv"), rows)
  tf_dir = bu.write_tfrecords(bu.work_dir(f"limits_tfr_{rows}"), {"train": rows}, shards=1)
  [tfr] = glob.glob(os.path.join(tf_dir, "Split-train", "*"))
  with gzip.open(tfr, "rb") as f:
    raw = f.read()
  out = os.path.join(bu.work_dir("limits_out"), "out.gz")
  rates = []
  for _ in range(REPS):
    t_read = _time(lambda: open(csv, "rb").read())  # pylint: disable=consider-using-with

    def write():
      c = zlib.compressobj(6, zlib.DEFLATED, 31)
      with open(out, "wb") as f:
        f.write(c.compress(raw) + c.flush())
    rates.append(rows / (t_read + _time(write)))
  del np
  return rates


def train_limits() -> dict:
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # An entry point: before TensorFlow is imported.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  a = tf.random.normal([1024, 1024])
  mm = tf.function(lambda a: tf.matmul(a, a))
  mm(a).numpy()
  peak = []
  for _ in range(REPS):
    n = 20
    t = _time(lambda: [mm(a) for _ in range(n)][-1].numpy())
    peak.append(2 * 1024 ** 3 * n / t)
  x = tf.random.normal([512, bu.NUM_FEATURES])
  w = tf.Variable(tf.zeros([bu.NUM_FEATURES, 1]))
  small = tf.function(lambda x: tf.matmul(x, w))
  small(x).numpy()
  dispatch = []
  for _ in range(REPS):
    n = 2000
    t = _time(lambda: [small(x) for _ in range(n)][-1].numpy())
    dispatch.append(512 * n / t)
  return {"peak_flops": peak, "dispatch_eps": dispatch}


def eval_limit(rows: int) -> List[float]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  data = bu.write_tfrecords(bu.work_dir(f"limits_tfr_{rows}"), {"train": rows}, shards=1)
  files = sorted(glob.glob(os.path.join(data, "Split-train", "*")))
  spec = {k: tf.io.FixedLenFeature([], tf.float32) for k in bu.feature_keys() + ["y"]}
  ds = (tf.data.TFRecordDataset(files, compression_type="GZIP").batch(1024)
        .map(lambda s: tf.io.parse_example(s, spec), num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(2))
  rates = []
  for _ in range(REPS):
    rates.append(rows / _time(lambda: [None for _ in ds]))
  return rates


def run(smoke: bool) -> List[dict]:
  rows = 20_000 if smoke else 200_000
  ing = ingest_limit(rows)
  tr = train_limits()
  ev = eval_limit(rows)
  flops_per_example = 6 * bu.NUM_FEATURES
  peak = statistics.median(tr["peak_flops"])
  text = (f"Peak matmul rate on this machine: {peak / 1e9:.1f} GFLOP/s (1024^3 float32, "
          f"median of {REPS}); the linear model needs about {flops_per_example} FLOPs per "
          f"example, so compute alone would allow ~{peak / flops_per_example / 1e6:,.0f}M "
          f"examples/s: training this model is bound by per-step dispatch and input "
          f"parsing, not by arithmetic, which is what the matmul-loop row measures.")
  return [
      bu.row("limits", "ingest: read CSV + gzip-write TFRecords (1 core)",
             command="benchmarks/bench_limits.py ingest_limit", data=f"{rows:,} rows x 8",
             baseline="physical limit", unit="rows/s", ours=[], base=ing,
             higher_is_better=True, notes="ours: PartitionedExampleGen, in_memory runner",
             extra={"ours_from": ["bench_ingest", "runner in_memory"]}),
      bu.row("limits", "train: compute bound (peak matmul FLOP/s / 6F)",
             command="tf.matmul 1024x1024 loop", data="linear model, F=8",
             baseline="physical limit", unit="examples/s",
             ours=[], base=[p / flops_per_example for p in tr["peak_flops"]],
             higher_is_better=True, notes="ours: DistributedTrainer single, steady state",
             extra={"ours_from": ["bench_train", "single"], "text": text,
                    "peak_flops": tr["peak_flops"]}),
      bu.row("limits", "train: one [512x8]x[8x1] matmul per step (tf.function loop)",
             command="tf.function(matmul) loop", data="global batch 512, F=8",
             baseline="dispatch floor", unit="examples/s", ours=[], base=tr["dispatch_eps"],
             higher_is_better=True, notes="ours: DistributedTrainer single, steady state",
             extra={"ours_from": ["bench_train", "single"]}),
      bu.row("limits", "eval: read + parse gzip TFRecords (tf.data, no model)",
             command="tf.data TFRecordDataset.batch(1024).map(parse_example)",
             data=f"{rows:,} rows x 8", baseline="input floor", unit="rows/s", ours=[],
             base=ev, higher_is_better=True, notes="ours: ConvergenceEvaluator quality",
             extra={"ours_from": ["bench_eval", "quality (MSE/MAE/R2)"]}),
  ]


if __name__ == "__main__":
  import json  # pylint: disable=g-import-not-at-top
  for r in run("--smoke" in sys.argv):
    print(json.dumps(r))
