"""Draws the docs' pictures into docs/img/ (matplotlib; no TensorFlow, a few seconds).

    .venv/bin/python docs/figures.py            # all of them
    .venv/bin/python docs/figures.py verdicts   # one
    .venv/bin/python docs/figures.py runs DIR   # rerun the verdict runs (minutes), redraw
    .venv/bin/python docs/figures.py runs DIR overfitting   # rerun one (or a few), redraw

* ``pipeline.png``: the three components, their artifacts and the stock components beside.
* ``mesh.png``: the seed problem's ``Y = sum_i X_i W_i`` on a 2x2 batch x model mesh.
* ``splits.png``: how rows become splits and shards (PartitionedExampleGen), with the
  default config's buckets read from partition.Partitioner.
* ``verdicts.png``: one training curve per convergence state. Each curve is a whole
  ``tfx-parallel run`` (VERDICT_RUNS: the built-in linear model on one device), whose
  history and eval losses ``runs`` keeps in ``verdict_runs.json`` with the state the
  ConvergenceEvaluator recorded; the state printed on a panel is what
  ``components/convergence_evaluator/convergence.analyze`` says of that run now, with
  the evaluator's default rules: the script fails if it is not the one the panel shows.
  ``unrepresentative eval split`` is the evaluator's verdict on any curve when the
  Examples carry eval split warnings (executor.py): the run keeps the warnings it read.

The benchmark plots are the benchmarks' own (``benchmarks/plots/``); docs/hooks.py puts
them in the site.
"""
import dataclasses
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
from matplotlib import patches  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "img")
BLUE, ORANGE, GREEN, GREY, RED = "#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f", "#d62728"


def _box(ax, x, y, w, h, text, color, fontsize=10, dashed=False):
  ax.add_patch(patches.FancyBboxPatch(
      (x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08", linewidth=1.5,
      edgecolor=color, facecolor=color + "22", linestyle="--" if dashed else "-"))
  ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, x0, y0, x1, y1, text="", color=GREY):
  ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
              arrowprops=dict(arrowstyle="-|>", color=color, lw=1.4))
  if text:
    ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, text, ha="center", va="bottom",
            fontsize=9.5, color="#333333")


