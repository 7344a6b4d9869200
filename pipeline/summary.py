"""The end-of-run summary, read back from ML Metadata (not from memory)."""
import json
import os
from typing import Any, Callable, Dict, Optional

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.common import keys
from tfx_parallel.components.common import readable
from tfx_parallel.components.common import run_history
from tfx_parallel.components.convergence_evaluator import baseline


def open_store(metadata_path: str) -> metadata_store.MetadataStore:
  if not os.path.exists(metadata_path):
    raise FileNotFoundError(f"No ML Metadata store at {metadata_path}; run the pipeline first")
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = metadata_path
  cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
  return metadata_store.MetadataStore(cfg)


def artifact_props(artifact) -> Dict[str, object]:
  """An MLMD artifact's properties and custom properties as plain values."""
  out = {}
  for source in (artifact.properties, artifact.custom_properties):
    for name, value in source.items():
      kind = value.WhichOneof("value")
      out[name] = getattr(value, kind) if kind else None
  return out


def latest_run(store, pipeline_name: str) -> Optional[Dict[str, Dict[str, object]]]:
  """Artifacts of the newest pipeline run of `pipeline_name`: {type name: properties}."""
  runs = [c for c in store.get_contexts_by_type("pipeline_run")
          if c.name.startswith(pipeline_name) or
          any(p.name == pipeline_name for p in store.get_parent_contexts_by_context(c.id))]
  if not runs:
    return None
  run = max(runs, key=lambda c: (c.create_time_since_epoch, c.id))
  found: Dict[str, Dict[str, object]] = {}
  types = {t.id: t.name for t in store.get_artifact_types()}
  for artifact in sorted(store.get_artifacts_by_context(run.id), key=lambda a: a.id):
    name = types[artifact.type_id]
    props = dict(artifact_props(artifact), uri=artifact.uri, id=artifact.id)
    if name == "ModelBlessing" and "blessed" not in props:
      continue  # The stock Evaluator's blessing (--with-tfma, no thresholds).
    found.setdefault(name, props)
  metrics = found.get("ConvergenceMetrics")
  if metrics and metrics.get("metrics_file"):
    # MLMD's SQLite store rounds doubles to 6 decimals; the full values are here.
    path = os.path.join(str(metrics["uri"]), str(metrics["metrics_file"]))
    if os.path.exists(path):
      with open(path) as f:
        metrics.update(json.load(f))
  found["_run"] = {"name": run.name}
  return found


def describe_layout(layout, mesh_shape=None, replicas=None, num_devices=None) -> str:
  """The layout as it really was: "single", "mirrored x2", "mesh 2x2 (2 replicas x
  2-way model)", from the properties the trainer recorded (a non-mesh layout's
  ``mesh_shape`` is ignored: the trainer reports 1x1 for it)."""
  layout = str(layout or "?")
  devices = f", {num_devices} devices" if isinstance(num_devices, int) and num_devices > 1 \
      else ""
  if layout == "mesh" and mesh_shape:
    shape = mesh_shape if isinstance(mesh_shape, str) else "x".join(str(d) for d in mesh_shape)
    dims = shape.split("x")
    if len(dims) == 2:
      replicas_text = f"{dims[0]} replica{'' if dims[0] == '1' else 's'}"
      return f"mesh {shape} ({replicas_text} x {dims[1]}-way model{devices})"
    return f"mesh {shape}{devices}"
  if layout in ("mirrored", "multi_worker") and isinstance(replicas, int) and replicas > 0:
    return f"{layout} x{replicas}"
  return layout


def auc_known(value) -> bool:
  """Whether an ``eval_auc`` is one to show: absent, or -1 when the eval split holds one
  class (convergence_evaluator/quality.py), it is not."""
  return value is not None and value != -1


def _quality(m: Dict[str, object]) -> str:
  """The task's headline metrics: regression MSE / R2, else accuracy (and AUC)."""
  rows = m.get("eval_examples")
  on = f" on {readable.count(rows)} {m.get('eval_split', 'eval')} rows" if rows else ""
  if m.get("eval_mse") is not None:
    return f"MSE {readable.sig(m.get('eval_mse'))}, R2 {readable.sig(m.get('eval_r2'))}{on}"
  parts = [f"accuracy {readable.sig(m.get('eval_accuracy'))}"]
  if auc_known(m.get("eval_auc")):
    parts.append(f"AUC {readable.sig(m.get('eval_auc'))}")
  if m.get("eval_log_loss") is not None:
    parts.append(f"log loss {readable.sig(m.get('eval_log_loss'))}")
  return ", ".join(parts) + on


def _labels(history: run_history.RunHistory) -> str:
  """The label as the trainer found it: the classes (train counts), the skipped examples
  without a label, and classes with no train example; "" when there is nothing to say."""
  parts = []
  counts = (history.label_counts or {}).get("train")
  if counts:
    shown = ", ".join(f"{readable.name(name)} {n}" for name, n in list(counts.items())[:10])
    more = ", ..." if len(counts) > 10 else ""
    parts.append(f"{len(counts)} classes in train ({shown}{more})")
  missing = history.missing_labels or {}
  if missing.get("count"):
    parts.append(f"{missing['count']} of {missing['rows']} examples without a label "
                 f"({100 * float(missing['share']):.1f}%) "
                 + ("skipped" if missing.get("policy") == "skip" else "found"))
  if history.label_classes_not_in_train:
    parts.append("not in train: " + ", ".join(readable.name(c) for c in
                                              history.label_classes_not_in_train))
  return "; ".join(parts)


