"""`tfx-parallel metrics`: compare runs by reading ConvergenceMetrics back from ML Metadata.

Reads the SQLite store with the plain ``ml_metadata`` API. Every ``ConvergenceMetrics``
artifact is linked (attribution) to the contexts TFX 1.16 creates: a ``pipeline`` context
(named after the pipeline) and one ``pipeline_run`` context per run (named by the run
id). A store written by Kubeflow Pipelines v2 (a copy of the cluster's, or the tables
read through this API) is read too: there the type is named by its schema title
(``tfx_parallel.components.common.artifacts.ConvergenceMetrics``), the contexts are
``system.Pipeline`` and ``system.PipelineRun`` (kubeflow/pipelines
``backend/src/v2/metadata/client.go``:54-55, 1209), and the properties are decoded as
the launcher recorded them (properties.read_properties). A run that hit the cache is linked to the artifact of the earlier run: ``--json``
lists it with ``cached`` true; the table folds it into the run it reused ("+1 cached"),
so the table has one row per run that trained. When an artifact has no attribution,
the contexts of the execution that output it are used instead. The layout column says
what the layout really was ("mirrored x2", "mesh 2x2"), with the data-parallel replicas
beside it. Property values come from the artifact's
``metrics.json`` when it is readable (ML Metadata keeps only 6 decimals of a double; see
properties.py), else from ML Metadata.

    tfx-parallel metrics [--home runs | --grpc HOST:PORT] [--pipeline-name NAME]
                         [--last N] [--json] [--plot loss.png]

``--grpc`` reads a Kubeflow cluster's ML Metadata through its gRPC service, e.g. after
``kubectl -n kubeflow port-forward svc/metadata-grpc-service 8080:8080``.

``--plot`` draws one curve per run, named "<pipeline> <layout>", against step and
against wall-clock seconds since training started (time to target).
"""
import argparse
import dataclasses
import datetime
import json
import math
import os
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ml_metadata import errors as mlmd_errors
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.common import readable
from tfx_parallel.components.convergence_evaluator import baseline
from tfx_parallel.components.convergence_evaluator import plots
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import summary

# ConvergenceMetrics.TYPE_NAME (components/common/artifacts.py), spelled here because
# importing the artifact class imports TFX and TensorFlow (seconds); a test checks it.
METRICS_TYPE = "ConvergenceMetrics"
PIPELINE_CONTEXT = "pipeline"
RUN_CONTEXT = "pipeline_run"
# The same on Kubeflow Pipelines v2: the type's schema title (its import path, written by
# kubeflow/artifact_types.retitle; a test checks it), and the driver's context types.
KFP_METRICS_TYPE = "tfx_parallel.components.common.artifacts.ConvergenceMetrics"
METRICS_TYPES = (METRICS_TYPE, KFP_METRICS_TYPE)
PIPELINE_CONTEXTS = (PIPELINE_CONTEXT, "system.Pipeline")
RUN_CONTEXTS = (RUN_CONTEXT, "system.PipelineRun")

# (header, property, format) of the table; the pipeline, run and layout columns come
# first, then the state, the task's quality columns, the trivial predictor's loss on the
# same split (convergence_evaluator/reference.py), and the blessing with its reason.
# Regression and classification runs get a table each. Numbers to 4 significant digits,
# rates with thousands separators; full precision is in --json and metrics.json.
REGRESSION_COLUMNS = (
    ("state", P.CONVERGENCE_STATE, str),
    ("steps to target", P.STEPS_TO_TARGET, str),
    ("eval MSE", P.EVAL_MSE, readable.sig),
    ("R2", P.EVAL_R2, readable.sig),
)
CLASSIFICATION_COLUMNS = (
    ("state", P.CONVERGENCE_STATE, str),
    ("accuracy", P.EVAL_ACCURACY, readable.sig),
    ("AUC", P.EVAL_AUC, readable.sig),
    ("log loss", P.EVAL_LOG_LOSS, readable.sig),
)
COMMON_COLUMNS = (
    ("trivial loss", P.TRIVIAL_LOSS, readable.sig),
    ("examples/s", P.EXAMPLES_PER_SEC, readable.rate),
    ("params", P.PARAM_COUNT, readable.count),
    ("state B/device", P.STATE_BYTES_PER_DEVICE, readable.count),
    ("vs baseline", baseline.BASELINE_PASSED, lambda v: "passed" if v else "failed"),
    ("blessed", P.BLESSED, str),
    ("why not blessed", P.BLESSING_MESSAGE, lambda v: v or "-"),
)


