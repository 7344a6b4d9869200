"""The comparison of a candidate model with its baseline: pure, from both models' metrics.

:func:`compare` returns the plain dict written as ``baseline_comparison.json`` beside
``metrics.json`` (and read by the KFP UI report):

    {"baseline_uri": str, "baseline_source": "channel" | "latest_blessed",
     "metrics": [{"name", "candidate", "baseline", "direction", "absolute_change",
                  "relative_change" (None when the baseline is 0), "absolute_threshold",
                  "relative_threshold" (None: not checked), "passed"}],
     "passed": bool, "reason": str}

The check is TFMA's ``GenericChangeThreshold`` check (tensorflow/model-analysis v0.47.1,
``tensorflow_model_analysis/evaluators/metrics_validator.py``:65-102): ``absolute_change =
candidate - baseline``; ``relative_change = absolute_change / baseline`` (NaN in TFMA when
the baseline is close to 0, which fails a relative bound: here None, and failed);
``lower_is_better`` passes when ``change <= bound``, ``higher_is_better`` when
``change >= bound``. A NaN candidate metric fails every set bound, as in TFMA; an
infinite one fails every finite bound. The dict keeps such values as floats;
``baseline_comparison.json`` writes them as ``properties.encode_json`` does ("nan",
"inf", "-inf").
"""
import dataclasses
import json
import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator.config import ChangeThreshold
from tfx_parallel.components.convergence_evaluator.config import ChangeThresholds
from tfx_parallel.components.convergence_evaluator.config import LOWER_IS_BETTER
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import task as task_lib

FILE_NAME = "baseline_comparison.json"
CHANNEL = "channel"
LATEST_BLESSED = "latest_blessed"
SOURCES = (CHANNEL, LATEST_BLESSED)
# Custom properties on the ConvergenceMetrics artifact (with a baseline only).
BASELINE_URI = "baseline_uri"
BASELINE_SOURCE = "baseline_source"
BASELINE_PASSED = "baseline_passed"          # int 1/0: every change threshold held.
BASELINE_REASON = "baseline_reason"          # str: the failed checks, "" when passed.
BASELINE_PREFIX = "baseline_"                # baseline_<metric>: the baseline's value.
CHANGE_PREFIX = "change_"                    # change_<metric>: candidate - baseline.
COMPARISON_FILE = "baseline_comparison_file"  # str: FILE_NAME.


@dataclasses.dataclass(frozen=True)
class BaselineModel:
  """The baseline Model: where it is, where it came from (CHANNEL or LATEST_BLESSED), its
  ML Metadata id, and its task contract properties (task.read_properties: a subset of
  task, num_classes, label_vocabulary; {} for a model that records none)."""
  uri: str
  source: str
  model_id: int
  properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def where(self) -> str:
    how = ("given as baseline_model" if self.source == CHANNEL
           else "the latest blessed model")
    return f"the baseline model ({how}) at {self.uri}"

  @property
  def fix(self) -> str:
    """How to judge this run without it."""
    if self.source == CHANNEL:
      return ("judge this run without it (do not pass baseline_model to "
              "ConvergenceEvaluator) or pass a baseline of the same task and labels")
    return ("judge this run without a baseline: "
            + config_util.suggest("evaluator.baseline", "null")
            + " for this run (a model blessed then is the baseline of the runs after it)")


def task_of(baseline: BaselineModel, candidate: task_lib.TaskInfo,
            inferred: Tuple[str, int]) -> task_lib.TaskInfo:
  """How to evaluate the baseline: its own task, num_classes and label vocabulary from
  its Model's properties (as the trainer records them: task_contract.py); without
  them, from its serving signature when that shows a classifier (``inferred``:
  signature.infer_task), else as the candidate (a stock Trainer's model records no
  task: the candidate's is assumed, as for the candidate itself)."""
  if baseline.properties.get(keys.TASK):
    return task_lib.resolve(dict(baseline.properties), {}, None,
                            model_where=f"{baseline.where} (its Model artifact)")
  task, num_classes = inferred
  if task != task_lib.REGRESSION:
    return task_lib.TaskInfo(task, num_classes, None, "the baseline's serving signature")
  return dataclasses.replace(candidate, source="the candidate's (the baseline records none)")


def class_names(info: task_lib.TaskInfo) -> Tuple[str, ...]:
  """A classifier's class names by class id: its label vocabulary, else the ids."""
  if info.label_vocabulary is not None:
    return tuple(info.label_vocabulary)
  return tuple(str(k) for k in range(info.num_classes))


