"""The optional stock TFMA Evaluator stage (``--with-tfma``), configured like ours.

It evaluates the same exported model (``serving_default`` on serialized tf.Examples) on
the same split, with the metrics that match ConvergenceEvaluator's for the task, so the
numbers are directly comparable (tests check them):

* regression: output ``predictions``; ``mean_squared_error`` ~ ``eval_mse`` (1e-4 rel);
* binary: output ``probabilities`` (P(class 1)); ``binary_accuracy``, ``precision``,
  ``recall`` at threshold 0.5, ``auc`` and ``binary_crossentropy`` ~ ``eval_accuracy``,
  ``eval_precision``, ``eval_recall``, ``eval_auc`` (1e-4) and ``eval_log_loss``. TFMA's
  AUC interpolates over its default 10,000 thresholds, ours is exact: on the 2,000-row
  fixture they differ by 2.5e-6;
* multiclass: output ``probabilities`` [N, K]; ``sparse_categorical_accuracy`` ~
  ``eval_accuracy`` (1e-4).

TFMA reads the label itself: numeric labels (0/1, 0..K-1) as they are, and string labels
through the ``classes`` output of DistributedTrainer's models, whose class names are the
label vocabulary (TFMA's metric_util.prepare_labels_and_predictions reads the vocabulary
from ``classes`` when ``scores`` is there too; tests/test_evaluator_tfma.py checks the
accuracy against ConvergenceEvaluator's on a string label).
"""
import copy
from typing import Optional, Sequence

import tensorflow_model_analysis as tfma
from tfx import types
from tfx.components import Evaluator
from tfx.dsl.components.common import resolver
from tfx.dsl.input_resolution.strategies import latest_blessed_model_strategy
from tfx.types import channel
from tfx.types import standard_artifacts

from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator import config as config_lib
from tfx_parallel.components.convergence_evaluator import task as task_lib

PREDICTION_KEY = keys.PREDICTIONS_OUTPUT
# TFMA-native (Beam combiner) metrics, no Keras metric wrappers: they are the fastest
# form TFMA offers, so a speed comparison against it is fair.
METRICS = ("ExampleCount", "MeanSquaredError", "MeanAbsoluteError")
BINARY_METRICS = (
    tfma.MetricConfig(class_name="ExampleCount"),
    tfma.MetricConfig(class_name="BinaryAccuracy"),
    tfma.MetricConfig(class_name="AUC"),
    tfma.MetricConfig(class_name="Precision"),
    tfma.MetricConfig(class_name="Recall"),
    tfma.MetricConfig(class_name="BinaryCrossEntropy"),
)
# SparseCategoricalAccuracy is a Keras metric (tf_keras here), which TFMA wraps: TFMA has
# no native top-1 accuracy over class ids.
MULTICLASS_METRICS = (
    tfma.MetricConfig(class_name="ExampleCount"),
    tfma.MetricConfig(class_name="SparseCategoricalAccuracy"),
)


# Our change-threshold metrics (config.py) -> TFMA's metric of the same quantity, per task
# (as above). ``eval_r2`` has no TFMA metric: its change threshold is ours alone.
TFMA_NAMES = {
    task_lib.REGRESSION: {"eval_mse": "MeanSquaredError", "eval_mae": "MeanAbsoluteError"},
    task_lib.BINARY: {"eval_accuracy": "BinaryAccuracy", "eval_auc": "AUC",
                      "eval_log_loss": "BinaryCrossEntropy", "eval_precision": "Precision",
                      "eval_recall": "Recall"},
    task_lib.MULTICLASS: {"eval_accuracy": "SparseCategoricalAccuracy"},
}
CANDIDATE, BASELINE = "candidate", "baseline"


def change_threshold(threshold) -> Optional[tfma.MetricThreshold]:
  """Our ChangeThreshold as TFMA's MetricThreshold(change_threshold=...): the same
  direction, absolute and relative bounds; None when neither bound is set."""
  if threshold.absolute is None and threshold.relative is None:
    return None
  change = tfma.GenericChangeThreshold(
      direction=(tfma.MetricDirection.LOWER_IS_BETTER
                 if threshold.direction == config_lib.LOWER_IS_BETTER
                 else tfma.MetricDirection.HIGHER_IS_BETTER))
  if threshold.absolute is not None:
    change.absolute.value = threshold.absolute
  if threshold.relative is not None:
    change.relative.value = threshold.relative
  return tfma.MetricThreshold(change_threshold=change)