# What every column means, printed under the tables (issue 47: "steps to target -1" was
# unexplained). The first block are the columns every table starts with.
COLUMN_HELP = {
    "pipeline": "the pipeline's name (run's default for a CSV: its file name and label)",
    "run": "the pipeline run; '+N cached' counts later runs that reused its results",
    "data": "the data the run trained on: the CSV file (or glob), 'synthetic' or 'taxi'",
    "label": "the column predicted",
    "task": "regression, binary or multiclass (inferred from the label unless set)",
    "layout": "how training was laid out: single, mirrored xN, multi_worker, mesh BxM",
    "replicas": "data-parallel copies of the model (each takes a share of every batch)",
    "state": "the evaluator's convergence verdict (docs/verdicts.md, 'Convergence states')",
    "steps to target": "training step at which the training loss first reached the "
                       "target (evaluator target_loss, else target_fraction x the "
                       "trivial loss); -1: never reached",
    "eval MSE": "mean squared error on the eval split",
    "R2": "1 - eval MSE / label variance on the eval split (1 perfect, 0 = predicting "
          "the mean)",
    "accuracy": "share of eval examples whose predicted class is the label",
    "AUC": "area under the ROC curve on the eval split (binary; -1 without both classes, "
           "NaN when the model's scores are NaN)",
    "log loss": "mean cross-entropy on the eval split",
    "trivial loss": "the eval loss of predicting without features (the label's mean, or "
                    "the class shares): a model should beat it",
    "examples/s": "training examples per second",
    "params": "trainable parameters of the model",
    "state B/device": "bytes of training state held per device",
    "vs baseline": "the change thresholds against the baseline model (evaluator "
                   "baseline_model / baseline: latest_blessed): passed or failed; '-' "
                   "without a baseline (baseline_comparison.json beside metrics.json)",
    "blessed": "1 if the evaluator blessed the model (fit to push), else 0",
    "why not blessed": "the evaluator's reason when it did not bless",
}
RUN_COLUMNS = ("pipeline", "run", "data", "label", "task", "layout", "replicas")


@dataclasses.dataclass
class RunMetrics:
  """One pipeline run and the ConvergenceMetrics artifact it produced (or reused)."""
  pipeline: str
  run: str
  run_created_ms: int
  metrics_id: int
  metrics_uri: str
  cached: bool
  properties: Dict[str, Any]
  data: str = ""   # The Examples' source (the CSV glob, "synthetic", "taxi").
  label: str = ""  # The Examples' label_key.

  def to_json(self) -> Dict[str, Any]:
    """Strict-JSON dict: non-finite floats become null."""
    props = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in sorted(self.properties.items())}
    return {"pipeline": self.pipeline, "run": self.run,
            "run_created": _iso(self.run_created_ms), "metrics_id": self.metrics_id,
            "metrics_uri": self.metrics_uri, "cached": self.cached, "data": self.data,
            "label": self.label, "properties": props}


def _iso(ms: int) -> str:
  return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(
      timespec="seconds")


def _contexts_of(store, artifact_id: int) -> List[metadata_store_pb2.Context]:
  """Contexts the artifact is attributed to, else those of the execution that output it."""
  contexts = store.get_contexts_by_artifact(artifact_id)
  if contexts:
    return contexts
  out, seen = [], set()
  for event in store.get_events_by_artifact_ids([artifact_id]):
    if event.type in (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT):
      for context in store.get_contexts_by_execution(event.execution_id):
        if context.id not in seen:
          seen.add(context.id)
          out.append(context)
  return out


_TF_SCHEMES = ("gs://",)  # Remote files TensorFlow reads without extra plugins.


