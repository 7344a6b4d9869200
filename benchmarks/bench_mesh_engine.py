"""Mesh engine against fit engine: mesh 1x1 against single, the issue #25 command in pairs.

    python benchmarks/bench_mesh_engine.py [--pairs 3] [--steps 1500] [--out benchmarks/mesh_engine.json]

Runs the issue's command (``tfx-parallel run --rows 50000 --features 16 --model mlp
--hparams '{"hidden_units": [256, 256]}' --batch-size 256 --steps 1500 --optimizer adam
--learning-rate 0.001``) once with ``--layout single`` and once with ``--layout mesh --mesh
1x1``, back to back, ``--pairs`` times, alternating which goes first (the machine is shared:
a pair sees the same load). Each side's figure is the run record's examples/s, read back
from ML Metadata with ``tfx-parallel metrics --json`` (``properties.examples_per_sec``).
Prints one progress line per run, writes the pairs and their median ratio to ``--out``
(JSON) and a bar plot beside it (PNG).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
CLI = os.path.join(os.path.dirname(sys.executable), "tfx-parallel")
LAYOUTS = {"single": ["--layout", "single"], "mesh 1x1": ["--layout", "mesh", "--mesh", "1x1"]}


def command(steps: int):
  return [CLI, "run", "--rows", "50000", "--features", "16", "--model", "mlp",
          "--hparams", '{"hidden_units": [256, 256]}', "--batch-size", "256",
          "--steps", str(steps), "--optimizer", "adam", "--learning-rate", "0.001"]


def run_one(layout: str, steps: int, home: str) -> float:
  """One pipeline run in a fresh ``home``; its examples/s as ML Metadata records it."""
  shutil.rmtree(home, ignore_errors=True)
  proc = subprocess.run(command(steps) + LAYOUTS[layout] + ["--home", home],
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
  pairs = result["pairs"]
  fig, ax = plt.subplots(figsize=(7, 3.5))
  xs = range(len(pairs))
  ax.bar([x - 0.2 for x in xs], [p["single"] for p in pairs], 0.4, label="single (fit engine)")
  ax.bar([x + 0.2 for x in xs], [p["mesh 1x1"] for p in pairs], 0.4,
         label="mesh 1x1 (mesh engine)")
  for x, p in zip(xs, pairs):
    ax.annotate(f"{p['ratio']:.2f}x", (x + 0.2, p["mesh 1x1"]), ha="center", va="bottom")
  ax.set_xticks(list(xs), [f"pair {i + 1}\n({p['first']} first)" for i, p in enumerate(pairs)])
  ax.set_ylabel("examples/s (run record)")
  ax.set_title(f"mesh 1x1 / single: median {result['median_ratio']:.2f} (target >= 0.5)")
  ax.legend(loc="lower right")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def main(pairs: int, steps: int, out: str) -> dict:
  work = os.path.join(BENCH_DIR, "_work", "mesh_engine")
  result = {"command": " ".join(command(steps)[1:]), "pairs": []}
  for i in range(pairs):
    order = ["single", "mesh 1x1"] if i % 2 == 0 else ["mesh 1x1", "single"]
    pair = {"first": order[0]}
    for layout in order:
      t = time.time()
      pair[layout] = run_one(layout, steps, os.path.join(work, layout.replace(" ", "_")))
      print(f"[bench_mesh_engine] pair {i + 1}/{pairs} {layout}: {pair[layout]:,.0f} examples/s "
            f"({time.time() - t:.0f} s)", flush=True)
    pair["ratio"] = pair["mesh 1x1"] / pair["single"]
    print(f"[bench_mesh_engine] pair {i + 1}/{pairs}: mesh/single {pair['ratio']:.2f}", flush=True)
    result["pairs"].append(pair)
  result["median_ratio"] = statistics.median(p["ratio"] for p in result["pairs"])
  with open(out, "w") as f:
    json.dump(result, f, indent=1)
  plot(result, os.path.splitext(out)[0] + ".png")
  return result


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument("--pairs", type=int, default=3)
  p.add_argument("--steps", type=int, default=1500)
  p.add_argument("--out", default=os.path.join(BENCH_DIR, "mesh_engine.json"))
  a = p.parse_args()
  print(json.dumps(main(a.pairs, a.steps, a.out)))
