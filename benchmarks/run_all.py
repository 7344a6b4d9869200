"""Runs every benchmark and writes the results table and plots.

    python benchmarks/run_all.py            # full: benchmarks/RESULTS.md + benchmarks/plots/
    python benchmarks/run_all.py --smoke    # small: benchmarks/_work/RESULTS-smoke.md

Each benchmark module (``bench_*.py`` in MODULES) exposes ``run(smoke) -> list[dict]``
(rows as built by ``benchutil.row``). Every module runs in its own child process, so a
crash or a missing module becomes a "MISSING" row instead of a missing table, and one
module's memory or TensorFlow state cannot affect another's figures. Full mode runs
the modules one after another; smoke mode runs them concurrently, because it only
checks that the benchmark code still works (its figures are not measurements).

Every figure is the median of the runs with [min, max]; the ratio is a speed-up
(> 1: ours is faster): ours/baseline for rates, baseline/ours for times.
"""
import argparse
import concurrent.futures
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import traceback
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil as bu  # noqa: E402

MODULES = ("bench_ingest", "bench_train", "bench_eval", "bench_e2e", "bench_limits",
           "bench_mesh_engine")
TITLES = {"bench_ingest": "Ingest: PartitionedExampleGen vs CsvExampleGen",
          "bench_train": "Training: DistributedTrainer layouts vs tf_keras fit",
          "bench_eval": "Evaluation: ConvergenceEvaluator vs stock Evaluator (TFMA)",
          "bench_e2e": "End to end: tfx-parallel pipeline vs stock TFX pipeline",
          "bench_limits": "Rough physical limits of this machine (ratio column: the "
                          "fraction of the limit that our figure reaches)",
          "bench_mesh_engine": "Mesh engine vs fit engine on the same devices (mesh 1x1 vs "
                               "single, 1x2 vs mirrored x2, 2x2 vs mirrored x4)"}
# Keyword arguments for a module's run() in full mode, to keep `make bench` under 30
# minutes on 2 cores (applied only if run() accepts them). bench_ingest's defaults
# (a 1M-row comparison in two runner modes, scaling to 10M rows) take longer than the
# whole budget here; the driver compares on 100k rows and scales to 1M (run
# `python benchmarks/bench_ingest.py` for its full defaults).
FULL_KWARGS = {"bench_ingest": {"rows": 100_000, "scaling_sizes": (100_000, 1_000_000)},
               "bench_mesh_engine": {"pairs": 2}}
# Seconds before a module is stopped and reported MISSING (smoke: all run at once).
# The smoke test under `make test` raises it (a shared CI machine is slower; the smoke
# run's purpose there is that the code works, not its speed).
SMOKE_TIMEOUT_S = int(os.environ.get("TFX_PARALLEL_SMOKE_TIMEOUT_S", "200"))
FULL_TIMEOUT_S = {"bench_ingest": 600, "bench_train": 900, "bench_eval": 360,
                  "bench_e2e": 900, "bench_limits": 120, "bench_mesh_engine": 1800}


# The targets, as minimum speed-ups: (module, case prefix, min ratio, target).
# Only like-for-like rows enter the Targets table (like_for_like): bench_train's
# `single` row times the trainer on its in-memory input cache against tf_keras fit
# streaming from files, so its ratio is the cache's, not the layout's; the
# single-layout target is read from bench_user_model instead (SAME_INPUT_TARGETS).
TARGETS = (
    ("bench_ingest", "runner", 3.0, "ingest >= 3x CsvExampleGen"),
    ("bench_train", "single", 0.9, "single layout within 10% of plain Keras"),
    ("bench_eval", "quality", 3.0, "evaluator >= 3x TFMA"),
    ("bench_e2e", "total", 4.0, "end to end <= 0.25x the stock pipeline's time"),
    ("bench_mesh_engine", "mesh 1x1", 0.8, "mesh 1x1 >= 0.8x single (same command)"),
)
# Targets measured by standalone benchmarks, read from their JSON beside this file:
# (file, [keys to the ratio], min ratio, target, case).
SAME_INPUT_TARGETS = (
    ("ingest_mixed.json", None, 10.0, "mixed-type ingest >= 10x CsvExampleGen",
     "mixed-type CSV (floats with empty cells, int, 2 strings), same file"),
    ("ingest_mixed.json", "mixed_vs_numeric", 0.7,
     "mixed-type ingest >= 0.7x numeric-only rows/s",
     "ours on both CSVs, same rows and column count, alternating runs"),
    ("user_model.json", ["ratio", "auto"], 0.9,
     "single layout within 10% of plain Keras",
     "single vs plain fit, same cached input"),
)
# The trainer's input modes that read the same files as benchmarks/keras_baseline.py.
STREAMED_INPUT = ("none", "n/a (streamed)")