def read_artifact_json(uri: str, name: str) -> Optional[Any]:
  """Parses the JSON file ``name`` in the artifact directory ``uri``; None if absent."""
  path = os.path.join(uri, name)
  if "://" in path and not path.startswith(_TF_SCHEMES):
    return None  # minio:// or s3:// (a KFP root): precise_values in ML Metadata suffices.
  if "://" in path:  # Remote (gs://...): TFX's filesystem layer; local reads need no TF.
    from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
    if not fileio.exists(path):
      return None
    with fileio.open(path, "r") as f:
      return json.loads(f.read())
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def _exact_properties(uri: str, properties: Dict[str, Any]) -> Dict[str, Any]:
  """``properties`` with full-precision values from metrics.json overlaid, if present."""
  name = properties.get(P.METRICS_FILE)
  exact = read_artifact_json(uri, name) if isinstance(name, str) and name else None
  if not isinstance(exact, dict):
    return properties
  return dict(properties, **{k: P.decode_json(v) for k, v in exact.items()})


def examples_of(store, artifact_id: int) -> Tuple[str, str]:
  """(source, label_key) of the Examples the execution that wrote the artifact read;
  ("", "") when there is none (a store from before ExampleGen recorded them)."""
  outputs = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)
  executions = {e.execution_id for e in store.get_events_by_artifact_ids([artifact_id])
                if e.type in outputs}
  if not executions:
    return "", ""
  inputs = sorted({e.artifact_id for e in store.get_events_by_execution_ids(list(executions))
                   if e.type in (metadata_store_pb2.Event.INPUT,
                                 metadata_store_pb2.Event.DECLARED_INPUT)})
  for artifact in store.get_artifacts_by_id(inputs) if inputs else []:
    properties = P.read_properties(artifact.custom_properties)
    if "source" in properties and "label_key" in properties:
      return str(properties["source"]), str(properties["label_key"])
  return "", ""


def find_runs(store, pipeline_name: Optional[str] = None,
              last: Optional[int] = None) -> List[RunMetrics]:
  """Runs with ConvergenceMetrics, oldest first; optionally one pipeline's, the last N."""
  artifacts = []
  for type_name in METRICS_TYPES:
    try:
      artifacts += store.get_artifacts_by_type(type_name)
    except mlmd_errors.NotFoundError:
      pass
  type_names = {t.id: t.name for t in store.get_context_types()}
  rows = []
  for artifact in artifacts:
    contexts = _contexts_of(store, artifact.id)
    by_type: Dict[str, List[metadata_store_pb2.Context]] = {}
    for context in contexts:
      by_type.setdefault(type_names.get(context.type_id, ""), []).append(context)
    pipelines = [c.name for name in PIPELINE_CONTEXTS for c in by_type.get(name, [])]
    pipeline = pipelines[0] if pipelines else ""
    if pipeline_name and pipeline != pipeline_name:
      continue
    runs = sorted((c for name in RUN_CONTEXTS for c in by_type.get(name, [])),
                  key=lambda c: (c.create_time_since_epoch, c.id))
    properties = _exact_properties(artifact.uri, P.read_properties(artifact.custom_properties))
    data, label = examples_of(store, artifact.id)
    for index, run in enumerate(runs or [None]):
      rows.append(RunMetrics(
          pipeline=pipeline,
          run=run.name if run else f"artifact-{artifact.id}",
          run_created_ms=run.create_time_since_epoch if run else artifact.create_time_since_epoch,
          metrics_id=artifact.id, metrics_uri=artifact.uri, cached=index > 0,
          properties=properties, data=data, label=label))
  rows.sort(key=lambda r: (r.run_created_ms, r.metrics_id))
  return rows[-last:] if last else rows


def _cell(value, fmt) -> str:
  if value is None:
    return "-"
  try:
    return fmt(value)
  except (ValueError, TypeError):
    return str(value)


def layout_of(row: RunMetrics) -> str:
  """The layout as it really was: "single", "mirrored x2", "mesh 2x2" (a non-mesh
  layout's mesh shape is ignored: older trainers recorded 1x1 for it)."""
  p = row.properties
  text = summary.describe_layout(p.get(P.LAYOUT), p.get(P.MESH_SHAPE), p.get(P.REPLICAS))
  return text.split(" (", 1)[0]


