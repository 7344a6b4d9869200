"""Draws the docs' pictures into docs/img/ (matplotlib; no TensorFlow, a few seconds).

    .venv/bin/python docs/figures.py            # all of them
    .venv/bin/python docs/figures.py verdicts   # one

* ``pipeline.png``: the three components, their artifacts and the stock components beside.
* ``mesh.png``: the seed problem's ``Y = sum_i X_i W_i`` on a 2x2 batch x model mesh.
* ``splits.png``: how rows become splits and shards (PartitionedExampleGen).
* ``verdicts.png``: one training curve per convergence state. Each curve is a real
  training run (minibatch gradient descent of a linear model on the seed problem, or on
  data it cannot fit), and the state printed on it is what
  ``components/convergence_evaluator/convergence.analyze`` says of that curve, with the
  evaluator's default rules: the script fails if the code's verdict is not the one the
  panel shows.

The benchmark plots are the benchmarks' own (``benchmarks/plots/``); docs/hooks.py puts
them in the site.
"""
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
  """Rows -> sha256 bucket -> split -> shard, with the defaults: split_ratios
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
  ax.text(1.8, 0.05, "bucket = sha256(row as stock\nCsvExampleGen encodes it) mod "
          f"{len(eval_buckets) + len(train_buckets)}",
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


# ---- Verdict curves: real (small) training runs, judged by the evaluator's own code. ----

def _seed_data(rng, rows, nonlinear=False):
  x = rng.normal(size=(rows, 2))
  if nonlinear:  # A linear model cannot fit this: its best R^2 is about 0.02.
    y = np.sin(3 * x[:, 0]) * np.cos(3 * x[:, 1]) + 0.1 * x[:, 0] + 0.1 * rng.normal(size=rows)
  else:  # The seed problem: y = x . [1, 2] + 3 + noise.
    y = x @ np.array([1.0, 2.0]) + 3.0 + 0.5 * rng.normal(size=rows)
  return x, y


def train_linear(learning_rate, epochs, nonlinear=False, seed=0, batch=32, log_every=10):
  """Minibatch SGD of y ~ x w + b with MSE; a history.json-shaped dict, the trivial
  predictor's eval MSE (the eval labels' variance) and the model's final eval MSE."""
  rng = np.random.default_rng(seed)
  x, y = _seed_data(rng, 800, nonlinear)
  xe, ye = _seed_data(rng, 200, nonlinear)
  w, b = np.zeros(2), 0.0
  mse = lambda: float(np.mean((xe @ w + b - ye) ** 2))
  records, history_epochs, step = [], [], 0
  initial = mse()
  with np.errstate(over="ignore", invalid="ignore"):
    for epoch in range(epochs):
      order = rng.permutation(len(x))
      for start in range(0, len(x), batch):
        idx = order[start:start + batch]
        err = x[idx] @ w + b - y[idx]
        loss = float(np.mean(err ** 2))
        w = w - learning_rate * 2 * x[idx].T @ err / len(idx)
        b = b - learning_rate * 2 * float(np.mean(err))
        step += 1
        if step % log_every == 0:
          records.append({"step": step, "loss": loss, "learning_rate": learning_rate,
                          "examples_per_sec": 1000.0, "wall_time": step / 100})
      eval_loss = mse()
      history_epochs.append({"epoch": epoch, "step": step, "train_loss": records[-1]["loss"],
                             "eval_loss": eval_loss,
                             "eval_loss_se": float(np.std((xe @ w + b - ye) ** 2)
                                                   / math.sqrt(len(ye)))})
      if not math.isfinite(eval_loss) or eval_loss > 1e6:
        break
  history = {"records": records, "epochs": history_epochs, "initial_eval_loss": initial}
  return history, float(np.var(ye)), mse()


# state -> (title, training run). Each run is judged below; a wrong verdict fails the script.
VERDICT_RUNS = {
    "converged": ("lr 0.05, 12 epochs", dict(learning_rate=0.05, epochs=12)),
    "improving": ("lr 0.002, 6 epochs: still falling", dict(learning_rate=0.002, epochs=6)),
    "plateaued": ("data a linear model cannot fit", dict(learning_rate=0.05, epochs=12,
                                                          nonlinear=True)),
    "stalled": ("lr 0: nothing learned", dict(learning_rate=0.0, epochs=8)),
    "diverged": ("lr 1.2: the loss explodes", dict(learning_rate=1.2, epochs=8)),
}


def judge(state):
  """(history, Convergence) of the run shown for ``state``."""
  from tfx_parallel.components.convergence_evaluator import convergence  # pylint: disable=g-import-not-at-top
  history, trivial, model_loss = train_linear(**VERDICT_RUNS[state][1])
  curves = convergence.curves_from_history(history)
  return history, convergence.analyze(curves, convergence.Rules(), trivial_loss=trivial,
                                      model_loss=model_loss)


def verdicts(path):
  fig, grid = plt.subplots(2, 3, figsize=(12, 7.2))
  axes = grid.ravel()
  for ax, state in zip(axes, VERDICT_RUNS):
    history, result = judge(state)
    if result.state != state:
      raise SystemExit(f"{state}: the evaluator says {result.state} ({result.reason})")
    epochs = [0] + [e["epoch"] + 1 for e in history["epochs"]]
    evals = [history["initial_eval_loss"]] + [e["eval_loss"] for e in history["epochs"]]
    ax.plot(epochs, evals, "o-", color=BLUE, label="eval loss")
    ax.axhline(result.trivial_loss, color=GREY, linestyle="--", label="trivial predictor")
    finite = [v for v in evals + [result.trivial_loss] if math.isfinite(v) and v > 0]
    if max(finite) / min(finite) > 5:  # Log scale only where the curve spans a range.
      ax.set_yscale("log")
    ax.set_title(f"{state}\n{VERDICT_RUNS[state][0]}", fontsize=11)
    ax.set_xlabel("epoch (0: untrained)")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("eval MSE")
    ax.grid(alpha=0.3)
  handles, labels = axes[0].get_legend_handles_labels()
  axes[-1].axis("off")
  axes[-1].legend(handles, labels, loc="center", fontsize=11, frameon=False)
  fig.suptitle("One real run per state; each title is convergence.analyze's verdict "
               "(default rules)", fontsize=11)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


FIGURES = {"pipeline": pipeline, "mesh": mesh, "splits": splits, "verdicts": verdicts}


def main(argv):
  os.makedirs(OUT, exist_ok=True)
  for name in argv or FIGURES:
    FIGURES[name](os.path.join(OUT, name + ".png"))
    print("wrote", os.path.join("docs", "img", name + ".png"))


if __name__ == "__main__":
  main(sys.argv[1:])
