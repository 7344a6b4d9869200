"""ConvergenceEvaluator construction: channels, the JSON config property, early errors."""
import pytest

from tfx import types
from tfx.types import standard_artifacts

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator
from tfx_parallel.components.convergence_evaluator import config as config_lib
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig


def _channels():
  return dict(model=types.Channel(type=standard_artifacts.Model),
              examples=types.Channel(type=standard_artifacts.Examples),
              history=types.Channel(type=artifacts.TrainingHistory))


def test_outputs_and_config_round_trip():
  config = EvaluatorConfig(
      target_loss=0.05, split="test", task="multiclass",
      regression=config_lib.RegressionThresholds(max_eval_mse=1.0),
      binary=config_lib.BinaryThresholds(min_auc=0.7, max_log_loss=0.6),
      multiclass=config_lib.MulticlassThresholds(min_class_accuracy=0.5))
  component = ConvergenceEvaluator(config=config, **_channels())
  assert component.outputs[keys.METRICS_KEY].type is artifacts.ConvergenceMetrics
  assert component.outputs[keys.BLESSING_KEY].type is standard_artifacts.ModelBlessing
  text = component.exec_properties[keys.CONFIG_KEY]
  assert config_util.from_json(EvaluatorConfig, text) == config


def test_default_config():
  component = ConvergenceEvaluator(**_channels())
  assert config_util.from_json(EvaluatorConfig,
                               component.exec_properties[keys.CONFIG_KEY]) == EvaluatorConfig()


@pytest.mark.parametrize("bad, key", [
    (dict(target_fraction=1.5), "target_fraction"),
    (dict(plateau_window=1), "plateau_window"),
    (dict(rise_tolerance=0), "rise_tolerance"),
    (dict(batch_size=0), "batch_size"),
    (dict(split=""), "split"),
    (dict(task="ranking"), "task"),
    (dict(regression=config_lib.RegressionThresholds(max_eval_mse=-1.0)),
     "regression.max_eval_mse"),
    (dict(binary=config_lib.BinaryThresholds(min_auc=1.5)), "binary.min_auc"),
    (dict(multiclass=config_lib.MulticlassThresholds(max_log_loss=-0.1)),
     "multiclass.max_log_loss"),
])
def test_bad_config_fails_at_construction_naming_the_key(bad, key):
  with pytest.raises(config_util.ConfigError) as error:
    ConvergenceEvaluator(config=EvaluatorConfig(**bad), **_channels())
  assert error.value.key == key


def test_wrong_channel_type_is_rejected():
  channels = _channels()
  channels["history"] = types.Channel(type=standard_artifacts.Model)
  with pytest.raises(TypeError, match=r"Argument history should be a Channel of type .*"
                                      r"TrainingHistory.* \(got .*Model"):
    ConvergenceEvaluator(**channels)


def test_per_task_thresholds_decode_from_json_and_unknown_keys_are_named():
  config = config_util.from_dict(EvaluatorConfig, {"binary": {"min_accuracy": 0.8}})
  assert config.binary == config_lib.BinaryThresholds(min_accuracy=0.8)
  assert config.regression == config_lib.RegressionThresholds()
  with pytest.raises(config_util.ConfigError, match="unknown key") as error:
    config_util.from_dict(EvaluatorConfig, {"binary": {"min_r2": 0.8}})
  assert error.value.key == "binary.min_r2"
  with pytest.raises(config_util.ConfigError, match="unknown key") as error:
    config_util.from_dict(EvaluatorConfig, {"max_eval_mse": 0.8})  # Now regression.*.
  assert error.value.key == "max_eval_mse"