def one_row_per_run(rows: Sequence[RunMetrics]) -> List[Tuple[RunMetrics, int]]:
  """(row, number of later runs that reused its metrics from the cache), one per
  ConvergenceMetrics artifact, in the order of ``rows``. A cached rerun trained
  nothing, so it is not a run of its own; a cached row whose original is not in
  ``rows`` (e.g. cut off by --last) stays, marked cached."""
  groups: Dict[int, List[RunMetrics]] = {}
  for row in rows:
    groups.setdefault(row.metrics_id, []).append(row)
  return [(group[0], len(group) - 1) for group in groups.values()]


def is_classification(row: RunMetrics) -> bool:
  """A binary or multiclass run (an artifact without ``task`` is regression)."""
  return row.properties.get(P.TASK) in ("binary", "multiclass")


def data_of(row: RunMetrics) -> str:
  """The data as the table shows it: a file's name without its directory."""
  return re.split(r"[\\/]", row.data.rstrip("/"))[-1] if row.data else "-"


def _table(rows: Sequence[Tuple[RunMetrics, int]], columns) -> List[str]:
  header = list(RUN_COLUMNS) + [c[0] for c in columns]
  lines = []
  for row, reruns in rows:
    run = row.run + ("*" if row.cached else "") + (f" (+{reruns} cached)" if reruns else "")
    lines.append([row.pipeline, run, data_of(row), row.label or "-",
                  _cell(row.properties.get(P.TASK), str), layout_of(row),
                  _cell(row.properties.get(P.REPLICAS), str)] +
                 [_cell(row.properties.get(prop), fmt) for _, prop, fmt in columns])
  widths = [max(len(x) for x in column) for column in zip(header, *lines)]
  return ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
          for line in [header] + lines]


def _shown(columns, group):
  """The columns, without "vs baseline" when no run of ``group`` had a baseline."""
  if any(baseline.BASELINE_PASSED in row.properties for row, _ in group):
    return columns
  return tuple(c for c in columns if c[1] != baseline.BASELINE_PASSED)


def format_table(rows: Sequence[RunMetrics]) -> str:
  """Fixed-width text tables, one line per run (cached reruns folded into the run they
  reused: "+1 cached"); a run shown only through its cached rerun has a '*'. Regression
  runs (eval MSE, R2) and classification runs (accuracy, AUC, log loss) each get their
  own table, titled when both are present."""
  unique = one_row_per_run(rows)
  groups = [("regression", [u for u in unique if not is_classification(u[0])],
             REGRESSION_COLUMNS + COMMON_COLUMNS),
            ("classification", [u for u in unique if is_classification(u[0])],
             CLASSIFICATION_COLUMNS + COMMON_COLUMNS)]
  groups = [(title, group, _shown(columns, group)) for title, group, columns in groups
            if group]
  text: List[str] = []
  for title, group, columns in groups:
    if len(groups) > 1:
      text += ([""] if text else []) + [f"{title} runs:"]
    text += _table(group, columns)
  if any(row.cached for row, _ in unique):
    text.append("* reused the cached metrics of an earlier run")
  if groups:
    text += ["", "Columns:"] + legend(
        list(RUN_COLUMNS) + [c[0] for _, _, columns in groups for c in columns])
  return "\n".join(text)


def legend(headers: Sequence[str]) -> List[str]:
  """One line per column header (each once, in order): what it means."""
  shown = list(dict.fromkeys(headers))
  width = max(len(h) for h in shown)
  return [f"  {h.ljust(width)}  {COLUMN_HELP[h]}" for h in shown]


def read_curves(row: RunMetrics) -> Optional[Dict[str, Any]]:
  """The run's curves.json document, or None if it is gone."""
  return read_artifact_json(row.metrics_uri,
                            row.properties.get(P.CURVES_FILE, P.CURVES_FILE_NAME))


