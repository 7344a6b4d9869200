"""Mesh engine against fit engine, on the same number of logical devices, in pairs.

    python benchmarks/bench_mesh_engine.py [--pairs 3] [--steps 1500] [--cases all]
        [--out benchmarks/mesh_engine.json]

Runs the issue #25 command (``tfx-parallel run --rows 50000 --features 16 --model mlp
--hparams '{"hidden_units": [256, 256]}' --batch-size 256 --steps 1500 --optimizer adam
--learning-rate 0.001``) once with the mesh layout and once with the fit layout of the same
device count, back to back, ``--pairs`` times, alternating which goes first (the machine
is shared: a pair sees the same load):

* ``mesh 1x1`` against ``single`` (issue #39 target: >= 0.8x);
* ``mesh 1x2`` against ``mirrored x2`` and ``mesh 2x2`` against ``mirrored x4`` (logical
  CPU devices: the overhead of the mesh engine at 2 and 4 devices, stated, no target).

Each side's figure is the run record's examples/s (the whole training loop, first trace
and checkpoints included, evaluations excluded), read back from ML Metadata with
``tfx-parallel metrics --json`` (``properties.examples_per_sec``); ``uptime``'s load is
recorded before each pair. Prints one progress line per run, writes every pair, the
median ratio per case and the loads to ``--out`` (JSON) and a bar plot beside it (PNG).
``run(smoke)`` gives ``run_all.py`` its rows.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Sequence

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
CLI = os.path.join(os.path.dirname(sys.executable), "tfx-parallel")
LAYOUTS = {"single": ["--layout", "single"],
           "mirrored x2": ["--layout", "mirrored", "--devices", "2"],
           "mirrored x4": ["--layout", "mirrored", "--devices", "4"],
           "mesh 1x1": ["--layout", "mesh", "--mesh", "1x1"],
           "mesh 1x2": ["--layout", "mesh", "--mesh", "1x2"],
           "mesh 2x2": ["--layout", "mesh", "--mesh", "2x2"]}
# (mesh side, fit side with the same number of devices)
CASES = (("mesh 1x1", "single"), ("mesh 1x2", "mirrored x2"), ("mesh 2x2", "mirrored x4"))
TARGET = {"mesh 1x1": 0.8}  # issue #39 item 12


def command(steps: int, rows: int = 50_000):
  return [CLI, "run", "--rows", str(rows), "--features", "16", "--model", "mlp",
          "--hparams", '{"hidden_units": [256, 256]}', "--batch-size", "256",
          "--steps", str(steps), "--optimizer", "adam", "--learning-rate", "0.001"]


def load() -> float:
  """The 1-minute load average (``uptime``'s first figure)."""
  return os.getloadavg()[0]


def run_one(layout: str, steps: int, home: str, rows: int = 50_000) -> float:
  """One pipeline run in a fresh ``home``; its examples/s as ML Metadata records it."""
  shutil.rmtree(home, ignore_errors=True)
  proc = subprocess.run(command(steps, rows) + LAYOUTS[layout] + ["--home", home],
                        capture_output=True, text=True, check=False)
  if proc.returncode:
    raise RuntimeError(f"{layout}: tfx-parallel run failed ({proc.returncode}):\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
  out = subprocess.run([CLI, "metrics", "--json", "--home", home], capture_output=True,
                       text=True, check=True).stdout
  runs = json.loads(out)
  return float(runs[-1]["properties"]["examples_per_sec"])


def plot(result: dict, path: str):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  cases = result["cases"]
  fig, axes = plt.subplots(1, len(cases), figsize=(4.5 * len(cases), 3.8), squeeze=False)
  for ax, (name, case) in zip(axes[0], cases.items()):
    mesh, fit, pairs = case["mesh"], case["fit"], case["pairs"]
    xs = range(len(pairs))
    ax.bar([x - 0.2 for x in xs], [p[fit] for p in pairs], 0.4, label=f"{fit} (fit engine)")
    ax.bar([x + 0.2 for x in xs], [p[mesh] for p in pairs], 0.4, label=f"{mesh} (mesh engine)")
    for x, p in zip(xs, pairs):
      ax.annotate(f"{p['ratio']:.2f}x", (x + 0.2, p[mesh]), ha="center", va="bottom")
    ax.set_xticks(list(xs), [f"pair {i + 1}\nload {p['load']:.1f}" for i, p in enumerate(pairs)])
    target = TARGET.get(mesh)
    ax.set_title(f"{mesh} / {fit}: median {case['median_ratio']:.2f}"
                 + (f" (target >= {target})" if target else ""), fontsize=9)
    ax.set_ylabel("examples/s (run record)")
    ax.set_ylim(top=1.12 * max(max(p[fit], p[mesh]) for p in pairs))  # Room for the ratios.
    # Under the axes, not over the bars (inside, it covered the second pair).
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=7, ncol=2)
  fig.tight_layout()
  fig.savefig(path, dpi=100, bbox_inches="tight")
  plt.close(fig)


def measure(pairs: int, steps: int, cases: Sequence[tuple], rows: int = 50_000) -> dict:
  """{"command", "cases": {mesh: {"mesh", "fit", "pairs": [...], "median_ratio"}}}."""
  work = os.path.join(BENCH_DIR, "_work", "mesh_engine")
  result = {"command": " ".join(command(steps, rows)[1:]), "cases": {}}
  for mesh, fit in cases:
    case = {"mesh": mesh, "fit": fit, "pairs": []}
    for i in range(pairs):
      order = [fit, mesh] if i % 2 == 0 else [mesh, fit]
      pair = {"first": order[0], "load": load()}
      for layout in order:
        t = time.time()
        pair[layout] = run_one(layout, steps, os.path.join(work, layout.replace(" ", "_")),
                               rows)
        print(f"[bench_mesh_engine] {mesh} vs {fit}, pair {i + 1}/{pairs} {layout}: "
              f"{pair[layout]:,.0f} examples/s ({time.time() - t:.0f} s, load "
              f"{load():.1f})", flush=True)
      pair["ratio"] = pair[mesh] / pair[fit]
      print(f"[bench_mesh_engine] {mesh} vs {fit}, pair {i + 1}/{pairs}: "
            f"{pair['ratio']:.2f}", flush=True)
      case["pairs"].append(pair)
    case["median_ratio"] = statistics.median(p["ratio"] for p in case["pairs"])
    result["cases"][mesh] = case
  return result


def run(smoke: bool, pairs: int = 2, steps: int = 1500) -> List[dict]:
  """run_all.py's rows: one per case (smoke: mesh 1x1 only, 1 pair, 60 steps on 5,000
  rows, which only checks that the code works)."""
  sys.path.insert(0, BENCH_DIR)
  import benchutil as bu  # pylint: disable=g-import-not-at-top
  cases = CASES[:1] if smoke else CASES
  rows = 5_000 if smoke else 50_000
  result = measure(1 if smoke else pairs, 60 if smoke else steps, cases, rows)
  out = []
  for mesh, case in result["cases"].items():
    fit = case["fit"]
    target = TARGET.get(mesh)
    loads = ", ".join(f"{p['load']:.1f}" for p in case["pairs"])
    ratios = ", ".join(f"{p['ratio']:.2f}" for p in case["pairs"])
    out.append(bu.row(
        "mesh_engine", f"{mesh} vs {fit}",
        command=f"benchmarks/bench_mesh_engine.py: tfx-parallel {result['command']} "
                f"{' '.join(LAYOUTS[mesh])} (and {' '.join(LAYOUTS[fit])})",
        data=f"{rows:,} synthetic rows x 16 features, mlp [256, 256], Adam",
        baseline=f"{fit} (fit engine), same command, alternating pairs",
        unit="examples/s (run record)", ours=[p[mesh] for p in case["pairs"]],
        base=[p[fit] for p in case["pairs"]], higher_is_better=True,
        target=f">= {target}x" if target else "",
        notes=f"per-pair ratios {ratios}; load {loads}",
        extra={"like_for_like": True, "pair_median_ratio": case["median_ratio"]}))
  return out


def main(pairs: int, steps: int, out: str, cases: Sequence[tuple]) -> dict:
  result = measure(pairs, steps, cases)
  with open(out, "w") as f:
    json.dump(result, f, indent=1)
  plot(result, os.path.splitext(out)[0] + ".png")
  return result


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--pairs", type=int, default=3)
  p.add_argument("--steps", type=int, default=1500)
  p.add_argument("--cases", default="all",
                 help="comma-separated mesh sides (mesh 1x1,mesh 1x2,mesh 2x2) or all")
  p.add_argument("--out", default=os.path.join(BENCH_DIR, "mesh_engine.json"))
  p.add_argument("--render", action="store_true",
                 help="redraw the PNG beside --out from its JSON, run nothing")
  a = p.parse_args()
  if a.render:
    with open(a.out) as f:
      plot(json.load(f), os.path.splitext(a.out)[0] + ".png")
    sys.exit(0)
  chosen: Dict[str, str] = dict(CASES)
  if a.cases != "all":
    chosen = {m.strip(): chosen[m.strip()] for m in a.cases.split(",")}
  print(json.dumps(main(a.pairs, a.steps, a.out, list(chosen.items()))))
