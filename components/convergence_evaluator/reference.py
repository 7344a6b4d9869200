"""The trivial predictor: the loss of a model that ignores the features (pure).

Measured on the evaluated split, in the evaluator's own metric, so that it does not
depend on the loss the model was trained with:

* regression: predict the label mean; its MSE is the label variance. The model's
  ``eval_mse`` over it is 1 - R^2.
* binary / multiclass: predict the class priors; its log loss is the entropy of the
  priors, -sum_k p_k ln p_k (0.5623 for 25 % positives). The model's ``eval_log_loss``
  over it is the "normalized entropy" of He et al., "Practical lessons from
  predicting clicks on ads at Facebook" (2014).

convergence.py calls a model "converged" only when it beats this by ``min_gain``.
"""
import math
from typing import Sequence, Tuple

from tfx_parallel.components.convergence_evaluator import quality as quality_lib


def prior_log_loss(class_counts: Sequence[int]) -> float:
  """-sum_k p_k ln p_k of the class frequencies; NaN without examples."""
  total = float(sum(class_counts))
  if total <= 0:
    return math.nan
  return -sum((n / total) * math.log(n / total) for n in class_counts if n > 0)


def losses(quality: quality_lib.AnyQuality) -> Tuple[float, float]:
  """(the model's loss, the trivial predictor's loss) on the split, in one metric:
  (eval MSE, label variance) or (eval log loss, prior log loss)."""
  if isinstance(quality, quality_lib.BinaryQuality):
    return quality.log_loss, prior_log_loss(
        [quality.examples - quality.positives, quality.positives])
  if isinstance(quality, quality_lib.MulticlassQuality):
    return quality.log_loss, prior_log_loss(quality.class_examples)
  return quality.mse, quality.label_variance


def ratio(model_loss: float, trivial_loss: float) -> float:
  """``loss_vs_trivial``: model / trivial; NaN when the trivial loss is 0 or unknown."""
  if not (math.isfinite(trivial_loss) and trivial_loss > 0):
    return math.nan
  return model_loss / trivial_loss
