"""The evaluator's results as a reader sees them: a self-contained HTML report, and the
scalar / classification metrics in the form the KFP UI reads. Pure: inputs -> values.

The KFP forms follow the SDK's ``Metrics`` / ``ClassificationMetrics``
(kubeflow/pipelines sdk-2.5.0 ``sdk/python/kfp/dsl/types/artifact_types.py``:145-162
``log_metric``: one number per key; :175-193 ``log_roc_data_point``: a list of
{confidenceThreshold, recall, falsePositiveRate}; :217-240 ``confusionMatrix`` =
{annotationSpecs: [{displayName}], rows: [{row: [...]}]}), which the launcher records as
ML Metadata custom properties (a number as a double, a list as ``{"list": ...}``, a
struct as ``{"struct": ...}``: ``backend/src/v2/metadata/converter.go`` 2.15.0 and
2.16.0:138-172, 2.4.1 and 2.5.0:133-167) and the UI reads back
(``frontend/src/components/viewers/MetricsVisualizations.tsx`` 238-276, 601-651,
741-803, 824-846; ``ROCCurveHelper.tsx`` 11-15; both files identical from 2.4.1 to
2.16.0). The KFP releases Kubeflow ships: 2.4.1 in Kubeflow v1.10.0, 2.15.0 in v1.11.0
(kubeflow/manifests ``apps/pipeline/upstream/base/pipeline/kustomization.yaml``:39-49 at
v1.10.0, ``applications/pipeline/upstream/base/pipeline/kustomization.yaml``:39-49 at
v1.11.0).

The HTML report has no external fetch (the UI shows it in a sandboxed iframe): the loss
curve is inline SVG, the style inline.
"""
import html
import json
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

REPORT_FILE_NAME = "report.html"
COMPARISON_FILE_NAME = "baseline_comparison.json"  # Written beside metrics.json (baseline).
KFP_METRICS_FILE_NAME = "kfp_metrics.json"  # {"metrics": {...}, "classification": {...}}
ROC_POINTS = 101  # Thresholds 0, 0.01, ..., 1: enough for the UI's curve, small metadata.

# Scalars shown in the UI's metrics table and the report's quality table, in this order.
QUALITY_KEYS = ("eval_examples", "eval_mse", "eval_rmse", "eval_mae", "eval_r2",
                "eval_accuracy", "eval_auc", "eval_log_loss", "eval_precision", "eval_recall")
CONVERGENCE_KEYS = ("final_loss", "best_loss", "initial_loss", "target_loss",
                    "steps_to_target", "convergence_rate", "tail_change", "eval_loss_change",
                    "eval_loss_trend", "trivial_loss", "loss_vs_trivial", "last_step",
                    "total_steps", "num_epochs", "examples_per_sec", "blessed")
LAYOUT_KEYS = ("layout", "mesh_shape", "replicas", "num_devices", "devices",
               "global_batch_size", "model_type", "optimizer", "learning_rate", "loss",
               "param_count", "state_bytes_per_device")
NOT_AVAILABLE = -1


def _number(value: Any) -> Optional[float]:
  """A finite number (bools as 0/1), else None."""
  if isinstance(value, bool):
    return float(value)
  if isinstance(value, (int, float)) and math.isfinite(value):
    return float(value)
  return None


def kfp_metrics(scalars: Mapping[str, Any]) -> Dict[str, float]:
  """The quality and convergence scalars as ``system.Metrics`` metadata: {name: number},
  finite values only (protojson and the launcher take no NaN), -1 ("not available")
  left out."""
  out = {}
  for key in QUALITY_KEYS + CONVERGENCE_KEYS:
    value = _number(scalars.get(key))
    if value is not None and not (value == NOT_AVAILABLE and key != "blessed"):
      out[key] = value
  return out