def like_for_like(row: dict) -> bool:
  """False for a row whose two sides read different inputs: it says so itself
  (extra.like_for_like), or it is a trainer row on the input cache against a streamed
  baseline (extra.input_cache)."""
  extra = row.get("extra") or {}
  if extra.get("like_for_like") is False:
    return False
  modes = extra.get("input_cache")
  return not modes or all(m in STREAMED_INPUT for m in modes)


def _mixed_ingest_ratio(data) -> Optional[float]:
  ours = {r["rows"]: r for r in data if r["data"] == "mixed" and r["side"] == "ours"}
  for r in data:
    if r["side"] != "ours" and r["rows"] in ours:
      return ours[r["rows"]]["rows_per_s"] / r["rows_per_s"]
  return None


def _mixed_numeric_ratio(data) -> Optional[float]:
  """Mixed-type over numeric-only rows/s of ours at the same rows: the median of the
  alternating pairs' ratios when recorded, else the ratio of the two rows."""
  import statistics  # pylint: disable=g-import-not-at-top
  ours = {r["rows"]: r for r in data if r["data"] == "mixed" and r["side"] == "ours"}
  for r in data:
    if r["data"] == "numeric" and r["rows"] in ours:
      if r.get("pair_ratios"):
        return statistics.median(r["pair_ratios"])
      return ours[r["rows"]]["rows_per_s"] / r["rows_per_s"]
  return None


def same_input_target_lines(bench_dir: str) -> List[str]:
  """Targets rows from the standalone benchmarks' JSON (SAME_INPUT_TARGETS)."""
  out = []
  for name, path, need, text, case in SAME_INPUT_TARGETS:
    full = os.path.join(bench_dir, name)
    if not os.path.exists(full):
      out.append(f"| {text} | MISSING | n/a | unknown (no benchmarks/{name}) |")
      continue
    with open(full) as f:
      data = json.load(f)
    if path is None:
      ratio = _mixed_ingest_ratio(data)
    elif path == "mixed_vs_numeric":
      ratio = _mixed_numeric_ratio(data)
    else:
      ratio = data
      for key in path:
        ratio = ratio.get(key) if isinstance(ratio, dict) else None
    shown = f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else "n/a"
    met = "yes" if isinstance(ratio, (int, float)) and ratio >= need else "**no**"
    out.append(f"| {text} (speed-up >= {need:g}) | {case} (benchmarks/{name}) | {shown} | "
               f"{met} |")
  return out


def child(module: str, smoke: bool, out: str) -> int:
  """Child-process mode: runs one module and writes its rows as JSON."""
  import inspect  # pylint: disable=g-import-not-at-top
  mod = __import__(module)
  params = inspect.signature(mod.run).parameters
  kwargs = {k: v for k, v in FULL_KWARGS.get(module, {}).items()
            if not smoke and k in params}
  if kwargs:
    print(f"[run_all] {module}.run(smoke={smoke}, **{kwargs})", flush=True)
  rows = mod.run(smoke, **kwargs)
  with open(out, "w") as f:
    json.dump(rows, f, indent=1, default=float)
  return 0