def pipeline(path):
  fig, ax = plt.subplots(figsize=(10, 4.6))
  ax.set_xlim(0, 11)
  ax.set_ylim(0, 4.6)
  ax.axis("off")
  _box(ax, 0.2, 2.4, 2.6, 1.3, "PartitionedExampleGen\n(Beam)\nCSV | synthetic | taxi", BLUE)
  _box(ax, 4.2, 2.4, 2.6, 1.3, "DistributedTrainer\nsingle | mirrored |\nmulti_worker | mesh",
       ORANGE)
  _box(ax, 8.2, 2.4, 2.6, 1.3, "ConvergenceEvaluator\nquality + convergence\n-> blessing",
       GREEN)
  _arrow(ax, 2.8, 3.05, 4.2, 3.05, "Examples")
  _arrow(ax, 6.8, 3.05, 8.2, 3.05, "Model,\nTrainingHistory")
  ax.annotate("", xy=(9.5, 2.4), xytext=(1.5, 2.4),
              arrowprops=dict(arrowstyle="-|>", color=GREY, lw=1.2,
                              connectionstyle="arc3,rad=0.25"))
  ax.text(5.5, 1.55, "eval split", ha="center", fontsize=9.5, color="#333333")
  ax.text(1.5, 4.15, "gzip TFRecord shards per split,\nrow counts (stock Examples)",
          ha="center", fontsize=9.5)
  ax.text(5.5, 4.15, "SavedModel (tf.Example in), history.json,\nTensorBoard logs",
          ha="center", fontsize=9.5)
  ax.text(9.5, 4.15, "ConvergenceMetrics in ML Metadata,\nModelBlessing",
          ha="center", fontsize=9.5)
  _box(ax, 0.2, 0.15, 2.6, 0.75, "stock StatisticsGen,\nSchemaGen, Transform", GREY,
       fontsize=9.5, dashed=True)
  _box(ax, 4.2, 0.15, 2.6, 0.75, "stock Trainer\n(evaluated by ours)", GREY, fontsize=9.5,
       dashed=True)
  _box(ax, 8.2, 0.15, 2.6, 0.75, "stock Evaluator (TFMA),\nPusher", GREY, fontsize=9.5,
       dashed=True)
  ax.text(5.5, 1.05, "dashed: stock TFX components that read or feed the same artifacts",
          ha="center", fontsize=9, color=GREY)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def mesh(path):
  """Y = X W on a 2x2 mesh: rows of X (the batch) split over the batch axis, its columns
  and the kernel's rows over the model axis; each device computes X_bi W_i and the model
  axis sums its partial outputs."""
  fig, ax = plt.subplots(figsize=(11, 4.4))
  ax.set_xlim(0, 11)
  ax.set_ylim(1.2, 5.2)
  ax.axis("off")
  colors = [BLUE, ORANGE]
  # X: 4 row blocks (batch) x 2 column blocks (features).
  ax.text(1.5, 4.85, "X: batch x features (x0, x1)", ha="center", fontsize=12)
  for b in range(2):
    for i in range(2):
      ax.add_patch(patches.Rectangle((0.5 + i, 2.6 + (1 - b) * 1.0), 1, 1, facecolor=colors[i]
                                     + ("55" if b == 0 else "99"), edgecolor="black"))
      ax.text(1.0 + i, 3.1 + (1 - b) * 1.0, f"X[b{b}, {i + 1}]", ha="center", va="center",
              fontsize=11)
  ax.text(2.75, 3.6, "x", fontsize=16, ha="center", va="center")
  ax.text(3.6, 4.85, "W: kernel", ha="center", fontsize=12)
  for i in range(2):
    ax.add_patch(patches.Rectangle((3.2, 3.6 - i * 1.0), 0.8, 1.0, facecolor=colors[i] + "77",
                                   edgecolor="black"))
    ax.text(3.6, 4.1 - i * 1.0, f"W{i + 1}\n(true {i + 1})", ha="center", va="center",
            fontsize=11)  # The seed's true kernel [1, 2]: W1 = 1, W2 = 2.
  ax.text(1.5, 2.25, "rows of X: split over the batch axis (b0, b1)\n"
          "columns of X and rows of W: over the model axis (1, 2)", ha="center", fontsize=11)
  # The 2x2 device grid.
  ax.text(7.75, 4.85, "mesh 2x2: batch axis (rows) x model axis (columns)", ha="center",
          fontsize=12)
  for b in range(2):
    for i in range(2):
      x, y = 5.4 + i * 2.3, 3.3 - b * 1.45
      _box(ax, x, y, 2.0, 1.1, f"device {2 * b + i}\nX[b{b}, {i + 1}] W{i + 1}", colors[i],
           fontsize=11)
    ax.text(9.9, 3.85 - b * 1.45, f"+ -> Y[b{b}]", ha="left", va="center", fontsize=12,
            fontweight="bold")
  ax.text(5.5, 1.45, "Y[b] = X[b, 1] W1 + X[b, 2] W2 + 3 (the bias, replicated): each device "
          "multiplies its block, the model axis sums the partial outputs.\nGradient of W_i: X_i^T dL/dY, kept on the "
          "devices of column i; the batch axis all-reduces it.", ha="center", fontsize=11)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def default_split_buckets():
  """{split: [its hash buckets]} of the default config, from the code that splits rows
  (partition.Partitioner: split_ratios {"train": 4, "eval": 1}, in sorted name order)."""
  from tfx_parallel.components.partitioned_example_gen import config as eg_config  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen import partition  # pylint: disable=g-import-not-at-top
  config = eg_config.ExampleGenConfig()
  partitioner = partition.Partitioner(config.split_ratios, 2)
  names = np.searchsorted(partitioner.boundaries, np.arange(partitioner.total), side="right")
  return {name: [b for b in range(partitioner.total) if names[b] == i]
          for i, name in enumerate(partitioner.split_names)}