def check_comparable(candidate: task_lib.TaskInfo, baseline_info: task_lib.TaskInfo,
                     present: Sequence[str], baseline: BaselineModel) -> None:
  """Raises ValueError unless the baseline can be scored on the candidate's eval split
  by class name: the same task; for binary the same two classes (class 1 is the
  positive one); for multiclass every class ``present`` in the split (names) among the
  baseline's classes. The message names both vocabularies and the fix."""
  if baseline_info.task != candidate.task:
    raise ValueError(
        f"the baseline is {baseline_info.task}, the candidate is {candidate.task} "
        f"({baseline.where}; its task from {baseline_info.source}): a {candidate.task} "
        f"model cannot be compared with a {baseline_info.task} one; {baseline.fix}")
  if not candidate.is_classification:
    return
  theirs, ours = class_names(baseline_info), class_names(candidate)
  if candidate.task == task_lib.BINARY:
    unfair = theirs != ours
  else:
    unfair = bool(baseline_info.num_classes) and any(n not in theirs for n in present)
  if unfair:
    missing = [n for n in present if n not in theirs]
    raise ValueError(
        f"no fair comparison with {baseline.where}: its labels are {list(theirs)}, the "
        f"candidate's {list(ours)}"
        + (f", and the eval split has {missing}, which the baseline does not know"
           if missing else " (a binary model's class 1 must be the same class)")
        + f"; {baseline.fix}")


def relative_change(candidate: float, baseline: float) -> Optional[float]:
  """(candidate - baseline) / baseline; None where TFMA's ratio is NaN (a baseline close
  to 0, ``math.isclose(baseline, 0.0)``, or a NaN operand)."""
  if math.isclose(baseline, 0.0) or math.isnan(baseline) or math.isnan(candidate):
    return None
  return (candidate - baseline) / baseline


def _holds(change: Optional[float], bound: Optional[float], direction: str) -> bool:
  if bound is None:
    return True
  if change is None or math.isnan(change):
    return False  # NaN compares false in TFMA.
  return change <= bound if direction == LOWER_IS_BETTER else change >= bound


def check_metric(name: str, candidate: float, baseline: float,
                 threshold: ChangeThreshold) -> Dict[str, Any]:
  """One entry of ``metrics``: both values, the changes, the bounds, and whether it held."""
  candidate, baseline = float(candidate), float(baseline)
  absolute = candidate - baseline
  relative = relative_change(candidate, baseline)
  passed = (_holds(absolute, threshold.absolute, threshold.direction) and
            _holds(relative, threshold.relative, threshold.direction))
  return {"name": name, "candidate": candidate, "baseline": baseline,
          "direction": threshold.direction, "absolute_change": absolute,
          "relative_change": relative, "absolute_threshold": threshold.absolute,
          "relative_threshold": threshold.relative, "passed": passed}


def failure(entry: Mapping[str, Any], task: str) -> str:
  """Why ``entry`` failed: the metric, both values, the bound and the setting to change."""
  worse = "higher" if entry["direction"] == LOWER_IS_BETTER else "lower"
  key = f"evaluator.change_thresholds.{task}.{entry['name']}"
  parts = []
  if not _holds(entry["absolute_change"], entry["absolute_threshold"], entry["direction"]):
    op = "<=" if entry["direction"] == LOWER_IS_BETTER else ">="
    parts.append(f"absolute change {entry['absolute_change']:+.6g} is not {op} "
                 f"{key}.absolute {entry['absolute_threshold']:g}")
  if not _holds(entry["relative_change"], entry["relative_threshold"], entry["direction"]):
    op = "<=" if entry["direction"] == LOWER_IS_BETTER else ">="
    change = (f"undefined ({_why_undefined(entry)})" if entry["relative_change"] is None
              else f"{entry['relative_change']:+.6g}")
    parts.append(f"relative change {change} is not {op} {key}.relative "
                 f"{entry['relative_threshold']:g}")
  bound = ("absolute" if not _holds(entry["absolute_change"], entry["absolute_threshold"],
                                    entry["direction"]) else "relative")
  change = entry[f"{bound}_change"]
  if change is not None and math.isfinite(change):
    fix = "to accept it, " + config_util.suggest(
        f"{key}.{bound}", _outward(change, entry["direction"])) + " or null"
  else:  # No bound lets a NaN or infinite change pass: only leaving it unchecked does.
    fix = ("no bound accepts a change of "
           f"{'undefined' if change is None else f'{change:g}'}; to leave it unchecked, "
           + config_util.suggest(f"{key}.{bound}", "null"))
  return (f"{entry['name']} {entry['candidate']:.6g} vs baseline {entry['baseline']:.6g} "
          f"({worse} is worse): " + " and ".join(parts) + f"; {fix}")


