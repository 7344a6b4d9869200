"""The whole local pipeline vs a pipeline of stock TFX components doing the same work.

Data: the seed problem with 8 features as one CSV (benchmarks/_work/e2e_data), read by
both pipelines; split train:eval 4:1 by hash in both.

* ours: ``tfx_parallel.pipeline.local_runner.run(PipelineConfig(...))``:
  PartitionedExampleGen (CSV source) -> DistributedTrainer (layout single) ->
  ConvergenceEvaluator;
* stock: CsvExampleGen (output_config 4:1) -> Trainer (``stock_trainer_module.run_fn``:
  plain tf_keras, same model, optimizer, global batch and steps) -> Evaluator
  (TFMA, ``tfma_stage.eval_config``).

Both run with LocalDagRunner, caching off, a fresh home per run, each in its own
process (``python benchmarks/bench_e2e.py --child ours|stock``), alternating. Figures:
process wall time (imports included: what a user waits for), per-component wall time
from ML Metadata (execution ``last_update_time - create_time``), and the process's peak
RSS (``os.wait4`` rusage of the child, the same quantity as
``getrusage(RUSAGE_CHILDREN).ru_maxrss``; it includes the trainer subprocess, which the
child waits for).
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import sys
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil as bu  # noqa: E402

BATCH = 512
LR = 0.1
COMPONENT_ORDER = ("ExampleGen", "Trainer", "Evaluator")


def sizes(smoke: bool) -> dict:
  return dict(rows=5_000, steps=20, reps=1) if smoke else dict(rows=100_000, steps=200, reps=3)


def _short(type_name: str) -> str:
  """'tfx.components.trainer.component.Trainer' -> 'Trainer' etc., then a stage name."""
  name = type_name.split(".")[-1]
  for stage in COMPONENT_ORDER:
    if stage in name:
      return stage
  return name


def _executions(metadata_path: str):
  """(stage, create epoch s, last update epoch s) of every execution in the store."""
  from ml_metadata import metadata_store  # pylint: disable=g-import-not-at-top
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = metadata_path
  store = metadata_store.MetadataStore(cfg)
  out = []
  for e in store.get_executions():
    [t] = store.get_execution_types_by_id([e.type_id])
    out.append((_short(t.name), e.create_time_since_epoch / 1000.0,
                e.last_update_time_since_epoch / 1000.0))
  return out


def component_seconds(metadata_path: str) -> Dict[str, float]:
  out = {}
  for stage, created, updated in _executions(metadata_path):
    out[stage] = out.get(stage, 0.0) + updated - created
  return out


def run_ours(csv: str, home: str, steps: int) -> str:
  from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import local_runner  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline.config import PipelineConfig  # pylint: disable=g-import-not-at-top
  config = PipelineConfig(
      pipeline_name="bench-ours",
      example_gen=ExampleGenConfig(source=csv, label="y"),
      trainer=TrainerConfig(layout="single", batch_size=BATCH, learning_rate=LR,
                            optimizer="sgd", steps=steps, checkpoint_every=0),
      evaluator=EvaluatorConfig(require_converged=False),
      enable_cache=False)
  return local_runner.run(config, home=home)


def run_ours_before(csv: str, home: str, steps: int) -> str:
  """Ours as it was before the fixed-cost work (issue #30), on today's components, as a
  side-by-side baseline: the pipeline process imports ``tfx.v1`` (Google Cloud clients
  and all), and the training process is started only when the trainer launches."""
  import contextlib  # pylint: disable=g-import-not-at-top
  from tfx import v1  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  from tfx_parallel.components.distributed_trainer.run import prestart  # pylint: disable=g-import-not-at-top
  prestart.held = lambda wanted=True: contextlib.nullcontext()  # No early process.
  return run_ours(csv, home, steps)


def run_ours_eager(csv: str, home: str, steps: int) -> str:
  """Ours as it was before issue 42's deferred imports, as a side-by-side baseline: the
  pipeline process imports all of ``tfx.components`` (every stock component) and of
  ``tensorflow_model_analysis``, as their ``__init__`` files do when anything under them
  is imported; pipeline/deferred_imports.py then has nothing to defer."""
  import tensorflow_model_analysis  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tfx.components  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  return run_ours(csv, home, steps)


RUNNERS = {"ours": run_ours, "before": run_ours_before, "eager": run_ours_eager}


def run_stock(csv: str, home: str, steps: int) -> str:
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx.proto import example_gen_pb2  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import tfma_stage  # pylint: disable=g-import-not-at-top
  output = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(splits=[
      example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
      example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)]))
  example_gen = tfx.components.CsvExampleGen(input_base=os.path.dirname(csv),
                                             output_config=output)
  trainer = tfx.components.Trainer(
      run_fn="stock_trainer_module.run_fn", examples=example_gen.outputs["examples"],
      train_args=tfx.proto.TrainArgs(num_steps=steps),
      eval_args=tfx.proto.EvalArgs(num_steps=0),
      custom_config={"feature_keys": bu.feature_keys(), "label_key": "y",
                     "batch_size": BATCH, "learning_rate": LR})
  evaluator = tfma_stage.stock_evaluator(trainer.outputs["model"],
                                         example_gen.outputs["examples"], "y")
  metadata_path = os.path.join(home, "metadata.sqlite")
  pipeline = tfx.dsl.Pipeline(
      pipeline_name="bench-stock", pipeline_root=os.path.join(home, "pipelines", "stock"),
      components=[example_gen, trainer, evaluator], enable_cache=False,
      metadata_connection_config=tfx.orchestration.metadata
      .sqlite_metadata_connection_config(metadata_path))
  tfx.orchestration.LocalDagRunner().run(pipeline)
  return metadata_path


class _StampedStdout:
  """Every line written to file descriptor 1 (this process's and its children's, such as
  the training process's ``[trainer]`` lines) with the epoch second it arrived at, passed
  on to the real stdout: the phases of a run from its own console."""

  def __init__(self):
    import threading  # pylint: disable=g-import-not-at-top
    self.lines: List[tuple] = []
    sys.stdout.flush()
    self._real = os.dup(1)
    read, write = os.pipe()
    os.dup2(write, 1)
    os.close(write)
    self._reader = threading.Thread(target=self._read, args=(read,), daemon=True)
    self._reader.start()

  def _read(self, fd: int):
    with os.fdopen(fd, "rb") as pipe, os.fdopen(self._real, "wb", closefd=False) as real:
      for line in pipe:
        self.lines.append((time.time(), line.decode("utf-8", "replace").rstrip("\n")))
        real.write(line)
        real.flush()

  def close(self) -> List[tuple]:
    sys.stdout.flush()
    os.dup2(self._real, 1)  # Closes the pipe's last write end: the reader sees EOF.
    self._reader.join(timeout=30)
    return self.lines


def child(which: str, csv: str, home: str, steps: int, profile: str = "") -> dict:
  """One pipeline run; ``profile``: also write a cProfile of this process there. Returns
  the run's figures and its ``[trainer]`` console lines with their epoch seconds."""
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # An entry point: before TensorFlow is imported.
  profiler = None
  if profile:
    import cProfile  # pylint: disable=g-import-not-at-top
    profiler = cProfile.Profile()
    profiler.enable()
  stamped = _StampedStdout()
  try:
    start, run_start = time.perf_counter(), time.time()
    metadata = RUNNERS.get(which, run_stock)(csv, home, steps)
    seconds = time.perf_counter() - start
  finally:
    lines = stamped.close()
  if profiler is not None:
    profiler.disable()
    profiler.dump_stats(profile)
  return {"pipeline_seconds": seconds, "components": component_seconds(metadata),
          "run_start": run_start, "run_end": time.time(),
          "executions": sorted(_executions(metadata), key=lambda e: e[1]),
          "trainer_lines": [(t, text) for t, text in lines if text.startswith("[trainer]")]}


# The Trainer execution in phases, each ending at the first console line that starts with
# its marker (the last one, "exit", at the execution's end in ML Metadata).
TRAINER_PHASES = (
    ("scan (executor: describe, stats.prepare_all)", "[trainer] task"),
    ("checks, hand-off, child set-up to the model line", "[trainer] model "),
    ("model build, restore, length", "[trainer] length"),
    ("input cache load", "[trainer] input cache"),
    ("eval input, variable record", "[trainer] layout"),
    ("initial eval, fit set-up and tracing, first steps", "[trainer] step "),
    ("training steps and final eval", "[trainer] step {steps}/{steps} "),
    ("export, history.json, loss.png", "[trainer] done"),
    ("child exit, executor publishes", None))


def trainer_phases(r: dict, steps: int) -> Dict[str, float]:
  """Seconds of each TRAINER_PHASES part of one run's Trainer execution; a phase whose
  marker line is missing gets 0 (its time falls into the next)."""
  [(_, created, updated)] = [e for e in r["executions"] if e[0] == "Trainer"][:1]
  out, last = {}, created
  for name, marker in TRAINER_PHASES:
    if marker is None:
      end = updated
    else:
      marker = marker.format(steps=steps)
      end = next((t for t, text in r.get("trainer_lines", []) if text.startswith(marker)
                  and t >= last), last)
    out[name] = max(end - last, 0.0)
    last = max(end, last)
  return out


# ----------------------------------------------------------------------------- overhead

OVERHEAD_SECTION = os.path.join(bu.BENCH_DIR, "results", "e2e_overhead.md")
# Frames that only wrap others (the profile's top items are the ones below them).
_WRAPPERS = ("<built-in method builtins.exec>", "bench_e2e.py", "<string>:1(<module>)")


def profile_top(path: str, n: int = 12) -> List[tuple]:
  """(cumulative seconds, calls, function) of the ``n`` frames with the most cumulative
  time in a cProfile dump, without pure wrappers: a frame within 3% of the cumulative
  time of one already listed is taken as a pass-through of it and left out."""
  import pstats  # pylint: disable=g-import-not-at-top
  stats = pstats.Stats(path).stats
  rows = []
  for (filename, line, name), (_, calls, _, cumulative, _) in stats.items():
    short = (filename.split("site-packages/")[-1] if "site-packages/" in filename else
             os.path.relpath(filename, bu.REPO) if filename.startswith(bu.REPO) else filename)
    where = f"{short}:{line}({name})"
    if filename == "~":
      where = name
    if any(w in where for w in _WRAPPERS):
      continue
    rows.append((cumulative, calls, where))
  kept = []
  for row in sorted(rows, reverse=True):
    if all(abs(row[0] - k[0]) > 0.03 * k[0] for k in kept):
      kept.append(row)
    if len(kept) == n:
      break
  return kept


def fresh_import_seconds(module: str) -> float:
  """Wall seconds of ``python -c 'import MODULE'`` in a fresh process (interpreter start
  included): what every process that needs the module pays before its first line."""
  return bu.run_python(["-c", f"import tfx_parallel.components.common.tfenv as e; e.prepare(); import {module}"],
                       timeout=300)["seconds"]


OVERHEAD_JSON = os.path.join(bu.BENCH_DIR, "e2e_overhead.json")


OVERHEAD_VARIANTS = ("ours", "before", "stock")


def overhead(rows: int, steps: int, rounds: int = 3) -> dict:
  """``rounds`` rounds of the three pipelines back to back (ours, ours as before the
  fixed-cost work, stock), then one profiled run of ours; returns what overhead_section
  renders (also written to OVERHEAD_JSON, the profile to _work/e2e_runs/ours.prof)."""
  import datetime  # pylint: disable=g-import-not-at-top
  load_before, when = bu.load_average(), datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
  csv = bu.write_csv(os.path.join(bu.work_dir(f"e2e_data_{rows}"), "data.csv"), rows)
  prof = os.path.join(bu.work_dir("e2e_runs"), "ours.prof")

  def one(which: str, label: str, profile: str = "") -> dict:
    home = os.path.join(bu.work_dir("e2e_runs"), f"overhead-{label}")
    shutil.rmtree(home, ignore_errors=True)
    out = bu.run_python([os.path.abspath(__file__), "--child", which, "--csv", csv, "--home",
                         home, "--steps", str(steps)]
                        + (["--profile", profile] if profile else []), timeout=1200)
    r = bu.last_json_line(out["stdout"])
    r["process_seconds"] = out["seconds"]
    r["load"] = bu.load_average()
    print(f"[bench_e2e] {label}: {out['seconds']:.1f} s process, components "
          f"{ {k: round(v, 1) for k, v in r['components'].items()} }, load {r['load']}",
          flush=True)
    shutil.rmtree(home, ignore_errors=True)
    return r

  runs: Dict[str, List[dict]] = {w: [] for w in OVERHEAD_VARIANTS}
  for i in range(rounds):
    for which in OVERHEAD_VARIANTS:
      runs[which].append(one(which, f"{which}-{i}"))
  profiled = one("ours", "ours-profiled", prof)
  imports = {m: fresh_import_seconds(m) for m in (
      "tensorflow", "tfx.v1", "tfx_parallel.pipeline.pipeline",
      "tfx_parallel.components.distributed_trainer.run.train")}
  from tfx_parallel.components.distributed_trainer.run import prestart  # pylint: disable=g-import-not-at-top
  data = {"rows": rows, "steps": steps, "when": when, "load_before": load_before,
          "preload": list(prestart.PRELOAD),
          "load_after": bu.load_average(), "runs": runs, "profiled": profiled,
          "imports": imports, "top": profile_top(prof),
          "profile_imports_s": profile_seconds(prof, "_find_and_load"),
          "profile_trainer_wait_s": profile_seconds(prof, "_wait_all"),
          "profile_total_s": profile_seconds(prof, "run")}
  with open(OVERHEAD_JSON, "w") as f:
    json.dump(data, f, indent=1)
  return data


def profile_seconds(path: str, name: str) -> float:
  """The largest cumulative seconds of a function called ``name`` in a cProfile dump."""
  import pstats  # pylint: disable=g-import-not-at-top
  return max((v[3] for (_, _, n), v in pstats.Stats(path).stats.items() if n == name),
             default=0.0)


def _median(values: List[float]) -> float:
  import statistics  # pylint: disable=g-import-not-at-top
  return statistics.median(values)


def overhead_summary(data: dict) -> Dict[str, dict]:
  """Per variant: median process wall, component and fixed seconds, and the per-round
  ratios of process wall to stock's run of the same round."""
  out = {}
  for which, runs in data["runs"].items():
    fixed = [r["process_seconds"] - sum(r["components"].values()) for r in runs]
    out[which] = {
        "wall": _median([r["process_seconds"] for r in runs]),
        "walls": [r["process_seconds"] for r in runs],
        "fixed": _median(fixed),
        "components": {c: _median([r["components"].get(c, 0.0) for r in runs])
                       for c in COMPONENT_ORDER},
        "ratios": [r["process_seconds"] / s["process_seconds"]
                   for r, s in zip(runs, data["runs"]["stock"])]}
  return out


def overhead_section(data: dict) -> str:
  m = overhead_summary(data)
  ours, before, stock = m["ours"], m["before"], m["stock"]
  rows, steps, rounds = data["rows"], data["steps"], len(data["runs"]["stock"])
  ratio = _median(ours["ratios"])
  lines = [
      "## End to end: fixed overhead (`benchmarks/bench_e2e.py --overhead`)", "",
      f"Command: `.venv/bin/python benchmarks/bench_e2e.py --overhead --rows {rows} --steps "
      f"{steps} --rounds {rounds}`; run {data['when']}"
      + (f" at commit {data['commit']}" if data.get("commit") else "")
      + f"; load average before: {data['load_before']}; after: {data['load_after']} (2 cores shared with other "
      f"jobs: read the ratios, which compare runs of the same round). {rounds} rounds of "
      f"three pipelines back to back, each in its own process ({rows:,} rows, {steps} steps "
      f"of batch {BATCH}, linear model): **ours**; **before**: ours as it was before the "
      "fixed-cost work (`run_ours_before`: the pipeline process imports `tfx.v1`, the "
      "training process starts only when the trainer launches); **stock** "
      "(CsvExampleGen -> Trainer -> Evaluator). Then one run of ours under cProfile. "
      "Fixed overhead = process wall time minus the three components' ML Metadata "
      "execution times: interpreter start, imports, input checks, pipeline compilation, "
      "ML Metadata set-up and the orchestration between components. Medians of the "
      "rounds.", "",
      "| pipeline | process wall s (median) | each round | ExampleGen s | Trainer s | "
      "Evaluator s | fixed overhead s | wall / stock's (per round) |",
      "|---|---|---|---|---|---|---|---|"]
  for name in OVERHEAD_VARIANTS:
    r = m[name]
    c = r["components"]
    lines.append(
        f"| {name} | {r['wall']:.1f} | {', '.join(f'{w:.1f}' for w in r['walls'])} | "
        f"{c['ExampleGen']:.1f} | {c['Trainer']:.1f} | {c['Evaluator']:.1f} | "
        f"{r['fixed']:.1f} | {', '.join(f'{x:.2f}' for x in r['ratios'])} |")
  floor = ours["fixed"] / stock["wall"]
  imports = data["imports"]
  share = data["profile_imports_s"] / data["profile_total_s"] if data["profile_total_s"] else 0
  wait = data.get("profile_trainer_wait_s", 0.0)
  lines += [
      "", f"Ratio ours/stock (process wall, median of the rounds): **{ratio:.2f}** "
      f"(target <= 0.25: {'met' if ratio <= 0.25 else '**not met**'}); before/stock "
      f"{_median(before['ratios']):.2f}; ours/before "
      f"{_median([o / b for o, b in zip(ours['walls'], before['walls'])]):.2f}.", "",
      "Fresh-process import times (interpreter start included): " + ", ".join(
          f"`{k}` {v:.1f} s" for k, v in imports.items()) + ".", "",
      "What was taken (each change measured here as ours against before):", "",
      f"* **Narrow TFX imports.** The pipeline process imports `tfx.orchestration.pipeline`, "
      f"`tfx.orchestration.metadata` and `LocalDagRunner`, not `tfx.v1`, whose extensions "
      f"import the Google Cloud / AI Platform clients: fresh import of our pipeline module "
      f"{imports.get('tfx_parallel.pipeline.pipeline', float('nan')):.1f} s against "
      f"`tfx.v1` {imports.get('tfx.v1', float('nan')):.1f} s.",
      "* **The training process started early** (`components/distributed_trainer/run/"
      "prestart.py`): it starts when the config is valid and imports "
      + ", ".join(f"`{m}`" for m in data.get("preload", ("tensorflow", "tf_keras")))
      + " while the pipeline process checks the inputs, imports TFX and runs the "
      "ExampleGen; the launcher hands it its command. Trainer execution per round, "
      "before -> ours: " + ", ".join(
          f"{b['components'].get('Trainer', 0):.1f} -> {o['components'].get('Trainer', 0):.1f} s"
          for b, o in zip(data["runs"]["before"], data["runs"]["ours"])) + ". The early "
      "process gains only what idle CPU there is: on 2 cores shared with other jobs its "
      "imports compete with the pipeline process's.",
      "* Together, ours/before per round: " + ", ".join(
          f"{o / b:.2f}" for o, b in zip(ours["walls"], before["walls"])) + "."
      + (f" {data['earlier']}" if data.get("earlier") else ""), "",
      f"What remains: our fixed overhead ({ours['fixed']:.1f} s) alone is {floor:.2f} of the "
      f"stock pipeline's whole wall time ({stock['wall']:.1f} s), so no speed-up of the "
      f"components can bring the ratio under {floor:.2f}. The stock pipeline's own fixed "
      f"overhead is {stock['fixed']:.1f} s: any pipeline run by LocalDagRunner pays about "
      f"that much before and between its components. Per round, our fixed overhead / "
      f"stock wall: " + ", ".join(
          f"{(o['process_seconds'] - sum(o['components'].values())) / t['process_seconds']:.2f}"
          for o, t in zip(data["runs"]["ours"], data["runs"]["stock"])) + ", and our three "
      "components alone / stock wall: " + ", ".join(
          f"{sum(o['components'].values()) / t['process_seconds']:.2f}"
          for o, t in zip(data["runs"]["ours"], data["runs"]["stock"])) + " (the trainer's "
      f"own process: input cache, tracing, fit, SavedModel export). Imports take {share:.0%} of the "
      f"profiled pipeline process. They are TFX's orchestration itself: `LocalDagRunner` "
      f"imports TensorFlow (`tfx/dsl/io/plugins/tensorflow_gfile.py`, and "
      f"`tfx/types/artifact.py` via `tfx.utils.doc_controls`), Beam "
      f"(`portable/beam_executor_operator.py`) and every stock component with TFMA "
      f"(`dsl/input_resolution/ops/ops.py` -> `latest_blessed_model_strategy.py` imports "
      f"`tfx.components.evaluator`, which runs `tfx/components/__init__.py`). Taking them "
      f"out needs an orchestrator other than LocalDagRunner, or changes in TFX. The "
      f"trainer's wait in the profile is {wait:.1f} s. Not taken: AutoGraph converts our "
      f"own input and export functions in the training process (about 17 functions); "
      f"an A/B of a `DoNotConvert('tfx_parallel')` rule gave no difference above the "
      f"noise here (2 runs each, 8.5-13.0 s against 9.6-10.4 s) and would change how "
      f"our traced code runs.", "",
      "Top items of the profile of our pipeline process (cumulative seconds, profiled "
      "run; the trainer and the Beam workers run in their own processes and show "
      "here as waits):", "",
      "| cumulative s | calls | function |", "|---|---|---|"]
  lines += [f"| {cum:.1f} | {calls} | `{where}` |" for cum, calls, where in data["top"]]
  lines += ["", "![e2e_overhead.png](plots/e2e_overhead.png)", ""]
  return "\n".join(lines)


# ------------------------------------------------------------------------------ startup

STARTUP_JSON = os.path.join(bu.BENCH_DIR, "e2e_startup.json")
STARTUP_SECTION = os.path.join(bu.BENCH_DIR, "results", "e2e_startup.md")
SEGMENTS = ("start-up", "ExampleGen", "Trainer", "Evaluator", "between components", "end")


def timeline(r: dict) -> Dict[str, float]:
  """Seconds of each part of one run, from its spawn to its exit: ``start-up`` (spawn to the
  first execution in ML Metadata: interpreter, imports, input checks, pipeline compilation,
  ML Metadata set-up, the first driver), each component's execution, the gaps ``between
  components`` (publishing, the next node's inputs and driver), and the ``end`` (the last
  execution's end to the process's exit). They add up to the process wall time."""
  ex = r["executions"]
  seg = dict.fromkeys(SEGMENTS, 0.0)
  seg["start-up"] = ex[0][1] - r["spawned"]
  seg["between components"] = sum(b[1] - a[2] for a, b in zip(ex, ex[1:]))
  for stage, created, updated in ex:
    seg[stage] = seg.get(stage, 0.0) + updated - created
  seg["end"] = r["spawned"] + r["process_seconds"] - ex[-1][2]
  seg["wall"] = r["process_seconds"]
  return seg


def import_groups(importtime_stderr: str) -> Dict[str, float]:
  """Self seconds of ``python -X importtime`` output summed per top-level package, and
  ``total``; ``tfx.components`` and ``tensorflow_model_analysis`` get their own groups
  (with what only they import, by the nesting of the output) as the avoidable part."""
  import re  # pylint: disable=g-import-not-at-top
  rows = []
  for line in importtime_stderr.splitlines():
    m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
    if m:
      rows.append((int(m.group(1)) / 1e6, len(m.group(3)), m.group(4)))
  groups: Dict[str, float] = {}
  # importtime prints a module after everything it imported: walk backwards keeping the
  # stack of enclosing modules, so each module is charged to its outermost avoidable one.
  stack: List[tuple] = []
  for self_s, depth, name in reversed(rows):
    while stack and stack[-1][0] >= depth:
      stack.pop()
    stack.append((depth, name))
    owner = next((n for _, n in stack if n in ("tfx.components", "tensorflow_model_analysis")),
                 name.split(".")[0])
    groups[owner] = groups.get(owner, 0.0) + self_s
  groups["total"] = sum(r[0] for r in rows)
  return groups


def startup(rows: int, steps: int, rounds: int) -> dict:
  """``rounds`` rounds of ours and stock, alternating, each in its own process, with their
  timelines; then one run of ours under ``-X importtime``. Written to STARTUP_JSON."""
  import datetime  # pylint: disable=g-import-not-at-top
  load_before, when = bu.load_average(), datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
  csv = bu.write_csv(os.path.join(bu.work_dir(f"e2e_data_{rows}"), "data.csv"), rows)

  def one(which: str, label: str, env=None) -> dict:
    home = os.path.join(bu.work_dir("e2e_runs"), f"startup-{label}")
    shutil.rmtree(home, ignore_errors=True)
    spawned = time.time()
    out = bu.run_python([os.path.abspath(__file__), "--child", which, "--csv", csv, "--home",
                         home, "--steps", str(steps)], timeout=1200, env=env)
    r = bu.last_json_line(out["stdout"])
    r.update(spawned=spawned, process_seconds=out["seconds"], load=bu.load_average(),
             cpu_seconds=out["cpu_seconds"])
    r["timeline"] = timeline(r)
    r["timeline"]["CPU (process tree)"] = out["cpu_seconds"]
    if which != "stock":
      r["trainer_phases"] = trainer_phases(r, steps)
    if env:
      r["imports"] = import_groups(out["stderr"])
    print(f"[bench_e2e] {label}: " + ", ".join(
        f"{k} {v:.1f}" for k, v in r["timeline"].items()) + f"; load {r['load']}", flush=True)
    shutil.rmtree(home, ignore_errors=True)
    return r

  runs: Dict[str, List[dict]] = {"ours": [], "eager": [], "stock": []}
  for i in range(rounds):
    for which in runs:
      runs[which].append(one(which, f"{which}-{i}"))
  imported = one("ours", "ours-importtime", env={"PYTHONPROFILEIMPORTTIME": "1"})
  data = {"rows": rows, "steps": steps, "when": when, "load_before": load_before,
          "load_after": bu.load_average(), "runs": runs, "importtime": imported}
  with open(STARTUP_JSON, "w") as f:
    json.dump(data, f, indent=1)
  return data


def startup_section(data: dict) -> str:
  """RESULTS.md's "where the fixed time goes" section from STARTUP_JSON."""
  rounds = len(data["runs"]["stock"])
  names = [w for w in ("ours", "eager", "stock") if data["runs"].get(w)]
  parts = (*SEGMENTS, "wall", "CPU (process tree)")
  med = {w: {k: _median([r["timeline"][k] for r in data["runs"][w]]) for k in parts}
         for w in names}

  def ratios(which: str) -> List[float]:
    return [o["process_seconds"] / s["process_seconds"]
            for o, s in zip(data["runs"][which], data["runs"]["stock"])]
  lines = [
      "## End to end: where the time goes (`benchmarks/bench_e2e.py --startup`)", "",
      f"Command: `.venv/bin/python benchmarks/bench_e2e.py --startup --rows {data['rows']} "
      f"--steps {data['steps']} --rounds {rounds}`; run {data['when']}"
      + (f" at commit {data['commit']}" if data.get("commit") else "")
      + f"; load average before: {data['load_before']}; after: {data['load_after']}. "
      f"{rounds} rounds of " + ", ".join(names) + ", each in its own process, "
      f"{data['rows']:,} rows, {data['steps']} steps of batch {BATCH} (**eager**: ours "
      "importing all of `tfx.components` and `tensorflow_model_analysis` first, as before "
      "`pipeline/deferred_imports.py`). Each run's wall time split by the times "
      "ML Metadata records for its executions: **start-up** = spawn to the first "
      "execution (interpreter, imports, input checks, pipeline compilation, ML Metadata "
      "set-up, the first driver); **between components** = the gaps between executions "
      "(publishing outputs, resolving the next node's inputs, its driver); **end** = the "
      "last execution's end to the process's exit. Medians of the rounds (so the parts "
      "need not add up to the median wall).", "",
      "| part | " + " | ".join(f"{w} s" for w in names) + " | "
      + " | ".join(f"{w} per round" for w in names) + " |",
      "|---|" + "---|" * (2 * len(names))]
  for k in parts:
    lines.append(f"| {k} | " + " | ".join(f"{med[w][k]:.1f}" for w in names) + " | "
                 + " | ".join(", ".join(f"{r['timeline'][k]:.1f}" for r in data["runs"][w])
                              for w in names) + " |")
  mine = ratios("ours")
  lines += ["", "Process wall / stock's in the same round: ours "
            + ", ".join(f"{x:.2f}" for x in mine) + f", median **{_median(mine):.2f}** "
            f"(target <= 0.25: {'met' if _median(mine) <= 0.25 else '**not met**'})"
            + ("; eager " + ", ".join(f"{x:.2f}" for x in ratios("eager"))
               + f", median {_median(ratios('eager')):.2f}" if "eager" in names else "")
            + ". CPU seconds of the process tree (user + system, `os.wait4`; less sensitive "
            "to other jobs on the machine than wall time), ours / stock per round: "
            + ", ".join(f"{o['cpu_seconds'] / s['cpu_seconds']:.2f}"
                        for o, s in zip(data["runs"]["ours"], data["runs"]["stock"]))
            + ("; ours / eager: " + ", ".join(
                f"{o['cpu_seconds'] / e['cpu_seconds']:.2f}"
                for o, e in zip(data["runs"]["ours"], data["runs"]["eager"]))
               if "eager" in names else "") + "."]
  if all("trainer_phases" in r for r in data["runs"]["ours"]):
    phases = [name for name, _ in TRAINER_PHASES]
    per = {p: [r["trainer_phases"][p] for r in data["runs"]["ours"]] for p in phases}
    lines += ["", "Our Trainer execution in phases (from the time each `[trainer]` console line "
              "arrived, recorded by the benchmark's child; a phase ends at the line named "
              "in `TRAINER_PHASES`), seconds:", "",
              "| phase of ours' Trainer | median s | per round |", "|---|---|---|"]
    lines += [f"| {p} | {_median(per[p]):.2f} | {', '.join(f'{v:.2f}' for v in per[p])} |"
              for p in phases]
    lines.append(f"| **Trainer execution** | {med['ours']['Trainer']:.2f} | "
                 + ", ".join(f"{r['timeline']['Trainer']:.2f}" for r in data["runs"]["ours"])
                 + " |")
  imp = data["importtime"].get("imports")
  if imp:
    total = imp["total"]
    top = sorted(((v, k) for k, v in imp.items() if k != "total"), reverse=True)[:10]
    t = data["importtime"]["timeline"]
    lines += ["", f"Imports in our pipeline process (one more run of ours under `-X "
              f"importtime`, which slows imports; its start-up {t['start-up']:.1f} s, wall "
              f"{t['wall']:.1f} s): {total:.1f} s of self time over every import, by the "
              f"package charged (`tfx.components` and `tensorflow_model_analysis`: "
              f"everything first imported under them):", "",
              "| package | self s | share of import time |", "|---|---|---|"]
    lines += [f"| `{k}` | {v:.2f} | {v / total:.0%} |" for v, k in top]
  ab = data.get("import_ab")
  if ab:
    lines += ["", ab["text"], "", "| package (self s, charged as above) | eager | ours |",
              "|---|---|---|"]
    keys = sorted(set(ab["eager"]) | set(ab["ours"]), key=lambda k: -ab["eager"].get(k, 0))
    lines += [f"| `{k}` | {ab['eager'].get(k, 0):.2f} | {ab['ours'].get(k, 0):.2f} |"
              for k in keys if max(ab["eager"].get(k, 0), ab["ours"].get(k, 0)) >= 0.3]
  lines += [""] + [note + "\n" for note in data.get("notes", [])]
  lines += ["![e2e_startup.png](plots/e2e_startup.png)"]
  return "\n".join(lines) + "\n"


def run(smoke: bool) -> List[dict]:
  sz = sizes(smoke)
  csv = bu.write_csv(os.path.join(bu.work_dir(f"e2e_data_{sz['rows']}"), "data.csv"),
                     sz["rows"])
  res: Dict[str, List[dict]] = {"ours": [], "stock": []}

  def one(which: str, rep: int) -> dict:
    home = os.path.join(bu.work_dir("e2e_runs"), f"{which}{'-smoke' if smoke else ''}-{rep}")
    shutil.rmtree(home, ignore_errors=True)
    out = bu.run_python([os.path.abspath(__file__), "--child", which, "--csv", csv,
                         "--home", home, "--steps", str(sz["steps"])], timeout=900)
    r = bu.last_json_line(out["stdout"])
    r.update(process_seconds=out["seconds"], maxrss_mb=out["maxrss_mb"])
    print(f"[bench_e2e] rep {rep} {which}: {out['seconds']:.0f}s process, components "
          f"{ {k: round(v, 1) for k, v in r['components'].items()} }, peak RSS "
          f"{out['maxrss_mb']:.0f} MB", flush=True)
    shutil.rmtree(home, ignore_errors=True)
    return r

  if smoke:  # Smoke only checks the code: both pipelines at once, to stay short.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
      futures = {w: pool.submit(one, w, 0) for w in res}
      for w, f in futures.items():
        res[w].append(f.result())
  else:  # Measurements: one pipeline at a time, alternating.
    for rep in range(sz["reps"]):
      for which in ("ours", "stock"):
        res[which].append(one(which, rep))
  data = (f"{sz['rows']:,} rows x {bu.NUM_FEATURES} features CSV, split 4:1; "
          f"{sz['steps']} steps of global batch {BATCH}, linear model, SGD")
  stock_desc = "stock pipeline: CsvExampleGen -> Trainer (tf_keras run_fn) -> Evaluator (TFMA)"
  rows = [bu.row("e2e", "total (process wall)",
                 command="python benchmarks/bench_e2e.py --child ours (local_runner.run)",
                 data=data, baseline=stock_desc, unit="seconds",
                 ours=[r["process_seconds"] for r in res["ours"]],
                 base=[r["process_seconds"] for r in res["stock"]], higher_is_better=False,
                 target="ours <= 0.25x stock time (speed-up >= 4)",
                 notes="includes Python/TF imports and pipeline compilation")]
  for stage in COMPONENT_ORDER:
    rows.append(bu.row(
        "e2e", f"{stage} (MLMD execution time)", command="same run", data=data,
        baseline=stock_desc, unit="seconds",
        ours=[r["components"].get(stage, float("nan")) for r in res["ours"]],
        base=[r["components"].get(stage, float("nan")) for r in res["stock"]],
        higher_is_better=False))
  rows.append(bu.row("e2e", "peak RSS", command="same run", data=data, baseline=stock_desc,
                     unit="MB (peak RSS of the pipeline process tree)",
                     ours=[r["maxrss_mb"] for r in res["ours"]],
                     base=[r["maxrss_mb"] for r in res["stock"]], higher_is_better=False,
                     notes="ratio > 1: ours uses less memory"))
  plot(res, bu.plot_path("e2e", smoke))
  return rows


def plot(res: Dict[str, List[dict]], path: str,
         title: str = "End-to-end wall time per component"):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 3.5))
  names = [n for n in ("stock", "before", "eager", "ours") if res.get(n)]
  left = np.zeros(len(names))
  for stage, color in zip(COMPONENT_ORDER, ("tab:blue", "tab:orange", "tab:green")):
    vals = np.array([np.median([r["components"].get(stage, 0.0) for r in res[n]])
                     for n in names])
    ax.barh(names, vals, left=left, color=color, label=stage)
    left += vals
  other = np.array([np.median([r["process_seconds"] for r in res[n]]) for n in names]) - left
  ax.barh(names, np.maximum(other, 0), left=left, color="lightgray",
          label="imports, compile, MLMD")
  ax.set_xlabel("seconds (median)")
  ax.set_title(title)
  # Beside the bars, not over them (a legend inside covered the stock bar).
  ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def render_plot_from_results(results_json: str, path: str) -> None:
  """Redraws plots/e2e.png from the per-run figures RESULTS.json keeps (its e2e rows:
  each component's MLMD execution time and the process wall, per run)."""
  with open(results_json) as f:
    rows = {r["case"]: r for r in json.load(f)["bench_e2e"]["rows"]}
  res = {}
  for name, side in (("ours", "ours"), ("stock", "base")):
    total = rows["total (process wall)"][side]
    res[name] = [{"process_seconds": total[i],
                  "components": {stage: rows[f"{stage} (MLMD execution time)"][side][i]
                                 for stage in COMPONENT_ORDER}}
                 for i in range(len(total))]
  plot(res, path)


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--child", choices=(*OVERHEAD_VARIANTS, "eager"))
  p.add_argument("--csv")
  p.add_argument("--home")
  p.add_argument("--steps", type=int)
  p.add_argument("--smoke", action="store_true")
  p.add_argument("--profile", default="", help="child: write a cProfile dump here")
  p.add_argument("--overhead", action="store_true",
                 help="one run each and a profiled run of ours; writes "
                      "benchmarks/results/e2e_overhead.md")
  p.add_argument("--startup", action="store_true",
                 help="rounds of ours and stock with the timeline of each run, and a run "
                      "of ours under -X importtime; writes benchmarks/results/e2e_startup.md")
  p.add_argument("--render-plot", action="store_true",
                 help="redraw plots/e2e.png from benchmarks/RESULTS.json, run nothing")
  p.add_argument("--render-startup", action="store_true",
                 help="rewrite the --startup section from benchmarks/e2e_startup.json")
  p.add_argument("--render-overhead", action="store_true",
                 help="rewrite the --overhead section from benchmarks/e2e_overhead.json")
  p.add_argument("--rows", type=int, default=sizes(False)["rows"])
  p.add_argument("--rounds", type=int, default=3, help="--overhead: rounds of the pipelines")
  a = p.parse_args()
  if a.child:
    print(json.dumps(child(a.child, a.csv, a.home, a.steps, a.profile)))
    return 0
  studies = (  # (measure, re-render, saved JSON, measurement, plot name, section, its text)
      (a.startup, a.render_startup, STARTUP_JSON, startup, "e2e_startup", STARTUP_SECTION,
       startup_section, "Start-up study (--startup): wall time per component"),
      (a.overhead, a.render_overhead, OVERHEAD_JSON, overhead, "e2e_overhead",
       OVERHEAD_SECTION, overhead_section, "Overhead study (--overhead): wall time per component"))
  if a.render_plot:
    render_plot_from_results(os.path.join(bu.BENCH_DIR, "RESULTS.json"), bu.plot_path("e2e", False))
    return 0
  for measure, render, saved, measurement, name, section, section_text, title in studies:
    if not (measure or render):
      continue
    if render:
      with open(saved) as f:
        data = json.load(f)
    else:
      data = measurement(a.rows, a.steps or sizes(False)["steps"], a.rounds)
    plot(data["runs"], bu.plot_path(name, False), title)
    text = section_text(data)
    os.makedirs(os.path.dirname(section), exist_ok=True)
    with open(section, "w") as f:
      f.write(text)
    print(text)
    return 0
  for r in run(a.smoke):
    print(json.dumps(r))
  return 0


if __name__ == "__main__":
  sys.exit(main())