def splits(path):
  """Rows -> bucket (a CSV row's position hashed with the seed; stock's sha256 with a
  split_key) -> split -> shard, with the defaults: split_ratios
  {"train": 4, "eval": 1} taken in sorted name order (eval: bucket 0, train: buckets 1-4)
  and 1 worker x 2 shards_per_worker."""
  split_buckets = default_split_buckets()
  eval_buckets, train_buckets = split_buckets["eval"], split_buckets["train"]
  fig, ax = plt.subplots(figsize=(11, 3.6))
  ax.set_xlim(0, 11)
  ax.set_ylim(0, 3.6)
  ax.axis("off")
  rng = np.random.default_rng(2)  # Illustrative buckets: 2 of 10 rows in eval, as 4:1 gives.
  buckets = rng.integers(0, 5, size=10)
  for r in range(10):
    y = 3.2 - r * 0.3
    color = ORANGE if buckets[r] in eval_buckets else BLUE
    ax.add_patch(patches.Rectangle((0.3, y - 0.12), 1.8, 0.24, facecolor=color + "66",
                                   edgecolor="black", linewidth=0.6))
    ax.text(1.2, y, f"row {r}", ha="center", va="center", fontsize=7.5)
    ax.text(2.6, y, f"bucket {buckets[r]}", ha="left", va="center", fontsize=7.5)
  ax.text(1.8, 0.05, "bucket = hash(seed, file, line) mod "
          f"{len(eval_buckets) + len(train_buckets)}\n(split_key: stock's sha256 of the key)",
          ha="center", fontsize=9)
  _box(ax, 4.4, 1.9, 2.2, 1.1, f"train: {len(train_buckets)} buckets\n"
       f"(buckets {train_buckets[0]}-{train_buckets[-1]})", BLUE)
  _box(ax, 4.4, 0.4, 2.2, 1.1, f"eval: {len(eval_buckets)} bucket\n(bucket {eval_buckets[0]})",
       ORANGE)
  _arrow(ax, 3.7, 2.45, 4.4, 2.45)
  _arrow(ax, 3.7, 0.95, 4.4, 0.95)
  for s in range(2):
    _box(ax, 7.6 + s * 1.3, 2.05, 1.1, 0.8, f"shard {s}", BLUE, fontsize=9)
    _box(ax, 7.6 + s * 1.3, 0.55, 1.1, 0.8, f"shard {s}", ORANGE, fontsize=9)
  _arrow(ax, 6.6, 2.45, 7.5, 2.45)
  _arrow(ax, 6.6, 0.95, 7.5, 0.95)
  ax.text(8.85, 3.2, "shards per split: num_workers x shards_per_worker\n"
          "(default 1 x 2; gzip TFRecord files)", ha="center", fontsize=9.5)
  ax.text(8.85, 0.1, "splits in sorted name order: eval, then train", ha="center",
          fontsize=9, color=GREY)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


# ---- Verdict curves: real tfx-parallel runs, judged by the evaluator's own code. ----

VERDICT_DATA = os.path.join(OUT, "verdict_runs.json")
# state -> (panel title, the run's flags). Each is a whole `tfx-parallel run` (PartitionedExampleGen,
# DistributedTrainer, ConvergenceEvaluator) of the built-in linear model on one device;
# `python docs/figures.py runs DIR` runs them and keeps what the evaluator read.
VERDICT_COMMON = "--layout single --device cpu"
VERDICT_RUNS = {
    "converged": ("Adam, lr 0.05 (run's default), 12 epochs", "--rows 2000 --epochs 12"),
    "improving": ("SGD, lr 0.001, 6 epochs: still falling",
                  "--rows 2000 --epochs 6 --optimizer sgd --learning-rate 0.001"),
    "plateaued": ("linear model, data it cannot fit",
                  "--data nonlinear.csv --label y --model linear --epochs 12"),
    "stalled": ("SGD, lr 1e-9: nothing learned",
                "--rows 2000 --epochs 6 --optimizer sgd --learning-rate 1e-9"),
    "diverged": ("SGD, lr 1.05: the loss explodes",
                 "--rows 2000 --epochs 6 --optimizer sgd --learning-rate 1.05"),
    "overfitting": ("450 features, ~480 train rows: fits noise",
                    "--data wide.csv --label y --model linear --epochs 40 --optimizer sgd "
                    "--learning-rate 0.05"),
    "unrepresentative eval split": ("20 distinct rows, 60 copies each",
                                    "--data repeated.csv --label y --epochs 12"),
}
# The CSVs the runs read, written into the runs' directory (write_*_csv below).
VERDICT_CSVS = {"nonlinear.csv": "write_nonlinear_csv", "wide.csv": "write_wide_csv",
                "repeated.csv": "write_repeated_csv"}
