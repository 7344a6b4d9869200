"""The blessing decision: pure, from the quality, the convergence state and the config."""
import math
from typing import Tuple

from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.convergence_evaluator.quality import Quality


def decide(quality: Quality, state: str, config: EvaluatorConfig) -> Tuple[bool, str]:
  """(blessed, message). ``message`` lists every failed check, "" when blessed.

  Checks: a diverged run is never blessed; with ``require_converged`` the state must be
  "converged"; eval MSE must be finite and <= ``max_eval_mse``; eval R^2 >= ``min_r2``.
  An unset threshold is not checked.
  """
  failures = []
  if state == P.DIVERGED:
    failures.append("training diverged")
  elif config.require_converged and state != P.CONVERGED:
    failures.append(f"convergence_state is {state!r}, require_converged needs "
                    f"{P.CONVERGED!r}")
  if not math.isfinite(quality.mse):
    failures.append(f"eval_mse is {quality.mse} (the model predicts non-finite values)")
  elif config.max_eval_mse is not None and quality.mse > config.max_eval_mse:
    failures.append(f"eval_mse {quality.mse:.6g} > max_eval_mse {config.max_eval_mse:.6g}")
  if config.min_r2 is not None and not quality.r2 >= config.min_r2:
    failures.append(f"eval_r2 {quality.r2:.6g} < min_r2 {config.min_r2:.6g}")
  return not failures, "; ".join(failures)