def curve_labels(rows: Sequence[RunMetrics]) -> List[str]:
  """"<pipeline> <layout>" per row; repeats get " #2", " #3" in run order."""
  labels, seen = [], {}
  for row in rows:
    label = f"{row.pipeline} {layout_of(row)}".strip()
    seen[label] = seen.get(label, 0) + 1
    labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
  return labels


def write_plot(rows: Sequence[RunMetrics], path: str) -> int:
  """Overlays the loss curves of ``rows`` (one per run, named by pipeline and layout)
  into a PNG at ``path``: loss against step and against wall-clock seconds. Returns
  the number of curves plotted."""
  runs = []
  unique = [row for row, _ in one_row_per_run(rows)]
  for row, label in zip(unique, curve_labels(unique)):
    document = read_curves(row)
    if document is None:
      print(f"warning: no curves file for run {row.run} at {row.metrics_uri}",
            file=sys.stderr)
      continue
    runs.append((label, document))
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  with open(path, "wb") as f:
    f.write(plots.loss_plot_png(runs, title="Training loss by run", wall_clock=True))
  return len(runs)


def add_arguments(parser: argparse.ArgumentParser):
  """Adds the ``metrics`` subcommand's flags to ``parser``."""
  parser.add_argument("--home", default=config_lib.DEFAULT_HOME,
                      help="directory holding metadata.sqlite (default: %(default)s)")
  parser.add_argument("--grpc", default=None, metavar="HOST:PORT",
                      help="read a Kubeflow cluster's ML Metadata through its gRPC service "
                           "instead (kubectl -n kubeflow port-forward "
                           "svc/metadata-grpc-service 8080:8080, then --grpc localhost:8080)")
  parser.add_argument("--pipeline-name", default=None,
                      help="only runs of this pipeline")
  parser.add_argument("--last", type=int, default=None, metavar="N",
                      help="only the N most recent runs")
  parser.add_argument("--json", action="store_true",
                      help="print JSON (every property of every run) instead of a table")
  parser.add_argument("--plot", default=None, metavar="OUT.png",
                      help="write the selected runs' loss curves, overlaid, to this PNG")


def run(args: argparse.Namespace) -> int:
  """Runs the subcommand; returns the exit code (1: no store, 0 otherwise)."""
  if args.last is not None and args.last < 1:
    print(f"--last must be >= 1. Received: {args.last}", file=sys.stderr)
    return 2
  metadata_path = os.path.join(args.home, config_lib.METADATA_FILE)
  if args.grpc:
    host, _, port = args.grpc.rpartition(":")
    if not host or not port.isdigit():
      print(f"--grpc must be HOST:PORT, e.g. localhost:8080. Received: {args.grpc!r}",
            file=sys.stderr)
      return 2
    metadata_path = f"ML Metadata at {args.grpc}"
    try:
      store = metadata_store.MetadataStore(metadata_store_pb2.MetadataStoreClientConfig(
          host=host, port=int(port)))
      store.get_artifact_types()
    except mlmd_errors.UnavailableError as e:
      print(f"Cannot reach {metadata_path} (is `kubectl -n kubeflow port-forward "
            f"svc/metadata-grpc-service {port}:8080` running?): {e}", file=sys.stderr)
      return 1
  else:
    try:
      store = summary.open_store(metadata_path)
    except FileNotFoundError as e:
      print(str(e), file=sys.stderr)
      return 1
  rows = find_runs(store, args.pipeline_name, args.last)
  if args.json:
    print(json.dumps([r.to_json() for r in rows], indent=1, allow_nan=False))
  elif rows:
    print(format_table(rows))
  else:
    which = f" of pipeline {args.pipeline_name!r}" if args.pipeline_name else ""
    print(f"No runs with ConvergenceMetrics{which} in {metadata_path}")
  if args.plot:
    plotted = write_plot(rows, args.plot)
    print(f"Loss curves of {plotted} run(s) written to {args.plot}", file=sys.stderr)
  return 0


def main(argv: List[str]) -> int:
  parser = argparse.ArgumentParser(prog="tfx-parallel metrics", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  add_arguments(parser)
  return run(parser.parse_args(argv))


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
