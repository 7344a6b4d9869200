"""One console line per component as it starts and as it ends, with what it did.

TFX's ``LocalDagRunner`` logs "Component %s is running." / "... is finished." and its
launcher "Going to run a new execution %d" / "A cached execution %d is used." (absl INFO,
i.e. Python logging). :class:`ComponentProgress` is a logging handler that turns those
records into lines, and at the end of each component reads that execution's output
artifacts back from ML Metadata to say what it did:

    [1/3] PartitionedExampleGen: started
    [1/3] PartitionedExampleGen: done in 31 s: train 8,012 rows, eval 1,988 rows, 4 shards per split
    [2/3] DistributedTrainer: done in 12 s: 620 steps, final loss 0.0001018, 13,061 ex/s
    [3/3] ConvergenceEvaluator: done in 4.1 s: converged, eval MSE 0.0001034, R2 0.9999, blessed

The describe functions are pure (artifact type name + properties / files -> text).
"""
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, TextIO

from tfx_parallel.components.common import keys
from tfx_parallel.components.common import readable
from tfx_parallel.components.common import run_history
from tfx_parallel.pipeline import summary

_RUNNING = "Component %s is running."
_FINISHED = "Component %s is finished."
_NEW_EXECUTION = "Going to run a new execution %d"
_CACHED_EXECUTION = "A cached execution %d is used."


def describe_examples(props: Dict[str, Any]) -> str:
  """"train 8,012 rows, eval 1,988 rows, 4 shards per split[, 3 bad rows skipped]"."""
  try:
    counts = json.loads(props.get(keys.ROW_COUNTS) or "{}")
  except ValueError:
    counts = {}
  parts = [f"{split} {readable.count(n)} rows" for split, n in sorted(
      counts.items(), key=lambda kv: (kv[0] != "train", kv[0]))]
  if props.get(keys.NUM_SHARDS) is not None:
    parts.append(f"{props[keys.NUM_SHARDS]} shards per split")
  if props.get(keys.SKIPPED_ROWS):
    parts.append(f"{readable.count(props[keys.SKIPPED_ROWS])} bad rows skipped")
  return ", ".join(parts)


def describe_history(history: run_history.RunHistory) -> str:
  """"620 steps, final loss 0.0001018, 13,061 ex/s"."""
  records = history.records or []
  steps = history.steps_run
  if steps is None and records:
    steps = records[-1]["step"]
  parts = []
  if steps is not None:
    parts.append(f"{readable.count(steps)} steps")
  if records:
    parts.append(f"final loss {readable.sig(records[-1].get('loss'))}")
  if history.examples_per_sec is not None:
    parts.append(f"{readable.rate(history.examples_per_sec)} ex/s")
  if history.diverged:
    parts.append("DIVERGED")
  return ", ".join(parts)


def describe_metrics(props: Dict[str, Any]) -> str:
  """"converged, eval MSE 0.0001034, R2 0.9999, blessed" (the task's headline)."""
  parts = [str(props.get("convergence_state", "?"))]
  if props.get("eval_mse") is not None:
    parts.append(f"eval MSE {readable.sig(_float(props['eval_mse']))}")
    parts.append(f"R2 {readable.sig(_float(props.get('eval_r2')))}")
  elif props.get("eval_accuracy") is not None:
    parts.append(f"eval accuracy {readable.sig(_float(props['eval_accuracy']))}")
    if summary.auc_known(props.get("eval_auc")):
      parts.append(f"AUC {readable.sig(_float(props['eval_auc']))}")
  blessed = props.get("blessed")
  if blessed is not None:
    parts.append("blessed" if blessed else "NOT blessed")
  return ", ".join(parts)


def _float(value):
  if isinstance(value, str):
    try:
      return float(value)  # "nan" / "inf" are stored as strings in ML Metadata.
    except ValueError:
      return value
  return value


def _read_json(uri: str, name: str) -> Optional[Dict[str, Any]]:
  path = os.path.join(uri, name)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def describe_outputs(artifacts: Sequence[Any], type_names: Dict[int, str]) -> str:
  """What a component did, from its output artifacts (MLMD protos)."""
  by_type = {type_names.get(a.type_id, ""): a for a in artifacts}
  if "ConvergenceMetrics" in by_type:
    metrics = by_type["ConvergenceMetrics"]
    props = summary.artifact_props(metrics)
    precise = _read_json(metrics.uri, str(props.get("metrics_file") or "metrics.json"))
    return describe_metrics(dict(props, **(precise or {})))
  if "TrainingHistory" in by_type:
    history = _read_json(by_type["TrainingHistory"].uri, keys.HISTORY_FILE)
    return describe_history(run_history.RunHistory.from_dict(history)) if history else ""
  if "Examples" in by_type:
    return describe_examples(summary.artifact_props(by_type["Examples"]))
  return ""


class ComponentProgress(logging.Handler):
  """Prints start / end lines of the components of one LocalDagRunner run.

  Args:
    node_ids: the pipeline's component ids in run order (for "[2/3]").
    store_fn: opens the ML Metadata store (read-only), called at each component's end.
    stream: where the lines go (default stdout).
    clock: monotonic seconds.
  """

  def __init__(self, node_ids: Sequence[str], store_fn: Callable[[], Any],
               stream: Optional[TextIO] = None, clock: Callable[[], float] = time.monotonic):
    super().__init__(level=logging.INFO)
    self.node_ids: List[str] = list(node_ids)
    self.store_fn = store_fn
    self.stream = stream
    self.clock = clock
    self.current: Optional[str] = None  # The component running now, if any.
    self.finished: List[str] = []
    self._started = 0.0
    self._execution: Optional[int] = None
    self._cached = False

  def _tag(self, node_id: str) -> str:
    if node_id in self.node_ids:
      return f"[{self.node_ids.index(node_id) + 1}/{len(self.node_ids)}] {node_id}"
    return f"[{node_id}]"

  def _print(self, text: str):
    stream = self.stream or sys.stdout
    stream.write(text + "\n")
    stream.flush()

  def emit(self, record: logging.LogRecord):
    try:
      if record.msg == _RUNNING and record.args:
        self.current, self._execution, self._cached = str(record.args[0]), None, False
        self._started = self.clock()
        self._print(f"{self._tag(self.current)}: started")
      elif record.msg in (_NEW_EXECUTION, _CACHED_EXECUTION) and record.args:
        self._execution = int(record.args[0])
        self._cached = record.msg == _CACHED_EXECUTION
      elif record.msg == _FINISHED and record.args:
        node_id = str(record.args[0])
        seconds = self.clock() - self._started
        try:
          what = self._describe()
        except Exception as e:  # pylint: disable=broad-except  # say so, keep the line.
          what = f"(its outputs could not be read: {type(e).__name__}: {e})"
        how = "reused the cached result" if self._cached else \
            f"done in {readable.seconds(seconds)}"
        self._print(f"{self._tag(node_id)}: {how}" + (f": {what}" if what else ""))
        self.finished.append(node_id)
        self.current = None
    except Exception:  # pylint: disable=broad-except  # progress must not break the run.
      self.handleError(record)

  def _describe(self) -> str:
    if self._execution is None:
      return ""
    from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
    store = self.store_fn()
    outputs = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)
    ids = [e.artifact_id for e in store.get_events_by_execution_ids([self._execution])
           if e.type in outputs]
    if not ids:
      return ""
    type_names = {t.id: t.name for t in store.get_artifact_types()}
    return describe_outputs(store.get_artifacts_by_id(ids), type_names)
