"""A wide model on meshes 1xM: training-state bytes per device, step time, and the planner.

The model: an item id -> Embedding(1,000,000 x 64) -> Dense(4096) -> Dense(4096) -> Dense(1),
placed by the default layout rules (components/distributed_trainer/sharding.py): the
embedding table split along its output dimension, the two hidden Dense layers a Megatron
pair (column- then row-split), the 1-unit head replicated. Adam, so each parameter carries
two optimizer slots.

For each M in --model-axes (default 1 2 4), a fresh process splits the CPU into M logical
devices, builds the model with ``MeshTrainer`` on a 1xM mesh, and reports:

* ``state_bytes_per_device``: measured by ``memory.measure`` from the DTensor layouts of
  the model's trainable variables and the optimizer's variables (max over devices of
  parameters + gradients + slots) -- expected about 1/M of the 1x1 figure for the
  sharded parts;
* the planner's prediction of the same figure (``layout_search.state_bytes_per_device`` on the
  variables and the rules), which must agree;
* the median step time of --steps steps after --warmup steps, and its ratio to 1x1.

**On shared CPU cores the time column is not a speed-up measurement**: the M logical
devices share the same 2 physical cores; the ratio mixes the mesh's overhead (sharded
math, collectives, DTensor packing) with how well M op streams fill both cores.

Usage:
  .venv/bin/python benchmarks/bench_wide_model.py                     # 1x1, 1x2, 1x4
  .venv/bin/python benchmarks/bench_wide_model.py --vocab 20000 --hidden 256 --steps 2  # smoke
Writes benchmarks/plots/wide_model.png, benchmarks/wide_model.json, and (full size) the
RESULTS.md section benchmarks/results/wide_model.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import benchutil as bu  # pylint: disable=g-import-not-at-top,wrong-import-position

SECTION = os.path.join(HERE, "results", "wide_model.md")
FULL = {"vocab": 1_000_000, "dim": 64, "hidden": 4096}


def build_fn(vocab: int, dim: int, hidden: int):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top

  def build_model():
    tf_keras.utils.set_random_seed(0)
    item = tf_keras.Input(shape=(1,), dtype=tf.int64, name="item")
    h = tf_keras.layers.Embedding(vocab, dim, name="item_embedding")(item)
    h = tf_keras.layers.Flatten()(h)
    h = tf_keras.layers.Dense(hidden, activation="relu", name="hidden_1")(h)
    h = tf_keras.layers.Dense(hidden, activation="relu", name="hidden_2")(h)
    out = tf_keras.layers.Dense(1, name="head")(h)
    return tf_keras.Model({"item": item}, out)
  return build_model


def child(model_axis: int, vocab: int, dim: int, hidden: int, batch: int, warmup: int,
          steps: int) -> Dict:
  """One mesh 1xM in this process: measured bytes, planner bytes, step times."""
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.split_cpu(model_axis)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.plan import layout_choice, layout_search, memory  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime
  from tfx_parallel.components.distributed_trainer import optimizers  # pylint: disable=g-import-not-at-top

  build_model = build_fn(vocab, dim, hidden)
  t0 = time.perf_counter()
  trainer = mesh_runtime.MeshTrainer(
      build_model, mesh_shape=(1, model_axis), rules=None,
      loss_fn=lambda y, p: tf.reduce_mean(tf.square(p - y)), optimizer="adam",
      learning_rate=1e-3, global_batch=batch, module_name="bench_wide_model")
  build_s = time.perf_counter() - t0
  measured = memory.measure(trainer.model.trainable_variables, trainer.optimizer.variables)
  # The planner's view of the same variables under the trainer's rules (layout_choice.py).
  variables = layout_choice.planner_variables(trainer.model, lambda m: trainer.rules,
                                         "bench_wide_model")(model_axis)
  predicted = layout_search.state_bytes_per_device(variables, model_axis,
                                             optimizers.SLOTS_PER_PARAM["adam"])
  rng = np.random.default_rng(0)
  times: List[float] = []
  for step in range(warmup + steps):
    features = {"item": tf.constant(rng.integers(0, vocab, (batch, 1)), tf.int64)}
    labels = tf.constant(rng.normal(size=(batch, 1)), tf.float32)
    t = time.perf_counter()
    trainer.step(features, labels)
    if step >= warmup:
      times.append(time.perf_counter() - t)
  shards = trainer.shard_shapes()
  return {"model_axis": model_axis, "param_count": measured.param_count,
          "param_bytes_total": measured.param_bytes_total,
          "state_bytes_per_device": measured.state_bytes_per_device,
          "planner_state_bytes_per_device": predicted,
          "step_s": statistics.median(times), "step_s_min": min(times),
          "step_s_max": max(times), "build_s": build_s,
          "shard_shapes": {k: list(v) for k, v in shards.items()}}


def run_axis(model_axis: int, args) -> Dict:
  cmd = [sys.executable, os.path.abspath(__file__), "--child", str(model_axis),
         "--vocab", str(args.vocab), "--dim", str(args.dim), "--hidden", str(args.hidden),
         "--batch", str(args.batch), "--warmup", str(args.warmup), "--steps", str(args.steps)]
  print(f"[wide] mesh 1x{model_axis} ...", flush=True)
  proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"mesh 1x{model_axis} failed:\n{proc.stderr[-3000:]}")
  return bu.last_json_line(proc.stdout) if hasattr(bu, "last_json_line") else json.loads(
      [l for l in proc.stdout.splitlines() if l.startswith("{")][-1])


def plot(rows: List[Dict], path: str):
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  axes_m = [r["model_axis"] for r in rows]
  fig = Figure(figsize=(9, 3.6))
  ax1, ax2 = fig.subplots(1, 2)
  ax1.plot(axes_m, [r["state_bytes_per_device"] / 2**20 for r in rows], "o-", label="measured")
  ax1.plot(axes_m, [rows[0]["state_bytes_per_device"] / m / 2**20 for m in axes_m], "--",
           label="1x1 / M")
  ax1.set_xlabel("model axis M (mesh 1xM)")
  ax1.set_ylabel("training state per device (MiB)")
  ax1.set_xticks(axes_m)
  ax1.legend()
  ax2.plot(axes_m, [r["step_s"] * 1000 for r in rows], "o-")
  ax2.set_xlabel("model axis M (mesh 1xM)")
  ax2.set_ylabel("median step time (ms)")
  ax2.set_xticks(axes_m)
  ax2.set_title("M logical devices sharing the same 2 CPU cores", fontsize=9)
  fig.suptitle(f"wide model ({rows[0]['param_count'] / 1e6:.1f}M parameters, Adam)")
  fig.tight_layout()
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fig.savefig(path, dpi=100)


def render(result: Dict) -> str:
  rows = result["rows"]
  base = rows[0]
  lines = ["| mesh | state bytes per device (measured) | planner's prediction | fraction of 1x1 "
           "| median step (ms) [min, max] | step time vs 1x1 |", "|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(
        f"| 1x{r['model_axis']} | {r['state_bytes_per_device']:,} "
        f"({r['state_bytes_per_device'] / 2**20:,.1f} MiB) | "
        f"{r['planner_state_bytes_per_device']:,} | "
        f"{r['state_bytes_per_device'] / base['state_bytes_per_device']:.3f} | "
        f"{r['step_s'] * 1000:,.0f} [{r['step_s_min'] * 1000:,.0f}, {r['step_s_max'] * 1000:,.0f}] | "
        f"{r['step_s'] / base['step_s']:.2f}x |")
  return "\n".join(lines)


def section(result: Dict, load_before: str, load_after: str) -> str:
  r0 = result["rows"][0]
  return "\n".join([
      "## Wide model on meshes 1xM: bytes per device (`benchmarks/bench_wide_model.py`)", "",
      f"Command: `.venv/bin/python {result['command']}`; run {result['when']}; {bu.machine()}; "
      f"load average before: {load_before}; after: {load_after}.",
      f"Model: Embedding({result['vocab']:,} x {result['dim']}) -> Dense({result['hidden']}) -> "
      f"Dense({result['hidden']}) -> Dense(1), {r0['param_count']:,} parameters "
      f"({r0['param_bytes_total'] / 2**20:,.1f} MiB), Adam, global batch {result['batch']}, "
      f"default layout rules. State = parameters + gradients + 2 Adam slots, measured from the "
      "DTensor layouts of the variables (`memory.measure`); the planner's prediction is "
      "computed from shapes and rules alone.", "",
      render(result), "",
      "**On shared CPU cores the time column is not a speed-up measurement**: the M logical "
      "devices share the machine's 2 cores, so the column shows the distribution machinery's "
      "overhead (sharded math, collectives, DTensor packing) mixed with how well the cores "
      "are kept busy. A ratio below 1 here most likely comes from M independent op streams filling both "
      "cores where 1x1's single stream (dominated by Adam's update of the 64M-entry table) "
      "does not (not profiled); it says nothing about real devices. The 1-unit head stays replicated, so the "
      "fraction is a few parameters above 1/M.", "",
      "![wide_model.png](plots/wide_model.png)", ""])


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--model-axes", type=int, nargs="+", default=[1, 2, 4])
  p.add_argument("--vocab", type=int, default=FULL["vocab"])
  p.add_argument("--dim", type=int, default=FULL["dim"])
  p.add_argument("--hidden", type=int, default=FULL["hidden"])
  p.add_argument("--batch", type=int, default=256)
  p.add_argument("--warmup", type=int, default=2)
  p.add_argument("--steps", type=int, default=8)
  p.add_argument("--out", default=os.path.join(HERE, "wide_model.json"))
  p.add_argument("--plot", default=os.path.join(HERE, "plots", "wide_model.png"))
  p.add_argument("--child", type=int, help=argparse.SUPPRESS)
  a = p.parse_args(argv)
  if a.child:
    print(json.dumps(child(a.child, a.vocab, a.dim, a.hidden, a.batch, a.warmup, a.steps)))
    return 0
  load_before = bu.load_average()
  rows = [run_axis(m, a) for m in a.model_axes]
  result = {"command": " ".join(["benchmarks/bench_wide_model.py"] + (argv or sys.argv[1:])),
            "when": time.strftime("%Y-%m-%d %H:%M"), "vocab": a.vocab, "dim": a.dim,
            "hidden": a.hidden, "batch": a.batch, "rows": rows}
  with open(a.out, "w") as f:
    json.dump(result, f, indent=1)
  plot(rows, a.plot)
  print(render(result))
  if (a.vocab, a.dim, a.hidden) == (FULL["vocab"], FULL["dim"], FULL["hidden"]):
    bu.write_section(SECTION, section(result, load_before, bu.load_average()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