def _why_undefined(entry: Mapping[str, Any]) -> str:
  """Why an entry's relative change is None (relative_change's cases)."""
  if math.isnan(entry["candidate"]):
    return "the candidate's value is NaN"
  if math.isnan(entry["baseline"]):
    return "the baseline's value is NaN"
  return "baseline is 0"


def _outward(change: float, direction: str) -> str:
  """``change`` to 3 significant digits, rounded so that the bound lets it pass."""
  if change == 0 or not math.isfinite(change):
    return f"{change:g}"
  step = 10.0 ** (math.floor(math.log10(abs(change))) - 2)
  rounded = (math.ceil(change / step) if direction == LOWER_IS_BETTER
             else math.floor(change / step)) * step
  return f"{rounded:.3g}"


# Metrics whose -1 means "not available" (quality.py: precision with nothing predicted
# positive, recall with no positive label, AUC without both classes): compared as NaN
# (undefined), never as the number -1.
NOT_AVAILABLE_AT_MINUS_ONE = ("eval_precision", "eval_recall", "eval_auc")


def _available(name: str, value: float) -> float:
  value = float(value)
  return math.nan if name in NOT_AVAILABLE_AT_MINUS_ONE and value == -1.0 else value


def compare(candidate: Mapping[str, float], baseline: Mapping[str, float], task: str,
            thresholds: ChangeThresholds, baseline_uri: str,
            baseline_source: str) -> Dict[str, Any]:
  """The comparison dict (module docstring) of the task's metrics present in both
  ``candidate`` and ``baseline`` ({metric name: value}, e.g. ``eval_mse``)."""
  if baseline_source not in SOURCES:
    raise ValueError(f"baseline_source must be one of {list(SOURCES)}. "
                     f"Received: {baseline_source!r}")
  entries = [check_metric(name, _available(name, candidate[name]),
                          _available(name, baseline[name]), threshold)
             for name, threshold in thresholds.for_task(task).items()
             if name in candidate and name in baseline]
  failures = [failure(e, task) for e in entries if not e["passed"]]
  return {"baseline_uri": baseline_uri, "baseline_source": baseline_source,
          "metrics": entries, "passed": not failures,
          "reason": ("; ".join(failures) if failures else
                     f"every change threshold of {task} holds against the baseline")}


def to_json(comparison: Mapping[str, Any]) -> str:
  """``baseline_comparison.json``: strict JSON, a non-finite value written as
  ``metrics.json`` writes it (properties.encode_json: "nan", "inf", "-inf")."""
  return json.dumps(_map_floats(comparison, P.encode_json), allow_nan=False, indent=1)


def from_json(text: str) -> Dict[str, Any]:
  """Inverse of :func:`to_json` (properties.decode_json on every string)."""
  return _map_floats(json.loads(text), P.decode_json)


def _map_floats(value, fn):
  if isinstance(value, (float, str)):
    return fn(value)
  if isinstance(value, dict):
    return {k: _map_floats(v, fn) for k, v in value.items()}
  if isinstance(value, list):
    return [_map_floats(v, fn) for v in value]
  return value


def blessing_message(comparison: Mapping[str, Any]) -> str:
  """The blessing message part of a failed comparison ("" when it passed)."""
  if comparison["passed"]:
    return ""
  return f"worse than the baseline at {comparison['baseline_uri']}: {comparison['reason']}"


def properties(comparison: Mapping[str, Any]) -> Dict[str, Any]:
  """Custom properties of the ConvergenceMetrics artifact for ``comparison``."""
  out = {BASELINE_URI: comparison["baseline_uri"],
         BASELINE_SOURCE: comparison["baseline_source"],
         BASELINE_PASSED: int(comparison["passed"]),
         BASELINE_REASON: "" if comparison["passed"] else comparison["reason"],
         COMPARISON_FILE: FILE_NAME}
  for entry in comparison["metrics"]:
    out[BASELINE_PREFIX + entry["name"]] = entry["baseline"]
    out[CHANGE_PREFIX + entry["name"]] = entry["absolute_change"]
  return out
