"""Ingest benchmark: PartitionedExampleGen vs stock CsvExampleGen, and synthetic scaling.

Comparison: the same CSV (``--rows`` rows, ``--features`` float features plus a float
label "y") goes through the stock ``CsvExampleGen`` executor and through ours, both with
the same Beam args and the same 4:1 train/eval split, alternating, ``--repeats`` times per
runner mode. Only ``Executor.Do`` is timed: not imports, not CSV generation, and not the
executor's constructor (with Beam args, TFX's BaseBeamExecutor builds an sdist of tfx
for ``--extra_package`` there, a few seconds for either executor). rows/s is rows / Do
seconds, reported as the median with min and max. Each runner mode runs in
its own subprocess.

Scaling: synthetic rows (1e5, 1e6, 1e7 by default) through our ingest (``ingest.run``,
which is Do without the artifact bookkeeping, and without importing TensorFlow), each size
in a fresh subprocess; reports ingest seconds, process wall time, and the peak RSS of the
process tree (``resource.getrusage(RUSAGE_CHILDREN)`` in a launcher process that only waits for
the measured child), and plots both against rows to ``benchmarks/ingest_scaling.png``.

Mixed-type scaling (``--mixed-scaling``, issue 30): a mixed-type CSV (make_mixed_csv: 6
floats with 5% empty cells, an int, 2 string columns, a float label) at 1M, 4M and 10M rows
through ours (``ingest.run`` in a fresh process each), stock CsvExampleGen's
``Executor.Do`` at the first size only (alone in its process), and a numeric-only CSV of
the same column count at the first size; rows/s and peak RSS of each process, a plot of
both against rows (``benchmarks/plots/ingest_mixed_rss.png``), the section
``benchmarks/results/ingest_mixed.md`` (RESULTS.md shows it) and
``benchmarks/ingest_mixed.json`` (run_all.py's Targets table reads the mixed-type ratio).

Runner modes: DirectRunner in-memory, DirectRunner multi-processing with 2 workers, and
Beam's DaskRunner on a local `dask scheduler` with 2 single-threaded `dask worker`
processes (started and stopped by the child). Peak memory: ``peak_rss_mb_both`` is the
largest RSS of any process the child waited for (the child itself, or a multi-processing
worker), ``dask_worker_peak_rss_mb`` the largest VmHWM of the Dask worker processes (read
from /proc before they stop; the workers are not the child's descendants in RUSAGE terms).

Usage:
  .venv/bin/python benchmarks/bench_ingest.py                   # 1M-row comparison
  .venv/bin/python benchmarks/bench_ingest.py --rows 1000000 --repeats 1 --modes dask
  .venv/bin/python benchmarks/bench_ingest.py --rows 100000 --repeats 1
  .venv/bin/python benchmarks/bench_ingest.py --scaling         # scaling only
  .venv/bin/python benchmarks/bench_ingest.py --smoke           # tiny sizes, < 1 minute
  .venv/bin/python benchmarks/bench_ingest.py --mixed-scaling   # 1M/4M/10M mixed (~1 h loaded)
  .venv/bin/python benchmarks/bench_ingest.py --mixed-scaling --mixed-rows 40000000 \
      --mixed-sides ours --mixed-merge                           # add the 40M-row run
A benchmark driver calls ``run(smoke)``, which returns the result rows as dicts.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = {
    "in_memory": [],
    "multi_processing": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    # A local `dask scheduler` and DASK_WORKERS `dask worker` processes (1 thread each),
    # started by the child; the address is added when they are up.
    "dask": ["--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
             "--dask_npartitions=16"],
}
DASK_WORKERS = 2
# Modes run unless --modes says otherwise (run_all.py's full run uses these). Rows of the
# dask mode have no stock baseline, so no ratio.
DEFAULT_MODES = ("in_memory", "multi_processing")
# Stock CsvExampleGen on DaskRunner finishes without writing its files (only the
# beam-temp-* directories of WriteToTFRecord are left: DaskRunner drops what
# finish_bundle emits, which Beam's file sinks need). Measured with --dask-baseline at
# 20,000 rows (268 rows/s, 0 records written); skipped by default, it would take hours.
DASK_BASELINE_SKIPPED = ("skipped: stock CsvExampleGen finishes on DaskRunner without "
                         "writing its files (run with --dask-baseline to see it)")
RESULT_PREFIX = "BENCH_RESULT "
SPLITS = {"train": 4, "eval": 1}

# A launcher that only runs the measured command, so RUSAGE_CHILDREN is that process tree.
_LAUNCHER = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.time()\n"
    "rc = subprocess.call(sys.argv[1:])\n"
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print('" + RESULT_PREFIX + "' + json.dumps({'rc': rc, 'peak_rss_kb': usage.ru_maxrss, "
    "'cpu_seconds': usage.ru_utime + usage.ru_stime, 'wall_seconds': time.time() - t}))\n")


# ----------------------------------------------------------------------------- data


def make_csv(path: str, rows: int, features: int, seed: int = 0) -> str:
  """Writes a CSV with columns x0..x{F-1}, y (floats) unless it already exists."""
  if os.path.exists(path):
    return path
  import numpy as np  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.dirname(path), exist_ok=True)
  rng = np.random.default_rng(seed)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.write(",".join([f"x{i}" for i in range(features)] + ["y"]) + "\n")
    weights = np.arange(1, features + 1, dtype=np.float64)
    for start in range(0, rows, 100_000):
      x = rng.normal(size=(min(100_000, rows - start), features))
      y = x @ weights + 3.0 + 0.01 * rng.normal(size=len(x))
      np.savetxt(f, np.column_stack([x, y]), fmt="%.6f", delimiter=",")
  os.replace(tmp, path)
  return path


MIXED_FLOATS = 6
MIXED_EMPTY_SHARE = 0.05  # Share of empty cells in each float column and in s1.
MIXED_CATEGORIES = ("Cash", "Credit Card", "No Charge", "Dispute", "Unknown", "Mobile")


# Above this many rows, make_mixed_csv repeats the rows of the MIXED_REPEAT_ROWS file
# instead of generating new ones: pandas wrote the 40M-row file at ~25 MB/min on the
# loaded 2-core machine (over 2 h); a copy runs at disk speed. Ingest work per row is
# the same (every row is parsed, hashed and encoded); only the row values repeat.
MIXED_UNIQUE_ROWS = 10_000_000
MIXED_REPEAT_ROWS = 1_000_000


def make_mixed_csv(path: str, rows: int, seed: int = 0) -> str:
  """Writes a mixed-type CSV unless it already exists: f0..f5 floats (5% empty cells),
  n0 an int, s0 a category (6 values), s1 a free text id (5% empty), y a float label.
  About 80 bytes a row; written in blocks of 100,000 rows. Beyond MIXED_UNIQUE_ROWS rows
  (a multiple of MIXED_REPEAT_ROWS), the data rows of the MIXED_REPEAT_ROWS-row file
  (same seed) repeated."""
  if os.path.exists(path):
    return path
  if rows > MIXED_UNIQUE_ROWS and rows % MIXED_REPEAT_ROWS == 0:
    base = make_mixed_csv(os.path.join(os.path.dirname(os.path.dirname(path)),
                                       f"mixed_{MIXED_REPEAT_ROWS}", "data.csv"),
                          MIXED_REPEAT_ROWS, seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(base, "rb") as f:
      header = f.readline()
      body = f.read()
    with open(path + ".tmp", "wb") as f:
      f.write(header)
      for _ in range(rows // MIXED_REPEAT_ROWS):
        f.write(body)
    os.replace(path + ".tmp", path)
    return path
  import numpy as np  # pylint: disable=g-import-not-at-top
  import pandas as pd  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.dirname(path), exist_ok=True)
  rng = np.random.default_rng(seed)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    for start in range(0, rows, 100_000):
      n = min(100_000, rows - start)
      x = rng.normal(size=(n, MIXED_FLOATS)).round(5)
      frame = pd.DataFrame({f"f{i}": x[:, i] for i in range(MIXED_FLOATS)})
      for i in range(MIXED_FLOATS):
        frame.loc[rng.random(n) < MIXED_EMPTY_SHARE, f"f{i}"] = np.nan
      frame["n0"] = rng.integers(0, 1000, n)
      frame["s0"] = np.asarray(MIXED_CATEGORIES, dtype=object)[
          rng.integers(0, len(MIXED_CATEGORIES), n)]
      ids = pd.Series(rng.integers(0, 10**9, n)).map("id-{:09d}".format)
      ids[rng.random(n) < MIXED_EMPTY_SHARE] = None
      frame["s1"] = ids.values
      frame["y"] = (np.nan_to_num(x[:, 0]) * 2 + (frame["n0"].values % 7) * 0.1).round(5)
      frame.to_csv(f, header=start == 0, index=False, na_rep="", float_format="%.5f")
  os.replace(tmp, path)
  return path


# ----------------------------------------------------------------------------- children


def _child_compare(csv_path: str, mode: str, repeats: int, rows: int,
                   run_baseline: bool = True, sides=("baseline", "ours")) -> Dict:
  """Runs baseline and ours alternately ``repeats`` times; returns Do seconds of each.
  ``run_baseline`` False (Dask without --dask-baseline) skips the stock executor;
  ``sides`` names the executors run."""
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # An entry point: before TensorFlow is imported.
  from absl import logging  # pylint: disable=g-import-not-at-top
  from tfx.components.example_gen.csv_example_gen import executor as csv_executor  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import base_beam_executor  # pylint: disable=g-import-not-at-top
  from tfx.proto import example_gen_pb2  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_component_specs as specs  # pylint: disable=g-import-not-at-top
  from tfx.utils import proto_utils  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import config_util, keys  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen import executor as our_executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  logging.set_verbosity(logging.WARNING)

  work = tempfile.mkdtemp(prefix="bench_ingest_")
  args = list(MODES[mode])
  cluster = None
  if mode == "dask":
    cluster = LocalDask(DASK_WORKERS, os.path.join(work, "dask_logs"))
    args.append(f"--dask_client_address={cluster.address}")

  def context():
    return base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=list(args),
                                                        tmp_dir=os.path.join(work, "tmp"))

  def output(name):
    examples = standard_artifacts.Examples()
    examples.uri = os.path.join(work, name)
    os.makedirs(examples.uri)
    return {"examples": [examples]}

  def baseline():
    """Builds the stock executor (TFX's Beam dependency flags are built here, untimed);
    returns its Do call."""
    props = {
        specs.INPUT_BASE_KEY: os.path.dirname(csv_path),
        specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Input(splits=[
            example_gen_pb2.Input.Split(name="single_split",
                                        pattern=os.path.basename(csv_path))])),
        specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Output(
            split_config=example_gen_pb2.SplitConfig(splits=[
                example_gen_pb2.SplitConfig.Split(name=n, hash_buckets=b)
                for n, b in SPLITS.items()]))),
    }
    out = output("baseline")
    executor = csv_executor.Executor(context())

    def do():
      executor.Do({}, out, props)
      written = _count_records(out["examples"][0].uri)
      if written != rows:  # A runner can finish without writing everything.
        left = sorted(os.listdir(os.path.join(out["examples"][0].uri, "Split-train")))
        raise RuntimeError(f"stock CsvExampleGen wrote {written} rows, expected {rows} "
                           f"(Split-train holds {left[:2]})")
    return do

  def ours():
    config = ExampleGenConfig(label="y", source=csv_path, split_ratios=dict(SPLITS)).validate()
    out = output("ours")
    executor = our_executor.Executor(context())

    def do():
      executor.Do({}, out, {keys.CONFIG_KEY: config_util.to_json(config)})
      written = sum(json.loads(out["examples"][0].get_custom_property(keys.ROW_COUNTS))
                    .values())
      if written != rows:
        raise RuntimeError(f"ours wrote {written} rows, expected {rows}")
    return do

  times = {"baseline": [], "ours": [], "runner_startup": [_trivial_pipeline_seconds(args)],
           "baseline_error": None if run_baseline else DASK_BASELINE_SKIPPED}
  try:
    for r in range(repeats):
      order = [(n, p) for n, p in (("baseline", baseline), ("ours", ours)) if n in sides]
      for name, prepare in (order if r % 2 == 0 else order[::-1]):
        if name == "baseline" and times["baseline_error"]:
          continue
        do = prepare()
        start = time.perf_counter()
        try:
          do()
        except Exception as e:  # pylint: disable=broad-except
          if name == "ours":
            raise
          # Stock CsvExampleGen does not run on every runner: report why, go on.
          times["baseline_error"] = f"{type(e).__name__}: {str(e).splitlines()[-1][:300]}"
          continue
        finally:
          shutil.rmtree(os.path.join(work, name), ignore_errors=True)
        times[name].append(time.perf_counter() - start)
  finally:
    if cluster is not None:
      times["dask_worker_peak_rss_kb"] = cluster.worker_peak_rss_kb()
      cluster.stop()
    shutil.rmtree(work, ignore_errors=True)
  return times


class LocalDask:
  """`dask scheduler` + N single-threaded `dask worker` processes on 127.0.0.1."""

  def __init__(self, workers: int, log_dir: str):
    import socket  # pylint: disable=g-import-not-at-top
    from distributed import Client  # pylint: disable=g-import-not-at-top
    os.makedirs(log_dir, exist_ok=True)
    with socket.socket() as sock:
      sock.bind(("127.0.0.1", 0))
      port = sock.getsockname()[1]
    self.address = f"127.0.0.1:{port}"
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    commands = [[dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                 "--no-dashboard"]]
    commands += [[dask, "worker", f"tcp://{self.address}", "--nthreads", "1",
                  "--nworkers", "1", "--no-dashboard", "--memory-limit", "0"]] * workers
    self._processes = []
    for i, command in enumerate(commands):
      log = open(os.path.join(log_dir, f"{i}.log"), "w")  # pylint: disable=consider-using-with
      self._processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))
      if i == 0:
        time.sleep(2)
    with Client(self.address, timeout=60) as client:
      client.wait_for_workers(workers, timeout=300)
      self._worker_pids = list(client.run(os.getpid).values())

  def worker_peak_rss_kb(self) -> int:
    """The largest VmHWM (peak RSS) of the worker processes, in kB."""
    peaks = []
    for pid in self._worker_pids:
      with open(f"/proc/{pid}/status") as f:
        peaks += [int(line.split()[1]) for line in f if line.startswith("VmHWM:")]
    return max(peaks)

  def stop(self):
    import signal  # pylint: disable=g-import-not-at-top
    for process in self._processes:
      os.killpg(process.pid, signal.SIGTERM)
    for process in self._processes:
      process.wait(timeout=60)


def _count_records(uri: str) -> int:
  """Records in every Split-*/ file of an Examples URI (gzip TFRecords)."""
  import glob  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  files = [f for f in glob.glob(os.path.join(uri, "Split-*", "*")) if os.path.isfile(f)]
  if not files:
    return 0
  dataset = tf.data.TFRecordDataset(files, compression_type="GZIP")
  return int(dataset.reduce(0, lambda n, _: n + 1))


def _trivial_pipeline_seconds(beam_args: Sequence[str]) -> float:
  """Seconds of a 10-element pipeline with the same Beam args: the runner's fixed cost
  (worker start-up in multi_processing mode), paid by both executors on every Do."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  p = beam.Pipeline(argv=list(beam_args))
  _ = (p | beam.Create(list(range(10))) | "Before" >> beam.Map(lambda x: x)
       | beam.Reshuffle() | "After" >> beam.Map(lambda x: x))
  result = p.run()
  result.wait_until_finish()
  seconds = time.perf_counter() - start
  client = getattr(result, "client", None)  # DaskRunner leaves its client open.
  if client is not None:
    client.close()
  return seconds


def _child_scale(rows: int, mode: str, features: int) -> Dict:
  """One synthetic ingest (``ingest.run``, the whole of Do except setting artifact
  properties; no TensorFlow or TFX import, so RSS is the ingest's own); returns seconds."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen import ingest, sources  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  work = tempfile.mkdtemp(prefix="bench_scale_")
  try:
    config = ExampleGenConfig(rows=rows, num_features=features).validate()
    start = time.perf_counter()
    summary = ingest.run(beam.Pipeline(argv=list(MODES[mode])), config,
                         sources.plan_source(config), work)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows_written": summary.total_rows}
  finally:
    shutil.rmtree(work, ignore_errors=True)


def _child_stock_csv(csv_path: str, mode: str, rows: int) -> Dict:
  """One stock CsvExampleGen ``Executor.Do`` on the CSV, alone in its process (so the
  launcher's peak RSS is stock's, TensorFlow and TFX imports included)."""
  times = _child_compare(csv_path, mode, 1, rows, sides=("baseline",))
  if times["baseline_error"]:
    raise RuntimeError(times["baseline_error"])
  return {"seconds": times["baseline"][0], "rows_written": rows}


def _child_scale_csv(csv_path: str, mode: str) -> Dict:
  """One ingest of a CSV file (``ingest.run``, label "y", split 4:1, no TensorFlow or TFX
  import); returns seconds and rows written."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen import ingest, sources  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  work = tempfile.mkdtemp(prefix="bench_scale_csv_")
  try:
    config = ExampleGenConfig(label="y", source=csv_path, split_ratios=dict(SPLITS)).validate()
    start, cpu = time.perf_counter(), time.process_time()
    summary = ingest.run(beam.Pipeline(argv=list(MODES[mode])), config,
                         sources.plan_source(config), work)
    seconds = time.perf_counter() - start
    # CPU seconds of the ingest call alone (the in-memory runner works in this process):
    # less sensitive to other jobs on the machine than wall time, imports excluded.
    return {"seconds": seconds, "rows_written": summary.total_rows,
            "ingest_cpu_seconds": time.process_time() - cpu}
  finally:
    shutil.rmtree(work, ignore_errors=True)


def _run_child(args: Sequence[str], timeout: Optional[float] = None) -> Dict:
  """Runs this script as a child under the RSS launcher; merges both JSON results."""
  cmd = [sys.executable, "-c", _LAUNCHER, sys.executable, os.path.abspath(__file__), *args]
  proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
  results = [json.loads(line[len(RESULT_PREFIX):]) for line in proc.stdout.splitlines()
             if line.startswith(RESULT_PREFIX)]
  if len(results) != 2 or results[-1]["rc"] != 0:
    raise RuntimeError(f"benchmark child {args} failed:\n{proc.stdout[-3000:]}\n"
                       f"{proc.stderr[-5000:]}")
  merged = dict(results[0])
  merged.update(results[1])
  return merged


# ----------------------------------------------------------------------------- benchmarks


def _summary(rows: int, seconds: List[float]) -> Dict:
  rates = [rows / s for s in seconds]
  return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def _round(value: float):
  return "" if value != value else round(value)  # NaN: no baseline on this runner.


def compare(rows: int, features: int, repeats: int, modes: Sequence[str],
            data_dir: str, dask_baseline: bool = False) -> List[Dict]:
  csv_path = make_csv(os.path.join(data_dir, f"ingest_{rows}x{features}", "data.csv"),
                      rows, features)
  results = []
  for mode in modes:
    child = _run_child(["--_child", "compare", "--csv", csv_path, "--mode", mode,
                        "--repeats", str(repeats), "--rows", str(rows)]
                       + (["--dask-baseline"] if dask_baseline else []))
    ours = _summary(rows, child["ours"])
    base = (_summary(rows, child["baseline"]) if child["baseline"] else
            {"median": float("nan"), "min": float("nan"), "max": float("nan")})
    dask_peak = child.get("dask_worker_peak_rss_kb")
    results.append({
        "benchmark": "ingest_vs_csv_example_gen",
        "command": (f"{os.path.relpath(sys.executable)} benchmarks/bench_ingest.py "
                    f"--rows {rows} --repeats {repeats} --modes {mode} --compare"
                    + (" --dask-baseline" if dask_baseline else "")),
        "runner": mode, "beam_args": " ".join(MODES[mode]) or "(DirectRunner default)",
        "rows": rows, "features": features,
        "csv_mb": round(os.path.getsize(csv_path) / 2**20, 1), "repeats": repeats,
        "baseline_rows_per_s": _round(base["median"]),
        "baseline_min": _round(base["min"]), "baseline_max": _round(base["max"]),
        "ours_rows_per_s": round(ours["median"]),
        "ours_min": round(ours["min"]), "ours_max": round(ours["max"]),
        "ratio": (round(ours["median"] / base["median"], 2) if child["baseline"] else ""),
        "runner_startup_s": round(child["runner_startup"][0], 1),
        "peak_rss_mb_both": round(child["peak_rss_kb"] / 1024),
        "dask_worker_peak_rss_mb": round(dask_peak / 1024) if dask_peak else "",
        "baseline_error": child.get("baseline_error") or "",
    })
  return results


def scaling(sizes: Sequence[int], features: int, mode: str, plot_path: Optional[str]
            ) -> List[Dict]:
  results = []
  for rows in sizes:
    child = _run_child(["--_child", "scale", "--rows", str(rows), "--mode", mode,
                        "--features", str(features)])
    results.append({
        "benchmark": "ingest_scaling_synthetic", "runner": mode, "rows": rows,
        "features": features, "ingest_seconds": round(child["seconds"], 2),
        "rows_per_s": round(rows / child["seconds"]),
        "process_wall_seconds": round(child["wall_seconds"], 2),
        "peak_rss_mb": round(child["peak_rss_kb"] / 1024),
        "rows_written": child["rows_written"],
    })
  if plot_path:
    _plot(results, plot_path)
    for r in results:
      r["plot"] = os.path.relpath(plot_path, os.path.dirname(HERE))
  return results


MIXED_SIZES = (1_000_000, 4_000_000, 10_000_000)
MIXED_PLOT = os.path.join(HERE, "plots", "ingest_mixed_rss.png")
MIXED_SECTION = os.path.join(HERE, "results", "ingest_mixed.md")


MIXED_SIDES = ("ours", "numeric", "stock")


def mixed_scaling(sizes: Sequence[int], data_dir: str, stock_rows: int,
                  plot_path: Optional[str], sides: Sequence[str] = MIXED_SIDES,
                  command: str = "", pairs: int = 1) -> List[Dict]:
  """The mixed-type CSV (make_mixed_csv) at each size through ours (``ingest.run``), and
  through stock CsvExampleGen at ``stock_rows`` only; plus a numeric-only CSV of the
  same column count at the smallest size through ours. One process per run, each under
  the RSS launcher; in-memory DirectRunner. ``sides``: which of MIXED_SIDES to run (a
  40M-row run of ours alone, merged into the earlier results with --mixed-merge); each
  row records its ``command``, start time, load average and commit. ``pairs``: runs of
  ours on the mixed and the numeric CSV at the smallest size, alternating (mixed first,
  then numeric first, ...), so both see the same load; their rows give the median
  seconds and each pair's mixed/numeric rows/s ratio."""
  import datetime  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, HERE)
  import benchutil  # pylint: disable=g-import-not-at-top
  results = []
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                          capture_output=True, check=False).stdout.strip() or "?"

  def measure(kind, side, rows, args):
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    load = benchutil.load_average().split()[0]
    print(f"[bench_ingest] {kind} {side} {rows:,} rows: started {when}", flush=True)
    child = _run_child(args)
    child.update(when=when, load=load)
    print(f"[bench_ingest] {kind} {side} {rows:,} rows: {round(child['seconds'], 1)} s, "
          f"peak RSS {round(child['peak_rss_kb'] / 1024)} MB", flush=True)
    return child

  def record(kind, side, rows, csv_path, children, **extra):
    seconds = statistics.median(c["seconds"] for c in children)
    results.append({
        "benchmark": "ingest_mixed_scaling", "data": kind, "side": side, "rows": rows,
        "csv_mb": round(os.path.getsize(csv_path) / 2**20), "seconds": round(seconds, 1),
        "rows_per_s": round(rows / seconds),
        "process_wall_seconds": round(statistics.median(c["wall_seconds"] for c in children), 1),
        "peak_rss_mb": round(max(c["peak_rss_kb"] for c in children) / 1024),
        "cpu_seconds": round(statistics.median(c["cpu_seconds"] for c in children), 1),
        "rows_written": children[0]["rows_written"], "runs": len(children),
        "all_seconds": [round(c["seconds"], 1) for c in children],
        "run": children[0]["when"], "load_1min": "/".join(c["load"] for c in children),
        "command": command, "commit": commit, **extra})

  def ours(path):
    return ["--_child", "scale_csv", "--csv", path, "--mode", "in_memory"]

  paths = {rows: make_mixed_csv(os.path.join(data_dir, f"mixed_{rows}", "data.csv"), rows)
           for rows in sizes}
  smallest = min(sizes)
  numeric_path = None
  if "numeric" in sides:
    numeric_path = make_csv(os.path.join(data_dir, f"ingest_{smallest}x{MIXED_FLOATS + 3}",
                                         "data.csv"), smallest, MIXED_FLOATS + 3)
  if "ours" in sides:
    for rows in sizes:
      if rows == smallest and numeric_path:
        continue  # Below, paired with the numeric runs.
      record("mixed", "ours", rows, paths[rows], [measure("mixed", "ours", rows,
                                                         ours(paths[rows]))])
  if numeric_path:
    mixed_runs, numeric_runs = [], []
    for i in range(pairs if "ours" in sides else 1):
      order = [("mixed", paths[smallest], mixed_runs), ("numeric", numeric_path, numeric_runs)]
      for kind, path, runs in (order if i % 2 == 0 or "ours" not in sides else order[::-1]):
        if kind == "mixed" and "ours" not in sides:
          continue
        runs.append(measure(kind, "ours", smallest, ours(path)))
    ratios = [round(n["seconds"] / m["seconds"], 2) for m, n in zip(mixed_runs, numeric_runs)]
    cpu_ratios = [round(n["cpu_seconds"] / m["cpu_seconds"], 2)
                  for m, n in zip(mixed_runs, numeric_runs)]
    if mixed_runs:
      record("mixed", "ours", smallest, paths[smallest], mixed_runs)
    record("numeric", "ours", smallest, numeric_path, numeric_runs,
           **({"pair_ratios": ratios, "pair_cpu_ratios": cpu_ratios} if ratios else {}))
  if "stock" in sides and stock_rows in paths:  # Last: the longest run (about 20x ours).
    record("mixed", "stock CsvExampleGen", stock_rows, paths[stock_rows],
           [measure("mixed", "stock CsvExampleGen", stock_rows,
                    ["--_child", "stock_csv", "--csv", paths[stock_rows], "--mode",
                     "in_memory", "--rows", str(stock_rows)])])
  if plot_path:
    _plot_mixed(results, plot_path)
  return results