def _with_change_thresholds(configs, task: str, thresholds):
  by_class = {tfma_name: change_threshold(thresholds.for_task(task)[ours])
              for ours, tfma_name in TFMA_NAMES[task].items()}
  out = []
  for config in configs:
    config = copy.deepcopy(config)
    threshold = by_class.get(config.class_name)
    if threshold is not None:
      config.threshold.CopyFrom(threshold)
    out.append(config)
  return out


def _metric_configs(task: str, metrics: Sequence[str]):
  if task == task_lib.BINARY:
    return list(BINARY_METRICS)
  if task == task_lib.MULTICLASS:
    return list(MULTICLASS_METRICS)
  if task != task_lib.REGRESSION:
    raise ValueError(f"task must be one of {list(keys.TASKS)}. Received: {task!r}")
  return [tfma.MetricConfig(class_name=name) for name in metrics]


def eval_config(label_key: str, metrics: Sequence[str] = METRICS,
                task: str = "regression", change_thresholds=None) -> tfma.EvalConfig:
  """TFMA EvalConfig: one model, serving_default, overall slice, the task's metrics.

  ``metrics`` (TFMA class names) applies to regression; classification uses the fixed
  sets above, matched to ConvergenceEvaluator's. With ``change_thresholds`` (config.py's
  ChangeThresholds), two models, ``candidate`` and ``baseline`` (``is_baseline``), and
  our change thresholds as TFMA's on the matching metrics (TFMA_NAMES), so the stock
  Evaluator given the same baseline model makes the same blessing decision.
  """
  prediction_key = PREDICTION_KEY if task == task_lib.REGRESSION else keys.PROBABILITIES_OUTPUT
  configs = _metric_configs(task, metrics)
  names = [""]
  if change_thresholds is not None:
    configs = _with_change_thresholds(configs, task, change_thresholds)
    names = [CANDIDATE, BASELINE]
  return tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(name=name, signature_name=keys.SERVING_SIGNATURE,
                                  label_key=label_key,
                                  prediction_key=prediction_key,
                                  is_baseline=name == BASELINE,
                                  preprocessing_function_names=[]) for name in names],
      slicing_specs=[tfma.SlicingSpec()],
      metrics_specs=[tfma.MetricsSpec(metrics=configs)])


RESOLVER_ID = "latest_blessed_model_resolver"


def latest_blessed_resolver():
  """TFX's own way to the baseline (tfx 1.16 LatestBlessedModelStrategy docstring): the
  latest Model whose ModelBlessing is ``blessed`` 1, by ``current_model_id``, which
  ConvergenceEvaluator's blessings set as the stock Evaluator's do."""
  return resolver.Resolver(
      strategy_class=latest_blessed_model_strategy.LatestBlessedModelStrategy,
      model=channel.Channel(type=standard_artifacts.Model),
      model_blessing=channel.Channel(type=standard_artifacts.ModelBlessing),
  ).with_id(RESOLVER_ID)


def stock_evaluator(model_channel: types.BaseChannel, examples_channel: types.BaseChannel,
                    label_key: str, split: str = "eval",
                    task: str = "regression",
                    baseline_model: Optional[types.BaseChannel] = None,
                    change_thresholds=None) -> Evaluator:
  """A stock ``tfx.components.Evaluator`` evaluating ``split`` with :func:`eval_config`.

  It has no thresholds, so the stock executor skips validation and its ``blessing``
  output gets no ``blessed`` property; ConvergenceEvaluator's blessing is the one that
  gates. Its ``evaluation`` output holds the metrics (``tfma.load_metrics``). With
  ``baseline_model`` and ``change_thresholds``, it also validates our change thresholds
  against that baseline (eval_config) and blesses as TFMA decides.
  """
  return Evaluator(examples=examples_channel, model=model_channel,
                   baseline_model=baseline_model,
                   eval_config=eval_config(label_key, task=task,
                                           change_thresholds=change_thresholds),
                   example_splits=[split])
