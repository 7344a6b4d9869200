"""The blessing decision: pure, from the quality, the convergence state and the config.

Only the thresholds of the evaluated task are checked (config.py: ``regression``,
``binary``, ``multiclass``); an unset threshold is not checked.
"""
import math
from typing import List, Optional, Tuple

from tfx_parallel.components.common import config_util
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import quality as quality_lib
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig


def decide(quality: quality_lib.AnyQuality, state: str,
           config: EvaluatorConfig, reason: str = "") -> Tuple[bool, str]:
  """(blessed, message). ``message`` lists every failed check, "" when blessed.

  Checks: a run on an unrepresentative eval split (``reason``: the warnings) is not
  judged, and not blessed; fewer eval examples than ``min_eval_examples`` are not
  blessed (the message names the setting); a diverged run is never blessed; with ``require_converged`` the state must be
  "converged" (not checked when the state is ``P.NO_HISTORY``: no TrainingHistory); then the task's thresholds (a regression model's eval MSE must also be
  finite, a classifier's log loss likewise). ``reason`` (convergence.py's) is quoted
  with a failed state check.
  """
  if state == P.UNREPRESENTATIVE:
    return False, f"{P.UNREPRESENTATIVE}: {reason}; the model was not judged"
  failures = []
  if quality.examples < config.min_eval_examples:
    failures.append(too_few_examples(quality.examples, config.min_eval_examples))
  if state == P.DIVERGED:
    failures.append("training diverged" + (f" ({reason})" if reason else ""))
  elif state == P.NO_HISTORY:
    pass  # No TrainingHistory: nothing to say about convergence; the thresholds decide.
  elif config.require_converged and state not in (P.CONVERGED, P.OVERFITTING):
    failures.append(f"convergence_state is {state!r}, require_converged needs "
                    f"{P.CONVERGED!r}" + (f" ({reason})" if reason else ""))
  if isinstance(quality, quality_lib.BinaryQuality):
    failures += _binary(quality, config)
  elif isinstance(quality, quality_lib.MulticlassQuality):
    failures += _multiclass(quality, config)
  else:
    failures += _regression(quality, config)
  return not failures, "; ".join(failures)


def too_few_examples(examples: int, minimum: int) -> str:
  """Why a run on ``examples`` eval rows is not blessed, and the setting that changes it."""
  return (f"only {examples} eval example(s), fewer than min_eval_examples {minimum}: too "
          f"few to tell a good model from a lucky one. Use more data or a larger eval "
          f"split, or accept it: {config_util.suggest('evaluator.min_eval_examples', examples)}")


def _at_least(name: str, value: float, key: str, bound: Optional[float],
              minus_one_is_na: bool = True) -> List[str]:
  """A failure unless value >= bound (NaN, and -1 "not applicable", fail a set bound)."""
  if bound is None or (value >= bound and not (minus_one_is_na and value == -1.0)):
    return []
  return [f"{name} {value:.6g} < {key} {bound:.6g}"]


def _at_most(name: str, value: float, key: str, bound: Optional[float]) -> List[str]:
  if bound is None or value <= bound:
    return []
  return [f"{name} {value:.6g} > {key} {bound:.6g}"]


def _regression(quality: quality_lib.Quality, config: EvaluatorConfig) -> List[str]:
  t = config.regression
  if not math.isfinite(quality.mse):
    return [f"{P.EVAL_MSE} is {quality.mse} (the model predicts non-finite values)"] + \
        _at_least(P.EVAL_R2, quality.r2, "regression.min_r2", t.min_r2, False)
  return (_at_most(P.EVAL_MSE, quality.mse, "regression.max_eval_mse", t.max_eval_mse) +
          _at_least(P.EVAL_R2, quality.r2, "regression.min_r2", t.min_r2, False))


def _log_loss(value: float, key: str, bound: Optional[float]) -> List[str]:
  if math.isnan(value):
    return [f"{P.EVAL_LOG_LOSS} is nan (the model outputs non-finite logits)"]
  return _at_most(P.EVAL_LOG_LOSS, value, key, bound)


def _binary(quality: quality_lib.BinaryQuality, config: EvaluatorConfig) -> List[str]:
  t = config.binary
  return (_at_least(P.EVAL_ACCURACY, quality.accuracy, "binary.min_accuracy", t.min_accuracy) +
          _at_least(P.EVAL_AUC, quality.auc, "binary.min_auc", t.min_auc) +
          _log_loss(quality.log_loss, "binary.max_log_loss", t.max_log_loss) +
          _at_least(P.EVAL_PRECISION, quality.precision, "binary.min_precision",
                    t.min_precision) +
          _at_least(P.EVAL_RECALL, quality.recall, "binary.min_recall", t.min_recall))


def _multiclass(quality: quality_lib.MulticlassQuality,
                config: EvaluatorConfig) -> List[str]:
  t = config.multiclass
  failures = (_at_least(P.EVAL_ACCURACY, quality.accuracy, "multiclass.min_accuracy",
                        t.min_accuracy) +
              _log_loss(quality.log_loss, "multiclass.max_log_loss", t.max_log_loss))
  for k, (accuracy, n) in enumerate(zip(quality.class_accuracy, quality.class_examples)):
    if n:  # A class absent from the split has no accuracy to bound.
      failures += _at_least(f"{P.EVAL_CLASS_ACCURACY_PREFIX}{k}", accuracy,
                            "multiclass.min_class_accuracy", t.min_class_accuracy)
  return failures
