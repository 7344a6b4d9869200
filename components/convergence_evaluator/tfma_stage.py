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
from typing import Sequence

import tensorflow_model_analysis as tfma
from tfx import types
from tfx.components import Evaluator

from tfx_parallel.components.common import keys
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


def _metric_configs(task: str, metrics: Sequence[str]):
  if task == task_lib.BINARY:
    return list(BINARY_METRICS)
  if task == task_lib.MULTICLASS:
    return list(MULTICLASS_METRICS)
  if task != task_lib.REGRESSION:
    raise ValueError(f"task must be one of {list(keys.TASKS)}. Received: {task!r}")
  return [tfma.MetricConfig(class_name=name) for name in metrics]


def eval_config(label_key: str, metrics: Sequence[str] = METRICS,
                task: str = "regression") -> tfma.EvalConfig:
  """TFMA EvalConfig: one model, serving_default, overall slice, the task's metrics.

  ``metrics`` (TFMA class names) applies to regression; classification uses the fixed
  sets above, matched to ConvergenceEvaluator's.
  """
  prediction_key = PREDICTION_KEY if task == task_lib.REGRESSION else keys.PROBABILITIES_OUTPUT
  return tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(signature_name=keys.SERVING_SIGNATURE,
                                  label_key=label_key,
                                  prediction_key=prediction_key,
                                  preprocessing_function_names=[])],
      slicing_specs=[tfma.SlicingSpec()],
      metrics_specs=[tfma.MetricsSpec(metrics=_metric_configs(task, metrics))])


def stock_evaluator(model_channel: types.BaseChannel, examples_channel: types.BaseChannel,
                    label_key: str, split: str = "eval",
                    task: str = "regression") -> Evaluator:
  """A stock ``tfx.components.Evaluator`` evaluating ``split`` with :func:`eval_config`.

  It has no thresholds, so the stock executor skips validation and its ``blessing``
  output gets no ``blessed`` property; ConvergenceEvaluator's blessing is the one that
  gates. Its ``evaluation`` output holds the metrics (``tfma.load_metrics``).
  """
  return Evaluator(examples=examples_channel, model=model_channel,
                   eval_config=eval_config(label_key, task=task), example_splits=[split])
