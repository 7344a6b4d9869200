"""The end-of-run summary, read back from ML Metadata (not from memory)."""
import json
import os
from typing import Dict, Optional

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.common import keys


def open_store(metadata_path: str) -> metadata_store.MetadataStore:
  if not os.path.exists(metadata_path):
    raise FileNotFoundError(f"No ML Metadata store at {metadata_path}; run the pipeline first")
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = metadata_path
  cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
  return metadata_store.MetadataStore(cfg)


def _props(artifact) -> Dict[str, object]:
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
    props = dict(_props(artifact), uri=artifact.uri, id=artifact.id)
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


def format_summary(found: Dict[str, Dict[str, object]]) -> str:
  m = found.get("ConvergenceMetrics", {})
  ex = found.get("Examples", {})
  hist = found.get("TrainingHistory", {})
  model = found.get("Model", {})
  lines = [f"run            {found['_run']['name']}",
           f"layout         {m.get('layout', hist.get('layout'))}  mesh "
           f"{m.get('mesh_shape', hist.get('mesh_shape'))}  replicas "
           f"{m.get('replicas', hist.get('replicas'))}",
           f"final loss     {m.get('final_loss')}   state {m.get('convergence_state')}",
           f"eval MSE       {m.get('eval_mse')}   R2 {m.get('eval_r2')}",
           f"examples/s     {m.get('examples_per_sec')}"]
  history_file = os.path.join(str(hist.get("uri", "")), keys.HISTORY_FILE)
  if os.path.exists(history_file):
    with open(history_file) as f:
      weights = json.load(f).get("weights")
    if weights:
      learned = [round(w[0], 4) for w in weights["kernel"]]
      lines.append(f"learned        w={learned} b={round(weights['bias'][0], 4)}")
  if keys.TRUE_WEIGHTS in ex:
    lines.append(f"true           w={json.loads(ex[keys.TRUE_WEIGHTS])} b={ex.get(keys.TRUE_BIAS)}"
                 f"   |w err|max={m.get('weight_error')} |b err|={m.get('bias_error')}")
  blessing = found.get("ModelBlessing", {})
  lines.append(f"blessed        {bool(blessing.get('blessed', 0))}")
  lines.append(f"examples       {ex.get('uri')}  rows {ex.get(keys.ROW_COUNTS)}")
  lines.append(f"model          {model.get('uri')}")
  lines.append(f"metrics        {m.get('uri')}")
  return "\n".join(lines)