HISTORY_KEYS = ("records", "epochs", "initial_eval_loss", "diverged", "diverged_reason", "loss")


def pipeline_name(state):
  return state.replace(" ", "-")


def verdict_command(state):
  return (f"tfx-parallel run --pipeline-name {pipeline_name(state)} {VERDICT_COMMON} "
          f"{VERDICT_RUNS[state][1]}")


def write_nonlinear_csv(path, rows=2000):
  """The plateaued run's data: a label a linear model cannot fit (its best R^2 ~ 0.02)."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(rows, 2))
  y = np.sin(3 * x[:, 0]) * np.cos(3 * x[:, 1]) + 0.1 * x[:, 0] + 0.1 * rng.normal(size=rows)
  with open(path, "w", encoding="utf-8") as f:
    f.write("x0,x1,y\n")
    for a, b, c in zip(x[:, 0], x[:, 1], y):
      f.write(f"{a:.6f},{b:.6f},{c:.6f}\n")


def write_wide_csv(path, rows=600, features=450):
  """The overfitting run's data: y = 2 x0 + N(0, 1) noise, with 449 more features of pure
  noise: with about 480 train rows a linear model first learns x0, then fits the noise
  of the train split, and its eval loss rises from its best."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(rows, features))
  y = 2 * x[:, 0] + rng.normal(size=rows)
  with open(path, "w", encoding="utf-8") as f:
    f.write(",".join(f"x{i}" for i in range(features)) + ",y\n")
    for r, t in zip(x, y):
      f.write(",".join(f"{v:.5f}" for v in r) + f",{t:.5f}\n")


def write_repeated_csv(path, distinct=20, copies=60):
  """The unrepresentative run's data: the seed problem's 20 distinct rows, 60 copies
  each: the eval split holds fewer than 30 distinct rows."""
  rng = np.random.default_rng(1)
  x = rng.normal(size=(distinct, 2))
  y = x @ np.array([1.0, 2.0]) + 3
  with open(path, "w", encoding="utf-8") as f:
    f.write("x0,x1,y\n")
    for _ in range(copies):
      for (a, b), c in zip(x, y):
        f.write(f"{a:.6f},{b:.6f},{c:.6f}\n")


def _one(pattern):
  import glob  # pylint: disable=g-import-not-at-top
  found = sorted(glob.glob(pattern))
  if len(found) != 1:
    raise SystemExit(f"expected one file for {pattern}, found {found}")
  return found[0]


def collect_run(home, state, command, date):
  """What the evaluator read for one run: its history.json and metrics.json."""
  root = os.path.join(home, "pipelines", pipeline_name(state))
  with open(_one(os.path.join(root, "DistributedTrainer", "history", "*", "history.json"))) as f:
    history = json.load(f)
  with open(_one(os.path.join(root, "ConvergenceEvaluator", "metrics", "*",
                              "metrics.json"))) as f:
    metrics = json.load(f)
  return {"command": command, "date": date,
          "history": {k: history.get(k) for k in HISTORY_KEYS},
          "trivial_loss": metrics["trivial_loss"], "model_loss": metrics["eval_mse"],
          "recorded_state": metrics["convergence_state"],
          "recorded_reason": metrics["convergence_reason"],
          "eval_split_warnings": json.loads(metrics.get("eval_split_warnings") or "[]")}


