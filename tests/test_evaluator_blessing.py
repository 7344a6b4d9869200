"""The blessing decision."""
import math

import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
from tfx_parallel.components.convergence_evaluator import blessing
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.convergence_evaluator.quality import Quality


def _quality(mse=0.1, r2=0.9):
  return Quality(examples=10, mse=mse, rmse=math.sqrt(abs(mse)), mae=0.1, r2=r2,
                 label_is_binary=False, accuracy=-1.0, auc=-1.0)


def test_converged_within_thresholds_is_blessed():
  config = EvaluatorConfig(max_eval_mse=0.2, min_r2=0.8)
  assert blessing.decide(_quality(), P.CONVERGED, config) == (True, "")


def test_each_failed_check_is_named():
  config = EvaluatorConfig(max_eval_mse=0.05, min_r2=0.95)
  blessed, message = blessing.decide(_quality(), P.PLATEAUED, config)
  assert not blessed
  assert "plateaued" in message and "max_eval_mse" in message and "min_r2" in message


def test_diverged_is_never_blessed_even_without_require_converged():
  config = EvaluatorConfig(require_converged=False)
  assert blessing.decide(_quality(), P.DIVERGED, config)[0] is False
  assert blessing.decide(_quality(), P.PLATEAUED, config)[0] is True


def test_non_finite_mse_is_not_blessed():
  blessed, message = blessing.decide(_quality(mse=math.nan), P.CONVERGED, EvaluatorConfig())
  assert not blessed and "non-finite" in message