def run_module(module: str, smoke: bool) -> dict:
  """Runs `module` in a child process; returns {rows, seconds, error}."""
  path = os.path.join(bu.BENCH_DIR, f"{module}.py")
  if not os.path.exists(path):
    return {"rows": [], "seconds": 0.0, "error": f"{module}.py does not exist"}
  out = os.path.join(bu.work_dir("rows"), f"{module}{'-smoke' if smoke else ''}.json")
  if os.path.exists(out):
    os.remove(out)
  log = os.path.join(bu.work_dir("logs"), f"{module}{'-smoke' if smoke else ''}.log")
  args = [bu.PYTHON, os.path.abspath(__file__), "--module", module, "--out", out]
  args += ["--smoke"] if smoke else []
  start = time.perf_counter()
  print(f"[run_all] {module}: started (log {log})", flush=True)
  timeout = SMOKE_TIMEOUT_S if smoke else FULL_TIMEOUT_S[module]
  with open(log, "w") as f:
    # Own process group, so a timeout stops the module's whole process tree.
    proc = subprocess.Popen(args, stdout=f, stderr=subprocess.STDOUT, cwd=bu.REPO,
                            start_new_session=True)
    try:
      code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
      code = "timeout"
  seconds = time.perf_counter() - start
  print(f"[run_all] {module}: finished in {seconds:.0f}s (exit {code})", flush=True)
  if code != 0 or not os.path.exists(out):
    with open(log) as f:
      tail = f.read()[-1500:]
    return {"rows": [], "seconds": seconds,
            "error": f"exit {code} after {seconds:.0f}s; log {os.path.relpath(log, bu.REPO)}"
                     f"; tail:\n{tail}"}
  with open(out) as f:
    return {"rows": json.load(f), "seconds": seconds, "error": None}


# --- reducing and formatting ---------------------------------------------------------

def _runs(r: dict, *names) -> List[float]:
  """Per-run figures under the first present key (tolerates other row shapes)."""
  for n in names:
    v = r.get(n)
    if isinstance(v, (list, tuple)) and v:
      return [float(x) for x in v]
    if isinstance(v, (int, float)):
      return [float(v)]
  return []


def stats(values: List[float]) -> Optional[dict]:
  if not values:
    return None
  return {"median": statistics.median(values), "min": min(values), "max": max(values),
          "n": len(values)}


def adapt_ingest(r: dict) -> dict:
  """bench_ingest's comparison rows carry median/min/max, not per-run lists."""
  n = int(r.get("repeats", 0)) or None
  return dict(
      r, case=f"runner {r.get('runner', '')}", unit="rows/s (Executor.Do)",
      data=f"{r.get('rows', 0):,} rows x {r.get('features', '?')} features CSV "
           f"({r.get('csv_mb', '?')} MB), split 4:1",
      baseline="stock CsvExampleGen executor", higher_is_better=True,
      target="ingest >= 3x CsvExampleGen",
      notes=f"beam args: {r.get('beam_args', '')}; peak RSS (both) "
            f"{r.get('peak_rss_mb_both', '?')} MB",
      ours_stats={"median": r["ours_rows_per_s"], "min": r["ours_min"],
                  "max": r["ours_max"], "n": n},
      base_stats={"median": r["baseline_rows_per_s"], "min": r["baseline_min"],
                  "max": r["baseline_max"], "n": n})


def normalise(r: dict, module: str) -> dict:
  """A row with ours/base stats and a finite-or-None speed-up ratio."""
  if "baseline_rows_per_s" in r and "ours_rows_per_s" in r:
    r = adapt_ingest(r)
  ours = r.get("ours_stats") or stats(_runs(r, "ours", "ours_runs", "our_runs"))
  base = r.get("base_stats") or stats(_runs(r, "base", "baseline_runs", "base_runs"))
  hib = bool(r.get("higher_is_better", True))
  ratio = None
  if ours and base and ours["median"] > 0 and base["median"] > 0:
    ratio = (ours["median"] / base["median"]) if hib else (base["median"] / ours["median"])
  return dict(r, module=module, ours_stats=ours, base_stats=base, ratio=ratio,
              higher_is_better=hib, case=str(r.get("case", r.get("name", ""))),
              command=str(r.get("command", "")), data=str(r.get("data", r.get("data_size", ""))),
              baseline=str(r.get("baseline", "")), unit=str(r.get("unit", "")),
              target=str(r.get("target", "")), notes=str(r.get("notes", "")))