def merge_mixed(previous: List[Dict], new: List[Dict]) -> List[Dict]:
  """``previous`` results with those of ``new`` added, a new row replacing an earlier
  one of the same data, side and rows; ordered by data, side and rows."""
  key = lambda r: (r["data"], r["side"], r["rows"])  # pylint: disable=unnecessary-lambda-assignment
  merged = {key(r): r for r in previous}
  merged.update({key(r): r for r in new})
  order = {"mixed": 0, "numeric": 1}
  return sorted(merged.values(), key=lambda r: (r["side"] != "ours", order.get(r["data"], 2),
                                                r["rows"]))


def _plot_mixed(results: List[Dict], path: str):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
  for side, style in (("ours", "o-"), ("stock CsvExampleGen", "s")):
    rs = [r for r in results if r["data"] == "mixed" and r["side"] == side]
    if not rs:
      continue
    label = "PartitionedExampleGen" if side == "ours" else side
    ax1.plot([r["rows"] / 1e6 for r in rs], [r["peak_rss_mb"] for r in rs], style,
             label=label, markersize=8)
    ax2.plot([r["rows"] / 1e6 for r in rs], [r["rows_per_s"] / 1e3 for r in rs], style,
             label=label, markersize=8)
    for r in rs:  # Runs were made under different loads of the shared machine.
      ax2.annotate(f"load {str(r.get('load_1min', '?')).split('/')[0]}",
                   (r["rows"] / 1e6, r["rows_per_s"] / 1e3), textcoords="offset points",
                   xytext=(4, 4), fontsize=7)
  ax1.set_xlabel("rows of the mixed-type CSV (millions)")
  ax1.set_ylabel("peak RSS of the process (MB)")
  ax1.set_ylim(bottom=0)
  ax2.set_xlabel("rows of the mixed-type CSV (millions)")
  ax2.set_ylabel("thousand rows/s (label: 1-min load)")
  ax2.set_ylim(bottom=0)
  for ax in (ax1, ax2):
    ax.grid(True, alpha=0.3)
    ax.legend()
  fig.suptitle("Ingest of a mixed-type CSV (6 floats with empty cells, an int, 2 strings), "
               "in-memory DirectRunner")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def mixed_section(results: List[Dict]) -> str:
  """The RESULTS.md section (benchmarks/results/ingest_mixed.md) of mixed_scaling runs;
  each row names its run (start time, 1-minute load average, commit) and command."""
  mixed = [r for r in results if r["data"] == "mixed" and r["side"] == "ours"]
  stock = [r for r in results if r["side"] != "ours"]
  numeric = [r for r in results if r["data"] == "numeric"]
  commands = sorted({r.get("command") or "(not recorded)" for r in results})
  lines = ["## Ingest scaling: mixed-type CSV, rows/s and peak RSS (`benchmarks/bench_ingest.py "
           "--mixed-scaling`)", "",
           "Commands: " + "; ".join(f"`{c}`" for c in commands) + ". "
           "Data: `make_mixed_csv` (6 float columns with 5% empty cells, an int, "
           "a 6-value category, a free-text id with 5% empty cells, a float label), split 4:1. "
           "Ours: `ingest.run` (Do without the artifact bookkeeping, no TensorFlow import); "
           "stock: `CsvExampleGen` `Executor.Do` (its process imports TensorFlow and TFX, "
           "which its RSS includes). Each run alone in a fresh process (a row of several runs "
           "shows their median seconds and largest RSS), on the shared 2-core machine (other jobs ran beside it: the load column); peak RSS "
           "from `getrusage(RUSAGE_CHILDREN)` of a launcher that only waits for it.", "",
           "| data | executor | rows | CSV MB | seconds | rows/s | CPU s | peak RSS MB | "
           "run (load, code) |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in results:
    lines.append(f"| {r['data']} | {r['side']} | {r['rows']:,} | {r['csv_mb']} | "
                 f"{r['seconds']} | {r['rows_per_s']:,} | {r.get('cpu_seconds', '')} | "
                 f"{r['peak_rss_mb']} | "
                 f"{r.get('run', '?')} ({r.get('load_1min', '?')}, {r.get('commit', '?')}) |")
  lines.append("")
  if mixed:
    lo, hi = min(r["peak_rss_mb"] for r in mixed), max(r["peak_rss_mb"] for r in mixed)
    lines.append(f"- Peak RSS from {mixed[0]['rows']:,} to {mixed[-1]['rows']:,} rows: "
                 f"{lo} to {hi} MB ({hi / lo:.2f}x for {mixed[-1]['rows'] / mixed[0]['rows']:.0f}x "
                 "the rows). The read ranges (8 MB of the file each) are redistributed, not "
                 "the lines, so no stage holds the input.")
  for s in stock:
    ours = next((r for r in mixed if r["rows"] == s["rows"]), None)
    if ours:
      lines.append(f"- Mixed-type rows/s at {s['rows']:,} rows: ours {ours['rows_per_s']:,}, "
                   f"stock {s['rows_per_s']:,}: **{ours['rows_per_s'] / s['rows_per_s']:.1f}x** "
                   f"(target >= 10x). Peak RSS ours {ours['peak_rss_mb']} MB, stock "
                   f"{s['peak_rss_mb']} MB.")
      if ours.get("cpu_seconds") and s.get("cpu_seconds"):
        lines.append(f"  CPU seconds (user + sys of the process tree; less sensitive to the "
                     f"load than wall time, but stock may use both cores where ours uses "
                     f"one): ours {ours['cpu_seconds']}, stock {s['cpu_seconds']}: "
                     f"{s['cpu_seconds'] / ours['cpu_seconds']:.1f}x.")
  for n in numeric:
    ours = next((r for r in mixed if r["rows"] == n["rows"]), None)
    if ours:
      lines.append(f"- Mixed vs numeric-only (same rows, same 10 columns): "
                   f"{ours['rows_per_s']:,} vs {n['rows_per_s']:,} rows/s (medians), "
                   f"{ours['rows_per_s'] / n['rows_per_s']:.2f}x (target >= 0.7x).")
      if n.get("pair_ratios"):
        lines.append(f"  Run in {len(n['pair_ratios'])} alternating pairs (seconds: mixed "
                     f"{ours['all_seconds']}, numeric {n['all_seconds']}); each pair's "
                     f"ratio: {n['pair_ratios']}, median "
                     f"{statistics.median(n['pair_ratios']):.2f}x."
                     + (f" By CPU seconds: {n['pair_cpu_ratios']}, median "
                        f"{statistics.median(n['pair_cpu_ratios']):.2f}x."
                        if n.get("pair_cpu_ratios") else ""))
  lines += ["", f"![ingest_mixed_rss.png](plots/{os.path.basename(MIXED_PLOT)})", ""]
  return "\n".join(lines)


def _plot(results: List[Dict], path: str):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  rows = [r["rows"] for r in results]
  fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
  ax1.loglog(rows, [r["ingest_seconds"] for r in results], "o-", label="ingest.run")
  ax1.loglog(rows, [r["process_wall_seconds"] for r in results], "s--",
             label="process (incl. imports)")
  ax1.set_xlabel("synthetic rows")
  ax1.set_ylabel("seconds")
  ax1.legend()
  ax1.grid(True, which="both", alpha=0.3)
  ax2.semilogx(rows, [r["peak_rss_mb"] for r in results], "o-")
  ax2.set_xlabel("synthetic rows")
  ax2.set_ylabel("peak RSS of the process tree (MB)")
  ax2.set_ylim(bottom=0)
  ax2.grid(True, which="both", alpha=0.3)
  fig.suptitle(f"PartitionedExampleGen scaling ({results[0]['runner']}, "
               f"{results[0]['features']} features)")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def run(smoke: bool, rows: Optional[int] = None, repeats: int = 3,
        modes: Sequence[str] = DEFAULT_MODES, do_compare: bool = True,
        do_scaling: bool = True, scaling_sizes: Optional[Sequence[int]] = None,
        features: int = 8, data_dir: Optional[str] = None,
        dask_baseline: bool = False) -> List[Dict]:
  """Runs the benchmarks; ``smoke`` uses tiny sizes and the in-memory runner only."""
  data_dir = data_dir or os.path.join(tempfile.gettempdir(), "tfx_parallel_bench")
  results = []
  if smoke:
    rows, modes, scaling_sizes = 2000, ("in_memory",), (1000, 10_000)
  if do_compare:
    results += compare(rows or 1_000_000, features, repeats, modes, data_dir, dask_baseline)
  if do_scaling:
    sizes = scaling_sizes or (100_000, 1_000_000, 10_000_000)
    # A smoke run's plot goes under the work dir (benchutil.plot_path's smoke folder), never
    # over a committed file: tests run the smoke mode from a checkout.
    plot = (os.path.join(HERE, "_work", "plots-smoke", "ingest_scaling.png") if smoke
            else os.path.join(HERE, "ingest_scaling.png"))
    os.makedirs(os.path.dirname(plot), exist_ok=True)
    results += scaling(sizes, features, "in_memory", plot)
  return results


def markdown(results: List[Dict]) -> str:
  lines = []
  for kind in sorted({r["benchmark"] for r in results}):
    rows = [r for r in results if r["benchmark"] == kind]
    columns = [c for c in rows[0] if c != "benchmark"]
    lines += [f"**{kind}**", "", "| " + " | ".join(columns) + " |",
              "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    lines.append("")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--features", type=int, default=8)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                      help="comma-separated runner modes: in_memory,multi_processing,dask")
  parser.add_argument("--smoke", action="store_true", help="tiny sizes, under a minute")
  parser.add_argument("--scaling", action="store_true", help="only the scaling benchmark")
  parser.add_argument("--compare", action="store_true", help="only the comparison")
  parser.add_argument("--scaling-rows", default="100000,1000000,10000000")
  parser.add_argument("--data-dir", default=None, help="where the benchmark CSV is cached")
  parser.add_argument("--json", default=None, help="also write the results to this file")
  parser.add_argument("--dask-baseline", action="store_true",
                      help="also run stock CsvExampleGen on Dask (it writes no files)")
  parser.add_argument("--mixed-scaling", action="store_true",
                      help="only the mixed-type CSV scaling run (rows/s and peak RSS, ours at "
                           "--mixed-rows, stock at the first size); writes "
                           "benchmarks/results/ingest_mixed.md and its plot")
  parser.add_argument("--mixed-rows", default=",".join(str(n) for n in MIXED_SIZES))
  parser.add_argument("--mixed-sides", default=",".join(MIXED_SIDES),
                      help="which runs of --mixed-scaling: ours (every size), numeric "
                           "(ours, smallest size), stock (smallest size)")
  parser.add_argument("--mixed-pairs", type=int, default=1,
                      help="alternating runs of ours on the mixed and the numeric CSV at "
                           "the smallest size (the mixed/numeric ratio is their median)")
  parser.add_argument("--mixed-merge", action="store_true",
                      help="merge into benchmarks/ingest_mixed.json (a new row replaces "
                           "one of the same data, side and rows) and redraw from all rows")
  parser.add_argument("--_child", choices=["compare", "scale", "scale_csv", "stock_csv"],
                      help=argparse.SUPPRESS)
  parser.add_argument("--csv", help=argparse.SUPPRESS)
  parser.add_argument("--mode", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)

  if args._child == "compare":  # pylint: disable=protected-access
    print(RESULT_PREFIX + json.dumps(_child_compare(
        args.csv, args.mode, args.repeats, args.rows,
        run_baseline=args.mode != "dask" or args.dask_baseline)), flush=True)
    return
  if args._child == "stock_csv":  # pylint: disable=protected-access
    print(RESULT_PREFIX + json.dumps(_child_stock_csv(args.csv, args.mode, args.rows)),
          flush=True)
    return
  if args.mixed_scaling:
    sizes = [int(float(n)) for n in args.mixed_rows.split(",")]
    sides = [side for side in args.mixed_sides.split(",") if side]
    command = (f"{os.path.relpath(sys.executable)} benchmarks/bench_ingest.py --mixed-scaling "
               f"--mixed-rows {args.mixed_rows}"
               + (f" --mixed-sides {args.mixed_sides}" if tuple(sides) != MIXED_SIDES else "")
               + (f" --mixed-pairs {args.mixed_pairs}" if args.mixed_pairs != 1 else "")
               + (" --mixed-merge" if args.mixed_merge else ""))
    results = mixed_scaling(sizes, args.data_dir or os.path.join(
        tempfile.gettempdir(), "tfx_parallel_bench"), sizes[0], None, sides, command,
                            pairs=args.mixed_pairs)
    json_path = os.path.join(HERE, "ingest_mixed.json")
    if args.mixed_merge and os.path.exists(json_path):
      with open(json_path) as f:
        results = merge_mixed(json.load(f), results)
    _plot_mixed(results, MIXED_PLOT)
    text = mixed_section(results)
    os.makedirs(os.path.dirname(MIXED_SECTION), exist_ok=True)
    with open(MIXED_SECTION, "w") as f:
      f.write(text)
    with open(json_path, "w") as f:
      json.dump(results, f, indent=1)
    print(text)
    return
  if args._child == "scale_csv":  # pylint: disable=protected-access
    print(RESULT_PREFIX + json.dumps(_child_scale_csv(args.csv, args.mode)), flush=True)
    return
  if args._child == "scale":  # pylint: disable=protected-access
    print(RESULT_PREFIX + json.dumps(_child_scale(args.rows, args.mode, args.features)),
          flush=True)
    return

  both = not (args.scaling or args.compare)
  results = run(smoke=args.smoke, rows=args.rows, repeats=args.repeats,
                modes=[m for m in args.modes.split(",") if m],
                do_compare=both or args.compare, do_scaling=both or args.scaling,
                scaling_sizes=[int(float(s)) for s in args.scaling_rows.split(",")],
                features=args.features, data_dir=args.data_dir,
                dask_baseline=args.dask_baseline)
  print(markdown(results))
  for r in results:
    print(json.dumps(r))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  main()
