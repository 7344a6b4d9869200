"""The optional stock TFMA Evaluator stage (``--with-tfma``), configured like ours.

It evaluates the same exported model (``serving_default`` on serialized tf.Examples,
output ``predictions``) on the same split, so its ``mean_squared_error`` is directly
comparable with ConvergenceEvaluator's ``eval_mse`` (tests check 1e-4 relative parity).
"""
from typing import Sequence

from tfx_parallel.pipeline import tfenv

tfenv.prepare()

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow_model_analysis as tfma
from tfx import types
from tfx.components import Evaluator

from tfx_parallel.components.common import keys

PREDICTION_KEY = "predictions"
# TFMA-native (Beam combiner) metrics, no Keras metric wrappers: they are the fastest
# form TFMA offers, so a speed comparison against it is fair.
METRICS = ("ExampleCount", "MeanSquaredError", "MeanAbsoluteError")


def eval_config(label_key: str, metrics: Sequence[str] = METRICS) -> tfma.EvalConfig:
  """TFMA EvalConfig: one model, serving_default, overall slice, regression metrics."""
  return tfma.EvalConfig(
      model_specs=[tfma.ModelSpec(signature_name=keys.SERVING_SIGNATURE,
                                  label_key=label_key,
                                  prediction_key=PREDICTION_KEY,
                                  preprocessing_function_names=[])],
      slicing_specs=[tfma.SlicingSpec()],
      metrics_specs=[tfma.MetricsSpec(
          metrics=[tfma.MetricConfig(class_name=name) for name in metrics])])


def stock_evaluator(model_channel: types.BaseChannel, examples_channel: types.BaseChannel,
                    label_key: str, split: str = "eval") -> Evaluator:
  """A stock ``tfx.components.Evaluator`` evaluating ``split`` with :func:`eval_config`.

  It has no thresholds, so the stock executor skips validation and its ``blessing``
  output gets no ``blessed`` property; ConvergenceEvaluator's blessing is the one that
  gates. Its ``evaluation`` output holds ``mean_squared_error`` (``tfma.load_metrics``).
  """
  return Evaluator(examples=examples_channel, model=model_channel,
                   eval_config=eval_config(label_key), example_splits=[split])