def _rounded(values) -> str:
  return "[" + ", ".join(readable.sig(float(v), 5) for v in values) + "]"


def read_comparison(metrics_uri: str) -> Optional[Dict[str, Any]]:
  """``baseline_comparison.json`` at the metrics URI (baseline.py); None without one."""
  path = os.path.join(metrics_uri, baseline.FILE_NAME)
  if not metrics_uri or not os.path.exists(path):
    return None
  with open(path) as f:
    return baseline.from_json(f.read())


def format_baseline(comparison: Dict[str, Any], relative: Callable[[str], str] = str) -> str:
  """One line: the baseline, where it came from, and each checked metric of both models
  with its change ("ok" / "FAILED")."""
  parts = []
  for entry in comparison["metrics"]:
    checked = (entry["absolute_threshold"] is not None
               or entry["relative_threshold"] is not None)
    change = entry["relative_change"]
    parts.append(f"{entry['name']} {readable.sig(entry['candidate'])} vs "
                 f"{readable.sig(entry['baseline'])}"
                 + (f" ({100 * change:+.1f}%)" if change is not None else "")
                 + ((" ok" if entry["passed"] else " FAILED") if checked else ""))
  verdict = "passed" if comparison["passed"] else "failed"
  return (f"baseline   {verdict} against {relative(str(comparison['baseline_uri']))} "
          f"({comparison['baseline_source']}): " + "; ".join(parts))


def format_summary(found: Dict[str, Dict[str, object]], log_path: Optional[str] = None,
                   relative: Callable[[str], str] = str,
                   suggest: Callable[[str], str] = str) -> str:
  """The end-of-run summary: one line per fact, numbers to 4-5 significant digits
  (full precision: the metrics file, or `tfx-parallel metrics --json`). The run's id
  and its Examples are in `tfx-parallel metrics` and the ExampleGen's end line.
  ``relative`` shortens the paths printed; ``suggest`` rewrites the settings that the
  blessing's reason names in the form the command's user types (settings.Form.message:
  ``add --set evaluator.min_eval_examples=95`` on ``run``), as the console's log lines."""
  m = found.get("ConvergenceMetrics", {})
  ex = found.get("Examples", {})
  hist = found.get("TrainingHistory", {})
  model = found.get("Model", {})
  history = run_history.RunHistory()
  history_file = os.path.join(str(hist.get("uri", "")), keys.HISTORY_FILE)
  if os.path.exists(history_file):
    with open(history_file) as f:
      history = run_history.RunHistory.from_json(f.read(), history_file)
  layout = describe_layout(m.get("layout", history.layout),
                           m.get("mesh_shape", history.mesh_shape),
                           m.get("replicas", history.replicas),
                           m.get("num_devices"))
  steps = m.get("last_step", history.steps_run)
  lines = [f"layout     {layout}",
           f"training   {readable.count(steps)} steps, final loss "
           f"{readable.sig(m.get('final_loss'))}, "
           f"{readable.rate(m.get('examples_per_sec', history.examples_per_sec))} ex/s, "
           f"state {m.get('convergence_state')}",
           f"eval       {_quality(m)}"]
  labels = _labels(history)
  if labels:
    lines.insert(2, f"labels     {labels}")
  weights = history.weights
  if weights:
    learned = (f"learned    w={_rounded(w[0] for w in weights['kernel'])} "
               f"b={readable.sig(float(weights['bias'][0]), 5)}")
    if keys.TRUE_WEIGHTS in ex:
      learned += (f" (true w={json.loads(ex[keys.TRUE_WEIGHTS])} b={ex.get(keys.TRUE_BIAS)}:"
                  f" |w err|max {readable.sig(m.get('weight_error'))},"
                  f" |b err| {readable.sig(m.get('bias_error'))})")
    lines.append(learned)
  comparison = read_comparison(str(m.get("uri", "")))
  if comparison is not None:
    lines.append(format_baseline(comparison, relative))
  blessing = found.get("ModelBlessing", {})
  blessed = bool(blessing.get("blessed", 0))
  reason = m.get("blessing_message")
  reason = suggest(str(reason)) if reason else reason
  lines.append(f"blessed    {blessed}" + (f" ({reason})" if reason and not blessed else ""))
  lines.append(f"model      {relative(str(model.get('uri')))}")
  lines.append(f"metrics    {relative(str(m.get('uri')))}  (metrics.json, curves.json, loss.png)")
  lines.append(f"report     {relative(str(m.get('uri')))}/report.html  (open in a browser)")
  if log_path:
    lines.append(f"log        {log_path}")
  return "\n".join(lines)


def print_summary(metadata_path: str, pipeline_name: str, log_path: Optional[str] = None,
                  relative: Callable[[str], str] = str, only_with_metrics: bool = False,
                  suggest: Callable[[str], str] = str):
  """Prints the summary of the newest run of ``pipeline_name`` (format_summary) under its
  header; with ``only_with_metrics``, nothing for a run without ConvergenceMetrics (a
  pipeline without our evaluator); ``suggest``: format_summary's."""
  found = latest_run(open_store(metadata_path), pipeline_name)
  if only_with_metrics and not (found or {}).get("ConvergenceMetrics"):
    return
  print(f"=== tfx-parallel summary (read from ML Metadata: {relative(metadata_path)}) ===")
  print(format_summary(found, relative(log_path) if log_path else None, relative, suggest)
        if found
        else "no run found in ML Metadata", flush=True)
