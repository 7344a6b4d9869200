"""Shared helpers for the benchmarks: scratch paths, synthetic data, timed subprocesses.

Every benchmark module exposes ``run(smoke: bool) -> list[dict]``; each dict is one row
of RESULTS.md (see ``row``). Figures are lists of per-run values; run_all.py reduces
them to median / min / max.
"""
import json
import os
import platform
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH_DIR)
WORK = os.path.join(BENCH_DIR, "_work")
PYTHON = sys.executable

NUM_FEATURES = 8
TRUE_BIAS = 3.0
TRUE_WEIGHTS = tuple(float(i + 1) for i in range(NUM_FEATURES))  # As PartitionedExampleGen.
NOISE = 0.01


def work_dir(*parts: str) -> str:
  path = os.path.join(WORK, *parts)
  os.makedirs(path, exist_ok=True)
  return path


def row(bench: str, case: str, *, command: str, data: str, baseline: str, unit: str,
        ours: Sequence[float], base: Sequence[float], higher_is_better: bool,
        target: str = "", notes: str = "", extra: Optional[Dict] = None) -> dict:
  """One RESULTS.md row. `ours` / `base` are per-run figures (>= 3 runs in full mode).

  The ratio run_all.py prints is always a speed-up (> 1 means we are faster):
  ours/base for rates (higher_is_better), base/ours for times.
  """
  return dict(bench=bench, case=case, command=command, data=data, baseline=baseline,
              unit=unit, ours=[float(v) for v in ours], base=[float(v) for v in base],
              higher_is_better=higher_is_better, target=target, notes=notes,
              extra=extra or {})


def synthetic_xy(rows: int, seed: int = 0):
  """y = x . w + b + noise, x ~ N(0, 1): the same problem as PartitionedExampleGen's."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((rows, NUM_FEATURES)).astype(np.float32)
  y = (x @ np.asarray(TRUE_WEIGHTS, np.float32) + TRUE_BIAS
       + rng.normal(0, NOISE, rows).astype(np.float32))
  return x, y


def feature_keys() -> List[str]:
  return [f"x{j}" for j in range(NUM_FEATURES)]


def write_tfrecords(root: str, splits: Dict[str, int], shards: int = 4, seed: int = 0) -> str:
  """Writes ``root/Split-<name>/data_tfrecord-i-of-n.gz`` once (a stamp file records the
  parameters; a different request rewrites). Returns root."""
  stamp = os.path.join(root, "_stamp.json")
  want = {"splits": splits, "shards": shards, "seed": seed, "features": NUM_FEATURES}
  if os.path.exists(stamp):
    with open(stamp) as f:
      if json.load(f) == want:
        return root
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # An entry point: before TensorFlow is imported.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  keys = feature_keys()
  for i, (split, n) in enumerate(sorted(splits.items())):
    x, y = synthetic_xy(n, seed + i)
    d = os.path.join(root, f"Split-{split}")
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
      os.remove(os.path.join(d, old))
    writers = [tf.io.TFRecordWriter(
        os.path.join(d, f"data_tfrecord-{s:05d}-of-{shards:05d}.gz"), options="GZIP")
               for s in range(shards)]
    for r in range(n):
      feats = {k: tf.train.Feature(float_list=tf.train.FloatList(value=[x[r, j]]))
               for j, k in enumerate(keys)}
      feats["y"] = tf.train.Feature(float_list=tf.train.FloatList(value=[y[r]]))
      writers[r % shards].write(tf.train.Example(
          features=tf.train.Features(feature=feats)).SerializeToString())
    for w in writers:
      w.close()
  with open(stamp, "w") as f:
    json.dump(want, f)
  return root


def write_csv(path: str, rows: int, seed: int = 0) -> str:
  """The same synthetic problem as CSV (header x0..x7,y), written once. The stamp file
  sits beside the CSV's folder: CsvExampleGen reads every file in the folder."""
  stamp = os.path.dirname(path) + ".stamp"
  if os.path.exists(path) and os.path.exists(stamp):
    with open(stamp) as f:
      if f.read() == f"{rows},{seed}":
        return path
  import numpy as np  # pylint: disable=g-import-not-at-top
  x, y = synthetic_xy(rows, seed)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  data = np.concatenate([x, y[:, None]], axis=1)
  np.savetxt(path, data, delimiter=",", fmt="%.6f", header=",".join(feature_keys() + ["y"]),
             comments="")
  with open(stamp, "w") as f:
    f.write(f"{rows},{seed}")
  return path


def run_python(args: Sequence[str], timeout: float = 900, env: Optional[dict] = None,
               cwd: Optional[str] = None) -> dict:
  """Runs ``python ARGS``; returns {seconds, stdout, stderr, maxrss_mb, cpu_seconds}, raising with the tail of
  the output on failure. ``maxrss_mb`` is the peak RSS of this child and the
  descendants it waited for (``os.wait4``: the same figure as
  ``getrusage(RUSAGE_CHILDREN).ru_maxrss``, but for this child alone); ``cpu_seconds``
  their user + system CPU time, from the same rusage."""
  import tempfile  # pylint: disable=g-import-not-at-top
  full_env = dict(os.environ, **(env or {}))
  full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
    start = time.perf_counter()
    proc = subprocess.Popen([PYTHON, *args], stdout=out, stderr=err, env=full_env,
                            cwd=cwd or REPO)
    deadline = start + timeout
    while True:
      pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
      if pid:
        break
      if time.perf_counter() > deadline:
        proc.kill()
        _, status, usage = os.wait4(proc.pid, 0)
        break
      time.sleep(0.05)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
  if proc.returncode != 0:
    raise RuntimeError(f"`python {' '.join(args)}` failed (exit {proc.returncode}"
                       f"{', timed out' if seconds > timeout else ''}):\n"
                       f"{stdout[-2000:]}\n{stderr[-4000:]}")
  return {"seconds": seconds, "stdout": stdout, "stderr": stderr,
          "maxrss_mb": usage.ru_maxrss / 1024,
          "cpu_seconds": usage.ru_utime + usage.ru_stime}


def last_json_line(stdout: str) -> dict:
  """The last stdout line that parses as a JSON object (child scripts print one)."""
  for line in reversed(stdout.strip().splitlines()):
    line = line.strip()
    if line.startswith("{"):
      try:
        return json.loads(line)
      except ValueError:
        continue
  raise ValueError(f"no JSON result line in output:\n{stdout[-2000:]}")


def machine() -> str:
  cpus = os.cpu_count()
  mem = ""
  try:
    with open("/proc/meminfo") as f:
      mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.1f} GiB RAM"
  except OSError:
    pass
  return f"{platform.machine()}, {cpus} cores, {mem}, Python {platform.python_version()}"


def load_average() -> str:
  try:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())
  except OSError:
    return "n/a"


def plot_path(name: str, smoke: bool) -> str:
  """benchmarks/plots/NAME.png (full mode, committed) or _work/plots-smoke/NAME.png."""
  d = work_dir("plots-smoke") if smoke else os.path.join(BENCH_DIR, "plots")
  os.makedirs(d, exist_ok=True)
  return os.path.join(d, f"{name}.png")


def write_section(path: str, text: str) -> None:
  """Writes a RESULTS.md section (benchmarks/results/*.md, kept by run_all.py)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    f.write(text)
  print(f"section written to {path}")
