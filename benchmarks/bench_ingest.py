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
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "print('" + RESULT_PREFIX + "' + json.dumps({'rc': rc, 'peak_rss_kb': rss, "
    "'wall_seconds': time.time() - t}))\n")


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


def make_mixed_csv(path: str, rows: int, seed: int = 0) -> str:
  """Writes a mixed-type CSV unless it already exists: f0..f5 floats (5% empty cells),
  n0 an int, s0 a category (6 values), s1 a free text id (5% empty), y a float label.
  About 80 bytes a row; written in blocks of 100,000 rows."""
  if os.path.exists(path):
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
                   run_baseline: bool = True) -> Dict:
  """Runs baseline and ours alternately ``repeats`` times; returns Do seconds of each.
  ``run_baseline`` False (Dask without --dask-baseline) skips the stock executor."""
  import tfx_parallel.pipeline.tfenv  # pylint: disable=g-import-not-at-top,unused-import
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
    config = ExampleGenConfig(source=csv_path, split_ratios=dict(SPLITS)).validate()
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
      order = [("baseline", baseline), ("ours", ours)]
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


def _child_scale_csv(csv_path: str, mode: str) -> Dict:
  """One ingest of a CSV file (``ingest.run``, label "y", split 4:1, no TensorFlow or TFX
  import); returns seconds and rows written."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen import ingest, sources  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  work = tempfile.mkdtemp(prefix="bench_scale_csv_")
  try:
    config = ExampleGenConfig(source=csv_path, split_ratios=dict(SPLITS)).validate()
    start = time.perf_counter()
    summary = ingest.run(beam.Pipeline(argv=list(MODES[mode])), config,
                         sources.plan_source(config), work)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "rows_written": summary.total_rows}
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
    plot = os.path.join(HERE, "ingest_scaling_smoke.png" if smoke else "ingest_scaling.png")
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
  parser.add_argument("--_child", choices=["compare", "scale", "scale_csv"],
                      help=argparse.SUPPRESS)
  parser.add_argument("--csv", help=argparse.SUPPRESS)
  parser.add_argument("--mode", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)

  if args._child == "compare":  # pylint: disable=protected-access
    print(RESULT_PREFIX + json.dumps(_child_compare(
        args.csv, args.mode, args.repeats, args.rows,
        run_baseline=args.mode != "dask" or args.dask_baseline)), flush=True)
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