def fmt(v: float) -> str:
  if v is None or (isinstance(v, float) and not math.isfinite(v)):
    return "n/a"
  a = abs(v)
  if a >= 1e6:
    return f"{v / 1e6:.2f}M"
  if a >= 1e4:
    return f"{v / 1e3:.1f}k"
  if a >= 100:
    return f"{v:.0f}"
  if a >= 1:
    return f"{v:.2f}"
  return f"{v:.3g}"


def fmt_stats(s: Optional[dict]) -> str:
  if not s:
    return "n/a"
  return f"**{fmt(s['median'])}** [{fmt(s['min'])}, {fmt(s['max'])}] (n={s['n']})"


def table(rows: List[dict]) -> List[str]:
  out = ["| case | command | data size | baseline | baseline figure | our figure | unit | "
         "speed-up (ours vs baseline) | target | notes |",
         "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "n/a"
    notes = r["notes"]
    if not like_for_like(r):
      notes += ("; **not like for like** (the two sides read different inputs): not in "
                "the Targets table")
    cells = [r["case"], f"`{r['command']}`" if r["command"] else "", r["data"], r["baseline"],
             fmt_stats(r["base_stats"]), fmt_stats(r["ours_stats"]), r["unit"], ratio,
             r["target"], notes]
    out.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells)
               + " |")
  return out


def compared_rows(results: Dict[str, dict]) -> Dict[str, List[dict]]:
  """Normalised comparison rows per module; a row with ``extra.ours_from`` = [module,
  case] (bench_limits) takes its "our figure" from that row, so its ratio is the
  fraction of the limit reached."""
  out = {m: [normalise(r, m) for r in res["rows"] if not is_info(r)]
         for m, res in results.items()}
  index = {(m, r["case"]): r for m, rows in out.items() for r in rows}
  for rows in out.values():
    for r in rows:
      ref = (r.get("extra") or {}).get("ours_from")
      if ref and not r["ours_stats"]:
        src = index.get(tuple(ref))
        if src is None:
          r["notes"] += f" (no figure: {ref[0]} row {ref[1]!r} is missing)"
          continue
        r["ours_stats"] = src["ours_stats"]
        if r["ours_stats"] and r["base_stats"] and r["base_stats"]["median"] > 0:
          r["ratio"] = r["ours_stats"]["median"] / r["base_stats"]["median"]
  return out


def target_lines(compared: Dict[str, List[dict]], results: Dict[str, dict],
                 bench_dir: Optional[str] = None) -> List[str]:
  """The Targets table: like-for-like rows only (like_for_like); a target whose rows all
  compare different inputs points to its like-for-like figure instead."""
  out = ["## Targets", "", "Like for like only: both sides read the same input and run "
         "the same model, batch and steps.", "",
         "| target | case | speed-up | met? |", "|---|---|---|---|"]
  same_input = {t[3] for t in SAME_INPUT_TARGETS}
  for module, prefix, need, text in TARGETS:
    rows = [r for r in compared.get(module, []) if r["case"].startswith(prefix)]
    if any(not like_for_like(r) for r in rows):
      rows = [r for r in rows if like_for_like(r)]
      if not rows and text in same_input:
        continue  # Its like-for-like figure is a SAME_INPUT_TARGETS row.
    if not rows:
      why = (results.get(module) or {}).get("error") or "not run"
      out.append(f"| {text} | MISSING | n/a | unknown ({why.splitlines()[0]}) |")
    for r in rows:
      ok = r["ratio"] is not None and r["ratio"] >= need
      ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "n/a"
      out.append(f"| {text} (speed-up >= {need:g}) | {r['case']} | {ratio} | "
                 f"{'yes' if ok else '**no**'} |")
  out += same_input_target_lines(bench_dir or bu.BENCH_DIR)
  return out + ["", "Input wait (< 5% of step time): `benchmarks/bench_user_model.py`, "
                 "in its own section below (measured against pre-materialised batches in "
                 "one process).", ""]


