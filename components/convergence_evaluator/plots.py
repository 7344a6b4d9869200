"""Loss-curve plots of one or more ``curves.json`` documents.

Uses ``matplotlib.figure.Figure`` directly (rendered by the Agg canvas), not pyplot: no
global backend switch and no figure registry to leak from a long-running executor.

Each run is one colour and one legend entry (its label). Per run: the training loss
(line), the eval loss at each epoch end (circles, dashed), the target loss (dotted) and
the first NaN/inf loss (vertical dashed line); the styles are explained once, in the
axes title, not per run. With ``wall_clock=True`` a second panel plots the same
losses against wall-clock seconds since training started (the records' ``wall_time``):
comparing layouts, the question is often time to target rather than steps to target.
"""
import io
import math
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
from matplotlib.figure import Figure

STYLE_NOTE = "line: train loss, o: eval loss, dotted: target, dashed: first NaN/inf"


def _points(xs, values):
  """Pairs with a finite x and value (JSON null / NaN / inf are gaps)."""
  pairs = [(x, v) for x, v in zip(xs, values)
           if x is not None and v is not None and math.isfinite(x) and math.isfinite(v)]
  return [x for x, _ in pairs], [v for _, v in pairs]


def _epoch_x(doc: Dict[str, Any], axis: str) -> List[Any]:
  """The x of each epoch: its step, or (wall clock) the wall_time of the record at it."""
  epochs = doc.get("epochs", [])
  if axis == "step":
    return [e.get("step") for e in epochs]
  records = doc.get("records", {})
  steps, seconds = _points(records.get("step", []), records.get("wall_time", []))
  if not steps:
    return [None] * len(epochs)
  # Epochs end between records: interpolate the wall time at the epoch's step.
  return [float(np.interp(e["step"], steps, seconds))
          if e.get("step") is not None and steps[0] <= e["step"] <= steps[-1] else None
          for e in epochs]


def _draw(ax, runs: Sequence[Tuple[str, Dict[str, Any]]], axis: str, legend: bool) -> List[float]:
  values = []
  for index, (label, doc) in enumerate(runs):
    color = f"C{index % 10}"
    records = doc.get("records", {})
    xs = records.get("step" if axis == "step" else "wall_time", [])
    x, loss = _points(xs, records.get("loss", []))
    values += loss
    ax.plot(x, loss, color=color, label=(label or "train loss") if legend else None)
    bad = [s for s, v in zip(xs, records.get("loss", []))
           if s is not None and (v is None or not math.isfinite(v))]
    if bad:
      ax.axvline(bad[0], color=color, linestyle="--", linewidth=1)
    e_x, e_loss = _points(_epoch_x(doc, axis), [e.get("eval_loss") for e in
                                                doc.get("epochs", [])])
    if e_loss:
      values += e_loss
      ax.plot(e_x, e_loss, "o--", color=color, alpha=0.7)
    if doc.get("target_loss") is not None:
      ax.axhline(doc["target_loss"], color=color, linestyle=":", linewidth=1)
  ax.set_xlabel("step" if axis == "step" else "wall-clock seconds since training started")
  ax.set_ylabel("loss")
  ax.grid(True, alpha=0.3)
  return values


def loss_figure(runs: Sequence[Tuple[str, Dict[str, Any]]], title: str = "Training loss",
                wall_clock: bool = False) -> Figure:
  """The figure of ``runs`` = [(label, curves.json document), ...] (see module doc)."""
  panels = 2 if wall_clock else 1
  fig = Figure(figsize=(8, 5) if panels == 1 else (13, 5), dpi=100)
  axes = fig.subplots(1, panels, squeeze=False)[0]
  values = []
  for ax, axis in zip(axes, ("step", "wall_time")[:panels]):
    values += _draw(ax, runs, axis, legend=ax is axes[0])
  for ax in axes:
    if values and min(values) > 0:
      ax.set_yscale("log")
    ax.set_title(STYLE_NOTE, fontsize="small")
  fig.suptitle(title)
  if runs:
    axes[0].legend(fontsize="small")
  return fig


def loss_plot_png(runs: Sequence[Tuple[str, Dict[str, Any]]], title: str = "Training loss",
                  wall_clock: bool = False) -> bytes:
  """PNG bytes of :func:`loss_figure`."""
  buffer = io.BytesIO()
  loss_figure(runs, title, wall_clock).savefig(buffer, format="png", bbox_inches="tight")
  return buffer.getvalue()