def confusion_matrix(labels: Sequence[str], rows: Sequence[Sequence[int]]) -> Dict[str, Any]:
  """``confusionMatrix`` (rows: true label, columns: predicted), as the SDK's
  ``log_confusion_matrix`` writes it; raises ValueError unless it is square over
  `labels` (the UI rejects it otherwise: MetricsVisualizations.tsx 2.4.1 to 2.16.0:785-803)."""
  if len(rows) != len(labels) or any(len(r) != len(labels) for r in rows):
    raise ValueError(f"a confusion matrix must be {len(labels)}x{len(labels)} over labels "
                     f"{list(labels)}. Received rows: {[list(r) for r in rows]}")
  return {"annotationSpecs": [{"displayName": str(x)} for x in labels],
          "rows": [{"row": [int(v) for v in r]} for r in rows]}


def confidence_metrics(thresholds: Sequence[float], recall: Sequence[float],
                       false_positive_rate: Sequence[float]) -> List[Dict[str, float]]:
  """``confidenceMetrics`` (the ROC curve), as the SDK's ``log_roc_curve`` writes it."""
  if not len(thresholds) == len(recall) == len(false_positive_rate):
    raise ValueError(f"thresholds, recall and false_positive_rate must have one length. "
                     f"Received: {len(thresholds)}, {len(recall)}, {len(false_positive_rate)}")
  return [{"confidenceThreshold": float(t), "recall": float(r), "falsePositiveRate": float(f)}
          for t, r, f in zip(thresholds, recall, false_positive_rate)]


