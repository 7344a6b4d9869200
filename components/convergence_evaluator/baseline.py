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
``change >= bound``. A NaN candidate metric fails every set bound, as in TFMA.
"""
import math
from typing import Any, Dict, Mapping, Optional

from tfx_parallel.components.common import config_util
from tfx_parallel.components.convergence_evaluator.config import ChangeThreshold
from tfx_parallel.components.convergence_evaluator.config import ChangeThresholds
from tfx_parallel.components.convergence_evaluator.config import LOWER_IS_BETTER

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
    change = ("undefined (baseline is 0)" if entry["relative_change"] is None
              else f"{entry['relative_change']:+.6g}")
    parts.append(f"relative change {change} is not {op} {key}.relative "
                 f"{entry['relative_threshold']:g}")
  bound = ("absolute" if not _holds(entry["absolute_change"], entry["absolute_threshold"],
                                    entry["direction"]) else "relative")
  change = entry[f"{bound}_change"]
  fix = (config_util.suggest(f"{key}.{bound}", _outward(change, entry["direction"]))
         + " or null" if change is not None else config_util.suggest(f"{key}.{bound}", "null"))
  return (f"{entry['name']} {entry['candidate']:.6g} vs baseline {entry['baseline']:.6g} "
          f"({worse} is worse): " + " and ".join(parts) + f"; to accept it, {fix}")


def _outward(change: float, direction: str) -> str:
  """``change`` to 3 significant digits, rounded so that the bound lets it pass."""
  if change == 0 or not math.isfinite(change):
    return f"{change:g}"
  step = 10.0 ** (math.floor(math.log10(abs(change))) - 2)
  rounded = (math.ceil(change / step) if direction == LOWER_IS_BETTER
             else math.floor(change / step)) * step
  return f"{rounded:.3g}"


def compare(candidate: Mapping[str, float], baseline: Mapping[str, float], task: str,
            thresholds: ChangeThresholds, baseline_uri: str,
            baseline_source: str) -> Dict[str, Any]:
  """The comparison dict (module docstring) of the task's metrics present in both
  ``candidate`` and ``baseline`` ({metric name: value}, e.g. ``eval_mse``)."""
  if baseline_source not in SOURCES:
    raise ValueError(f"baseline_source must be one of {list(SOURCES)}. "
                     f"Received: {baseline_source!r}")
  entries = [check_metric(name, candidate[name], baseline[name], threshold)
             for name, threshold in thresholds.for_task(task).items()
             if name in candidate and name in baseline]
  failures = [failure(e, task) for e in entries if not e["passed"]]
  return {"baseline_uri": baseline_uri, "baseline_source": baseline_source,
          "metrics": entries, "passed": not failures,
          "reason": ("; ".join(failures) if failures else
                     f"every change threshold of {task} holds against the baseline")}


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