def record_runs(directory, states=()):
  """Runs the commands of ``states`` (default: every one) in ``directory`` (one --home
  each) and writes them into VERDICT_DATA, keeping the other states' recorded runs."""
  import datetime  # pylint: disable=g-import-not-at-top
  import shlex  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  directory = os.path.abspath(directory)  # The runs' cwd: a relative --home would nest.
  os.makedirs(directory, exist_ok=True)
  for name, writer in VERDICT_CSVS.items():
    globals()[writer](os.path.join(directory, name))
  cli = os.path.join(os.path.dirname(sys.executable), "tfx-parallel")
  runs = recorded_runs() if states and os.path.exists(VERDICT_DATA) else {}
  for state in states or VERDICT_RUNS:
    command = verdict_command(state)
    home = os.path.join(directory, "h_" + pipeline_name(state))
    argv = [cli] + shlex.split(command)[1:] + ["--home", home]
    subprocess.run(argv, cwd=directory, check=True)
    runs[state] = collect_run(home, state, command,
                              datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
  with open(VERDICT_DATA, "w", encoding="utf-8") as f:
    json.dump(runs, f, indent=1, sort_keys=True)
  print("wrote", os.path.relpath(VERDICT_DATA, os.path.dirname(HERE)))


def recorded_runs():
  with open(VERDICT_DATA, encoding="utf-8") as f:
    return json.load(f)


def judge(state):
  """(run, Convergence): the recorded run shown for ``state``, judged now by
  convergence.analyze as the evaluator calls it (executor.py), default rules."""
  from tfx_parallel.components.common import divergence  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import convergence  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import properties as P  # pylint: disable=g-import-not-at-top
  run = recorded_runs()[state]
  history = run["history"]
  loss = history.get("loss") or {}
  curves = convergence.curves_from_history(history)
  result = convergence.analyze(
      curves, convergence.Rules(), run["trivial_loss"], run["model_loss"],
      flagged_diverged=bool(history.get("diverged")),
      flagged_reason=str(history.get("diverged_reason") or ""),
      non_negative=(divergence.is_non_negative(str(loss["class"])) if loss.get("class")
                    else True))
  warnings = run.get("eval_split_warnings") or []
  if warnings:  # As the evaluator's executor: the eval split cannot judge the model.
    result = dataclasses.replace(result, state=P.UNREPRESENTATIVE, reason="; ".join(warnings))
  return run, result


def verdicts(path):
  fig, grid = plt.subplots(2, 4, figsize=(16, 7.2))
  axes = grid.ravel()
  for ax, state in zip(axes, VERDICT_RUNS):
    run, result = judge(state)
    if result.state != state:
      raise SystemExit(f"{state}: the evaluator says {result.state} ({result.reason})")
    history = run["history"]
    steps = [r["step"] for r in history["records"]]
    train = [r["loss"] if math.isfinite(r["loss"]) else math.nan for r in history["records"]]
    ax.plot(steps, train, "-", color=ORANGE, alpha=0.7, label="training loss (per record)")
    eval_steps = [0] + [e["step"] for e in history["epochs"]]
    evals = [history["initial_eval_loss"]] + [e["eval_loss"] for e in history["epochs"]]
    evals = [v if v is not None and math.isfinite(v) else math.nan for v in evals]
    ax.plot(eval_steps, evals, "o-", color=BLUE, label="eval loss (each epoch; 0: untrained)")
    ax.axhline(run["trivial_loss"], color=GREY, linestyle="--", label="trivial predictor (eval)")
    finite = [v for v in train + evals + [run["trivial_loss"]] if math.isfinite(v) and v > 0]
    if max(finite) / min(finite) > 5:  # Log scale only where the curves span a range.
      ax.set_yscale("log")
    ax.set_title(f"{state}\n{VERDICT_RUNS[state][0]}", fontsize=11)
    ax.set_xlabel("training step")
    ax.set_ylabel("MSE")
    ax.grid(alpha=0.3)
  handles, labels = axes[0].get_legend_handles_labels()
  axes[-1].axis("off")
  axes[-1].legend(handles, labels, loc="center", fontsize=11, frameon=False)
  fig.suptitle("One tfx-parallel run per state; each title is the ConvergenceEvaluator's "
               "verdict (default rules)", fontsize=11)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


FIGURES = {"pipeline": pipeline, "mesh": mesh, "splits": splits, "verdicts": verdicts}


def main(argv):
  os.makedirs(OUT, exist_ok=True)
  if argv[:1] == ["runs"]:  # python docs/figures.py runs DIR: rerun the verdict runs.
    record_runs(argv[1], tuple(argv[2:]))
    argv = ["verdicts"]
  for name in argv or FIGURES:
    FIGURES[name](os.path.join(OUT, name + ".png"))
    print("wrote", os.path.join("docs", "img", name + ".png"))


if __name__ == "__main__":
  main(sys.argv[1:])