def roc_points(labels: Sequence[int], scores: Sequence[float], points: int = ROC_POINTS
               ) -> Dict[str, List[float]]:
  """Recall and false positive rate of "score >= t" at `points` thresholds t from 0 to 1;
  {} without both classes, and {} when any score is NaN (NaN sorts above every
  threshold, so the curve would claim full recall at threshold 1 while the confusion
  matrix counts those examples as predicted negative)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  y = np.asarray(labels).reshape(-1) == 1
  s = np.asarray(scores, np.float64).reshape(-1)
  if y.all() or not y.any() or np.isnan(s).any():
    return {}
  thresholds = np.linspace(0.0, 1.0, points)
  positive = np.sort(s[y])
  negative = np.sort(s[~y])
  above = lambda v: 1.0 - np.searchsorted(v, thresholds, side="left") / v.size
  return {"thresholds": thresholds.tolist(), "recall": above(positive).tolist(),
          "false_positive_rate": above(negative).tolist()}


def classification(labels: Sequence[str], rows: Sequence[Sequence[int]],
                   roc: Optional[Mapping[str, Sequence[float]]] = None) -> Dict[str, Any]:
  """``system.ClassificationMetrics`` metadata: the confusion matrix, and for a binary
  label the ROC curve (`roc`: :func:`roc_points`)."""
  out: Dict[str, Any] = {"confusionMatrix": confusion_matrix(labels, rows)}
  if roc:
    out["confidenceMetrics"] = confidence_metrics(roc["thresholds"], roc["recall"],
                                                  roc["false_positive_rate"])
  return out


# --- The HTML report. ----------------------------------------------------------------

_STYLE = """
body{font-family:-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif;margin:16px;
color:#202124;max-width:960px;font-size:14px}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:20px 0 6px;border-bottom:1px solid
#dadce0;padding-bottom:3px}
.verdict{padding:10px 14px;border-radius:6px;margin:8px 0;font-size:15px}
.ok{background:#e6f4ea;border:1px solid #34a853}.no{background:#fce8e6;border:1px solid #ea4335}
.reason{color:#3c4043;margin:4px 0 0}
table{border-collapse:collapse;font-size:13px;margin:4px 0}
td,th{border:1px solid #dadce0;padding:3px 8px;text-align:left}th{background:#f1f3f4}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#188038;font-weight:600}.fail{color:#c5221f;font-weight:600}
.note{color:#5f6368;font-size:13px}.grid{display:flex;flex-wrap:wrap;gap:24px}
"""


def _fmt(value: Any) -> str:
  if value is None:
    return "-"
  if isinstance(value, bool):
    return "yes" if value else "no"
  if isinstance(value, int):
    return f"{value:,}" if value != NOT_AVAILABLE else "-"
  if isinstance(value, float):
    if not math.isfinite(value):
      return str(value)
    return f"{value:.6g}" if value != NOT_AVAILABLE else "-"
  return str(value) if value != "" else "-"


def _cell(value: Any) -> str:
  if isinstance(value, _Raw):
    return f"<td>{value}</td>"
  if isinstance(value, (int, float)) and not isinstance(value, bool):
    return f'<td class="n">{html.escape(_fmt(value))}</td>'
  return f"<td>{html.escape(_fmt(value))}</td>"


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str] = ()) -> str:
  head = ("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"
          if header else "")
  body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
  return f"<table>{head}{body}</table>"


class _Raw(str):
  """HTML already escaped."""


def _series(curves: Mapping[str, Any]) -> List[Dict[str, Any]]:
  """[(name, colour, dashed, [(step, loss)])] of the training loss per record and the
  train/eval loss per epoch; non-finite points dropped."""
  records = curves.get("records") or {}
  out = []
  train = [(s, v) for s, v in zip(records.get("step") or [], records.get("loss") or [])
           if _number(v) is not None]
  if train:
    out.append({"name": "training loss (per record)", "colour": "#1a73e8", "dash": "",
                "points": train})
  epochs = curves.get("epochs") or []
  for key, name, colour in (("train_loss", "train loss (epoch)", "#34a853"),
                            ("eval_loss", "eval loss (epoch)", "#ea4335")):
    points = [(e.get("step"), e.get(key)) for e in epochs
              if _number(e.get(key)) is not None and _number(e.get("step")) is not None]
    if points:
      out.append({"name": name, "colour": colour, "dash": "5,3" if key == "train_loss" else "",
                  "points": points})
  return out


def _ticks(low: float, high: float, log: bool) -> List[float]:
  """Round tick values within [low, high]: 1, 2 or 5 x 10^k apart (about 5); on a log
  axis the powers of ten, else 1, 2, 5 x 10^k, else the linear rule."""
  if log:
    decades = [10.0 ** k for k in range(math.ceil(math.log10(low)),
                                        math.floor(math.log10(high)) + 1)]
    if len(decades) >= 2:
      step = max(1, math.ceil(len(decades) / 6))
      return decades[::step]
    series = [m * 10.0 ** k for k in range(math.floor(math.log10(low)),
                                           math.floor(math.log10(high)) + 1)
              for m in (1, 2, 5) if low <= m * 10.0 ** k <= high]
    if len(series) >= 3:
      return series
  if high <= low:
    return [low]
  base = 10 ** math.floor(math.log10((high - low) / 5))
  step = min((m * base for m in (1, 2, 5, 10)),
             key=lambda st: abs((high - low) / st - 5))
  first = math.ceil(low / step) * step
  return [round(first + i * step, 12)
          for i in range(int((high - first) / step + 1e-9) + 1)]


def loss_svg(curves: Mapping[str, Any], width: int = 720, height: int = 320) -> str:
  """The loss curves as inline SVG (log-scale y where every loss is positive)."""
  series = _series(curves)
  if not series:
    return '<p class="note">No loss curve: the run recorded no finite loss.</p>'
  xs = [p[0] for s in series for p in s["points"]]
  ys = [p[1] for s in series for p in s["points"]]
  for key in ("target_loss", "trivial_loss"):
    if _number(curves.get(key)) is not None:
      ys.append(curves[key])
  log = min(ys) > 0
  f = math.log10 if log else (lambda v: v)
  x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
  y0, y1 = f(min(ys)), f(max(ys))
  if y1 <= y0:
    y0, y1 = y0 - 0.5, y1 + 0.5
  left, right, top, bottom = 64, 12, 12, 52
  pw, ph = width - left - right, height - top - bottom
  px = lambda x: left + (x - x0) / (x1 - x0) * pw
  py = lambda y: top + (1 - (f(y) - y0) / (y1 - y0)) * ph
  parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-size="11" font-family="sans-serif">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" '
           f'stroke="#dadce0"/>']
  for value in _ticks(min(ys), max(ys), log):
    y = py(value)
    parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                 f'stroke="#f1f3f4"/><text x="{left - 4}" y="{y + 4:.1f}" '
                 f'text-anchor="end">{value:.3g}</text>')
  for value in _ticks(x0, x1, False):
    x = px(value)
    parts.append(f'<text x="{x:.1f}" y="{top + ph + 14}" text-anchor="middle">'
                 f'{value:,.0f}</text>')
  parts.append(f'<text x="{left + pw / 2}" y="{top + ph + 28}" text-anchor="middle">step'
               f'</text>')
  parts.append(f'<text x="12" y="{top + ph / 2}" text-anchor="middle" transform="rotate(-90 '
               f'12 {top + ph / 2})">loss{" (log scale)" if log else ""}</text>')
  for key, name in (("target_loss", "target"), ("trivial_loss", "predict-the-mean")):
    if _number(curves.get(key)) is not None:
      y = py(curves[key])
      parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#9aa0a6" stroke-dasharray="2,3"/><text x="{left + pw - 4}" '
                   f'y="{y - 3:.1f}" text-anchor="end" fill="#5f6368">{name} '
                   f'{curves[key]:.3g}</text>')
  for s in series:
    path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s["points"])
    dash = f' stroke-dasharray="{s["dash"]}"' if s["dash"] else ""
    parts.append(f'<polyline fill="none" stroke="{s["colour"]}" stroke-width="1.6"{dash} '
                 f'points="{path}"/>')
    if len(s["points"]) <= 50:
      parts.extend(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.2" fill="{s["colour"]}"/>'
                   for x, y in s["points"])
  x = left
  for s in series:  # legend, under the axis title
    y = height - 6
    dash = f' stroke-dasharray="{s["dash"]}"' if s["dash"] else ""
    parts.append(f'<line x1="{x}" x2="{x + 20}" y1="{y - 4}" y2="{y - 4}" '
                 f'stroke="{s["colour"]}" stroke-width="2"{dash}/><text x="{x + 24}" '
                 f'y="{y}">{html.escape(s["name"])}</text>')
    x += 24 + 6.5 * len(s["name"]) + 16
  parts.append("</svg>")
  return "".join(parts)


def _layout_value(key: str, value: Any) -> Any:
  """Devices by their short names ("CPU:0, CPU:1"), a learning rate as a number."""
  if key == "devices" and isinstance(value, str):
    try:
      names = json.loads(value)
    except ValueError:
      return value
    short = [str(n).rsplit("/device:", 1)[-1] for n in names]
    return ", ".join(short[:8]) + (f" ... ({len(short)})" if len(short) > 8 else "")
  if key == "learning_rate" and isinstance(value, str):
    try:
      return float(value)
    except ValueError:
      return value
  return value


def _comparison_html(comparison: Optional[Mapping[str, Any]]) -> str:
  if not comparison:
    return '<p class="note">No baseline: first run, judged alone.</p>'
  mark = lambda ok: _Raw(f'<span class="{"pass" if ok else "fail"}">'
                         f'{"pass" if ok else "FAIL"}</span>')
  rows = []
  for m in comparison.get("metrics") or []:
    relative = m.get("relative_change")
    rows.append([m.get("name"), m.get("candidate"), m.get("baseline"),
                 (m.get("direction") or "").replace("_", " "), m.get("absolute_change"),
                 "-" if relative is None else f"{100 * relative:+.2f} %",
                 m.get("absolute_threshold"), m.get("relative_threshold"),
                 mark(bool(m.get("passed")))])
  source = {"channel": "given to the evaluator",
            "latest_blessed": "the latest blessed model"}.get(
                comparison.get("baseline_source"), comparison.get("baseline_source"))
  return (f'<p>Baseline ({html.escape(str(source))}): <code>'
          f'{html.escape(str(comparison.get("baseline_uri", "")))}</code> &mdash; '
          f'{mark(bool(comparison.get("passed")))} '
          f'{html.escape(str(comparison.get("reason", "")))}</p>'
          + _table(rows, ["metric", "candidate", "baseline", "direction", "change",
                          "relative", "abs. threshold", "rel. threshold", ""]))


def nan_auc_note(scalars: Mapping[str, Any]) -> str:
  """Why ``eval_auc`` is NaN, as the report says it ("" when it is not): the model's
  scores hold NaN (quality.auc), so there is no AUC and no ROC curve
  (:func:`roc_points`), and the KFP metrics table leaves it out (:func:`kfp_metrics`)."""
  value = scalars.get("eval_auc")
  if not (isinstance(value, float) and math.isnan(value)):
    return ""
  return ('<p class="note">eval_auc is NaN: some of the model\'s scores on this split are '
          'NaN (did training diverge?), so they cannot be ranked. There is no ROC curve, '
          'and the KFP metrics table leaves eval_auc out (it takes numbers only).</p>')


def report_html(scalars: Mapping[str, Any], curves: Optional[Mapping[str, Any]] = None,
                comparison: Optional[Mapping[str, Any]] = None,
                classification_metrics: Optional[Mapping[str, Any]] = None,
                title: str = "ConvergenceEvaluator report") -> str:
  """The report: verdict and why, quality scalars, loss curves, layout, baseline
  comparison (`comparison`: ``baseline_comparison.json``; None: first run), and a
  classifier's confusion matrix. `scalars`: the ``metrics.json`` content; `curves`:
  ``curves.json`` (None without a training history)."""
  blessed = bool(scalars.get("blessed"))
  state = scalars.get("convergence_state", "")
  reason = scalars.get("convergence_reason") or (curves or {}).get("reason") or ""
  message = scalars.get("blessing_message") or ""
  verdict = (f'<div class="verdict {"ok" if blessed else "no"}"><b>'
             f'{"Blessed" if blessed else "Not blessed"}</b> &mdash; training '
             f'{html.escape(str(state))}'
             + (f'<p class="reason">Why: {html.escape(str(reason))}</p>' if reason else "")
             + (f'<p class="reason">Blessing: {html.escape(str(message))}</p>'
                if message else "") + "</div>")
  quality = [[k, scalars[k]] for k in QUALITY_KEYS if k in scalars
             and scalars[k] != NOT_AVAILABLE]
  quality += [[k, v] for k, v in sorted(scalars.items())
              if k.startswith("eval_class_accuracy_") and v != NOT_AVAILABLE]
  notes = nan_auc_note(scalars)
  convergence = [[k, scalars[k]] for k in CONVERGENCE_KEYS if k in scalars and k != "blessed"]
  layout = [[k, _layout_value(k, scalars[k])] for k in LAYOUT_KEYS if k in scalars]
  parts = [f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}"
           f"</title><style>{_STYLE}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>", verdict,
           "<h2>Loss curves</h2>",
           loss_svg(curves) if curves else
           '<p class="note">No training history was given: convergence not judged.</p>',
           '<div class="grid"><div><h2>Quality on the '
           f'{html.escape(str(scalars.get("eval_split", "eval")))} split</h2>'
           + _table(quality) + notes + "</div>",
           "<div><h2>Convergence</h2>" + _table(convergence) + "</div>",
           "<div><h2>Layout</h2>" + _table(layout) + "</div></div>",
           "<h2>Baseline comparison</h2>", _comparison_html(comparison)]
  matrix = (classification_metrics or {}).get("confusionMatrix")
  if matrix:
    labels = [a["displayName"] for a in matrix["annotationSpecs"]]
    rows = [[_Raw(f"<b>{html.escape(labels[i])}</b>")] + list(r["row"])
            for i, r in enumerate(matrix["rows"])]
    parts += ["<h2>Confusion matrix (rows: true label, columns: predicted)</h2>",
              _table(rows, [""] + labels)]
  parts.append("</body></html>")
  return "\n".join(parts)