def is_info(r: dict) -> bool:
  """A row without a baseline (e.g. bench_ingest's scaling rows): shown, not compared."""
  return not (r.get("base") or r.get("baseline_rows_per_s") or r.get("base_stats"))



def info_table(rows: List[dict]) -> List[str]:
  columns = [c for c in rows[0] if c not in ("extra",)]
  out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
  for r in rows:
    out.append("| " + " | ".join(str(r.get(c, "")).replace("|", "\\|") for c in columns) + " |")
  return out


STANDALONE_DIR = os.path.join(bu.BENCH_DIR, "results")


def standalone_sections() -> List[str]:
  """Sections written by benchmarks that run on their own (`benchmarks/results/*.md`,
  e.g. bench_framing.py), each with its command, date and load: kept in RESULTS.md
  across `make bench` runs, which do not rerun them."""
  if not os.path.isdir(STANDALONE_DIR):
    return []
  lines = []
  for name in sorted(os.listdir(STANDALONE_DIR)):
    if name.endswith(".md"):
      with open(os.path.join(STANDALONE_DIR, name)) as f:
        lines += [f.read().strip(), ""]
  return lines


def write_results(results: Dict[str, dict], smoke: bool, path: str, load_before: str,
                  load_after: str, total_s: float, plots: List[str],
                  when: Optional[str] = None, reruns: Optional[Dict[str, str]] = None):
  """``reruns``: {module: when} for modules run again later on their own (``--only``)
  and merged into the run's JSON; their sections say so."""
  lines = [f"# Benchmark results{' (SMOKE: tiny sizes, 1 run, not measurements)' if smoke else ''}",
           "",
           f"Produced by `python benchmarks/run_all.py{' --smoke' if smoke else ''}` "
           f"(`make bench{'-smoke' if smoke else ''}`) on "
           f"{when or datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; {bu.machine()}; "
           f"total {total_s / 60:.1f} min.",
           f"Load average (1/5/15 min) before: {load_before}; after: {load_after}.",
           "",
           "Every figure: **median** [min, max] (n = runs). Speed-up > 1 means ours is "
           "faster: ours/baseline for rates, baseline/ours for times. How each figure is "
           "measured is in the docstring of the module named in each section.",
           ""]
  if not smoke and os.path.exists(os.path.join(bu.BENCH_DIR, "NOTES.md")):
    with open(os.path.join(bu.BENCH_DIR, "NOTES.md")) as f:
      lines += [f.read().strip(), ""]
  compared = compared_rows(results)
  lines += target_lines(compared, results)
  for module in MODULES:
    res = results.get(module)
    if res is None:
      continue
    lines += [f"## {TITLES[module]} (`benchmarks/{module}.py`, {res['seconds']:.0f}s)", ""]
    if module in (reruns or {}):
      lines += [f"Rerun on its own on {reruns[module]} (`python benchmarks/run_all.py --only "
                f"{module}`), merged into this run's RESULTS.json.", ""]
    if res["error"]:
      first = res["error"].splitlines()[0]
      lines += [f"**MISSING**: {first}", "", "```", res["error"][-1200:], "```", ""]
      continue
    info = [r for r in res["rows"] if is_info(r)]
    lines += table(compared[module]) + [""]
    if info:
      lines += ["Further figures (no baseline):", ""] + info_table(info) + [""]
    for r in res["rows"]:
      if r.get("extra", {}).get("text"):
        lines += [r["extra"]["text"], ""]
  if not smoke:
    lines += standalone_sections()
  if plots:
    lines += ["## Plots", ""] + [f"![{os.path.basename(p)}]({os.path.relpath(p, os.path.dirname(path))})"
                                 for p in plots] + [""]
  with open(path, "w") as f:
    f.write("\n".join(lines))
  print(f"[run_all] results written to {path}", flush=True)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--smoke", action="store_true", help="tiny sizes, 1 run, concurrent")
  p.add_argument("--only", nargs="*", choices=MODULES, help="run only these modules")
  p.add_argument("--output", help="results file (default: RESULTS.md or "
                                  "_work/RESULTS-smoke.md)")
  p.add_argument("--render", metavar="RESULTS.json",
                 help="rewrite the results file from a previous run's JSON, without "
                      "running anything")
  p.add_argument("--module", help=argparse.SUPPRESS)  # child mode
  p.add_argument("--out", help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.module:
    return child(a.module, a.smoke, a.out)

  if a.render:
    return render(a.render, a.smoke, a.output)
  modules = a.only or list(MODULES)
  load_before = bu.load_average()
  start = time.perf_counter()
  results: Dict[str, dict] = {}
  if a.smoke:
    with concurrent.futures.ThreadPoolExecutor(len(modules)) as pool:
      futures = {m: pool.submit(run_module, m, True) for m in modules}
      results = {m: f.result() for m, f in futures.items()}
  else:
    for m in modules:
      results[m] = run_module(m, False)
  total = time.perf_counter() - start
  path = a.output or (os.path.join(bu.WORK, "RESULTS-smoke.md") if a.smoke
                      else os.path.join(bu.BENCH_DIR, "RESULTS.md"))
  plot_dir = os.path.dirname(bu.plot_path("x", a.smoke))
  plots = sorted(os.path.join(plot_dir, f) for f in os.listdir(plot_dir) if f.endswith(".png"))
  # bench_ingest (owned separately) writes its full-mode plot next to itself; its smoke
  # plot is already in plot_dir.
  ingest_plot = os.path.join(bu.BENCH_DIR, "ingest_scaling.png")
  if not a.smoke and "bench_ingest" in modules and os.path.exists(ingest_plot):
    plots.append(ingest_plot)
  try:
    write_results(results, a.smoke, path, load_before, bu.load_average(), total, plots)
  except Exception:  # pylint: disable=broad-except
    traceback.print_exc()
    return 1
  with open(os.path.splitext(path)[0] + ".json", "w") as f:
    compared = compared_rows(results)
    json.dump({"_run": {"load_before": load_before, "load_after": bu.load_average(),
                        "when": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
                        "total_s": total,
                        # Relative to benchmarks/, so a clone elsewhere can re-render.
                        "plots": [os.path.relpath(p, bu.BENCH_DIR) for p in plots]},
               **{m: {"seconds": r["seconds"], "error": r["error"], "rows": compared[m],
                      "info_rows": [x for x in r["rows"] if is_info(x)]}
                  for m, r in results.items()}}, f, indent=1, default=float)
  missing = [m for m, r in results.items() if r["error"]]
  print(f"[run_all] done in {total / 60:.1f} min; missing: {missing or 'none'}", flush=True)
  return 0


def render(json_path: str, smoke: bool, output: Optional[str]) -> int:
  """Re-renders the markdown from a run's JSON (e.g. after editing NOTES.md)."""
  with open(json_path) as f:
    saved = json.load(f)
  run = saved.pop("_run", {})
  results = {m: {"seconds": r["seconds"], "error": r["error"],
                 "rows": r["rows"] + r.get("info_rows", [])} for m, r in saved.items()}
  path = output or os.path.splitext(json_path)[0] + ".md"
  write_results(results, smoke, path, run.get("load_before", "n/a"),
                run.get("load_after", "n/a"), run.get("total_s", 0.0),
                [os.path.join(bu.BENCH_DIR, p) for p in run.get("plots", [])],
                run.get("when"), run.get("reruns"))
  return 0


if __name__ == "__main__":
  sys.exit(main())
