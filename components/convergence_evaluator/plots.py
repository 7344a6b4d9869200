"""Loss-curve plots of one or more ``curves.json`` documents.

Uses ``matplotlib.figure.Figure`` directly (rendered by the Agg canvas), not pyplot: no
global backend switch and no figure registry to leak from a long-running executor.
"""
import io
import math
from typing import Any, Dict, Sequence, Tuple

from matplotlib.figure import Figure


def _points(steps, values):
  """Pairs with a finite value (JSON null / NaN / inf are gaps)."""
  pairs = [(s, v) for s, v in zip(steps, values)
           if s is not None and v is not None and math.isfinite(v)]
  return [s for s, _ in pairs], [v for _, v in pairs]


def loss_plot_png(runs: Sequence[Tuple[str, Dict[str, Any]]],
                  title: str = "Training loss") -> bytes:
  """PNG bytes of the loss curves of ``runs`` = [(label, curves.json document), ...].

  Per run: training loss vs step (line), eval loss at each epoch end (markers), a
  dotted line at the run's target loss and a dashed one at its first NaN/inf loss. Log y axis when every plotted loss is > 0.
  """
  fig = Figure(figsize=(8, 5), dpi=100)
  ax = fig.subplots()
  all_values = []
  for index, (label, doc) in enumerate(runs):
    color = f"C{index % 10}"
    records = doc.get("records", {})
    steps, loss = _points(records.get("step", []), records.get("loss", []))
    all_values += loss
    ax.plot(steps, loss, color=color, label=f"{label} train".strip())
    bad = [s for s, v in zip(records.get("step", []), records.get("loss", []))
           if v is None or not math.isfinite(v)]
    if bad:
      ax.axvline(bad[0], color=color, linestyle="--", linewidth=1,
                 label=f"{label} first NaN/inf loss".strip())
    epochs = doc.get("epochs", [])
    e_steps, e_loss = _points([e.get("step") for e in epochs],
                              [e.get("eval_loss") for e in epochs])
    if e_loss:
      all_values += e_loss
      ax.plot(e_steps, e_loss, "o--", color=color, alpha=0.7, label=f"{label} eval".strip())
    if doc.get("target_loss") is not None:
      ax.axhline(doc["target_loss"], color=color, linestyle=":", linewidth=1,
                 label=f"{label} target".strip())
  if all_values and min(all_values) > 0:
    ax.set_yscale("log")
  ax.set_xlabel("step")
  ax.set_ylabel("loss")
  ax.set_title(title)
  ax.grid(True, alpha=0.3)
  if runs:
    ax.legend(fontsize="small")
  buffer = io.BytesIO()
  fig.savefig(buffer, format="png", bbox_inches="tight")
  return buffer.getvalue()
