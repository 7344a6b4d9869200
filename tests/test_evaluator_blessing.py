"""The blessing decision."""
import math

from tfx_parallel.components.convergence_evaluator import blessing
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import config as config_lib
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.convergence_evaluator.quality import BinaryQuality
from tfx_parallel.components.convergence_evaluator.quality import MulticlassQuality
from tfx_parallel.components.convergence_evaluator.quality import Quality


def _quality(mse=0.1, r2=0.9):
  return Quality(examples=1000, mse=mse, rmse=math.sqrt(abs(mse)), mae=0.1, r2=r2,
                 label_is_binary=False, accuracy=-1.0, auc=-1.0)


def test_converged_within_thresholds_is_blessed():
  config = EvaluatorConfig(
      regression=config_lib.RegressionThresholds(max_eval_mse=0.2, min_r2=0.8))
  assert blessing.decide(_quality(), P.CONVERGED, config) == (True, "")


def test_each_failed_check_is_named():
  config = EvaluatorConfig(
      regression=config_lib.RegressionThresholds(max_eval_mse=0.05, min_r2=0.95))
  blessed, message = blessing.decide(_quality(), P.PLATEAUED, config)
  assert not blessed
  assert "plateaued" in message and "regression.max_eval_mse" in message
  assert "regression.min_r2" in message
  _, message = blessing.decide(_quality(), P.PLATEAUED, EvaluatorConfig(),
                               "stopped falling, but the model is 2.0 % below the trivial")
  assert message == ("convergence_state is 'plateaued', require_converged needs 'converged' "
                     "(stopped falling, but the model is 2.0 % below the trivial)")


def test_diverged_is_never_blessed_even_without_require_converged():
  config = EvaluatorConfig(require_converged=False)
  assert blessing.decide(_quality(), P.DIVERGED, config)[0] is False
  assert blessing.decide(_quality(), P.PLATEAUED, config)[0] is True


def test_non_finite_mse_is_not_blessed():
  blessed, message = blessing.decide(_quality(mse=math.nan), P.CONVERGED, EvaluatorConfig())
  assert not blessed and "non-finite" in message


def _binary(accuracy=0.9, auc=0.95, log_loss=0.3, precision=0.8, recall=0.7):
  return BinaryQuality(examples=100, accuracy=accuracy, auc=auc, log_loss=log_loss,
                       precision=precision, recall=recall, positives=40)


def test_binary_thresholds_apply_to_a_binary_quality_only():
  thresholds = config_lib.BinaryThresholds(min_accuracy=0.85, min_auc=0.9, max_log_loss=0.4,
                                           min_precision=0.75, min_recall=0.65)
  config = EvaluatorConfig(binary=thresholds,
                           regression=config_lib.RegressionThresholds(max_eval_mse=0.0))
  assert blessing.decide(_binary(), P.CONVERGED, config) == (True, "")
  blessed, message = blessing.decide(
      _binary(accuracy=0.8, auc=0.85, log_loss=0.5, precision=0.7, recall=0.6),
      P.CONVERGED, config)
  assert not blessed
  for key in ("binary.min_accuracy", "binary.min_auc", "binary.max_log_loss",
              "binary.min_precision", "binary.min_recall"):
    assert key in message
  assert "regression" not in message


def test_binary_not_applicable_precision_fails_a_set_bound_only():
  config = EvaluatorConfig(binary=config_lib.BinaryThresholds(min_precision=0.1))
  blessed, message = blessing.decide(_binary(precision=-1.0), P.CONVERGED, config)
  assert not blessed and "eval_precision -1 < binary.min_precision" in message
  assert blessing.decide(_binary(precision=-1.0), P.CONVERGED, EvaluatorConfig())[0]
  blessed, message = blessing.decide(_binary(log_loss=math.nan), P.CONVERGED,
                                     EvaluatorConfig())
  assert not blessed and "non-finite logits" in message


def test_multiclass_min_class_accuracy_names_the_class_and_skips_absent_ones():
  quality = MulticlassQuality(examples=300, accuracy=0.7, log_loss=0.8,
                              class_accuracy=(0.9, 0.4, -1.0), class_examples=(20, 10, 0))
  config = EvaluatorConfig(multiclass=config_lib.MulticlassThresholds(
      min_accuracy=0.6, max_log_loss=1.0, min_class_accuracy=0.5))
  blessed, message = blessing.decide(quality, P.CONVERGED, config)
  assert not blessed
  assert message == "eval_class_accuracy_1 0.4 < multiclass.min_class_accuracy 0.5"
  config = EvaluatorConfig(multiclass=config_lib.MulticlassThresholds(min_class_accuracy=0.4))
  assert blessing.decide(quality, P.CONVERGED, config) == (True, "")
