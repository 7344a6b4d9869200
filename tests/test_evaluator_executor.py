"""The real ConvergenceEvaluator executor on fixture artifacts (no TFX mocks)."""
import json
import math
import os

import numpy as np
import pytest

import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
from tfx.types import standard_artifacts

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator import executor
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import testing
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig

FEATURES = ["x0", "x1"]
TRUE_W, TRUE_B = [1.0, 2.0], 3.0
LEARNED_W, LEARNED_B = [1.1, 1.95], 2.9


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
  root = tmp_path_factory.mktemp("inputs")
  x, y = testing.synthetic_data(200, TRUE_W, TRUE_B, noise=0.1)
  records = testing.serialize_examples(x, y, FEATURES, "y")
  examples = testing.write_examples(str(root / "examples"),
                                    {"train": records[:100], "eval": records[100:]},
                                    FEATURES, "y", TRUE_W, TRUE_B)
  model = testing.export_linear_model(str(root / "model"), LEARNED_W, LEARNED_B, FEATURES)
  return examples, model, x[100:], y[100:]


def _run(tmp_path, inputs, history, config=EvaluatorConfig()):
  examples, model, _, _ = inputs
  history_artifact = testing.write_history(str(tmp_path / "history"), history)
  metrics = artifacts.ConvergenceMetrics()
  metrics.uri = str(tmp_path / "metrics")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / "blessing")
  os.makedirs(blessing.uri)
  executor.Executor().Do(
      {keys.MODEL_KEY: [model], keys.EXAMPLES_KEY: [examples],
       keys.HISTORY_KEY: [history_artifact]},
      {keys.METRICS_KEY: [metrics], keys.BLESSING_KEY: [blessing]},
      {keys.CONFIG_KEY: config_util.to_json(config)})
  props = {name: P.decode(value) for name, value in
           metrics.mlmd_artifact.custom_properties.items()}
  return metrics, blessing, props


def test_converged_run_is_measured_and_blessed(tmp_path, inputs):
  _, model, x, y = inputs
  losses = 20.0 * np.exp(-0.2 * np.arange(1, 31))  # Records every 10 steps.
  history = testing.linear_history(losses, kernel=LEARNED_W, bias=LEARNED_B,
                                   steps_per_epoch=100)
  metrics, blessing, props = _run(tmp_path, inputs, history,
                                  EvaluatorConfig(max_eval_mse=1.0, min_r2=0.5))

  predictions = x.astype(np.float64) @ np.float32(LEARNED_W) + np.float32(LEARNED_B)
  error = predictions - y
  assert props[P.EVAL_MSE] == pytest.approx(np.mean(error ** 2), rel=1e-5)
  assert props[P.EVAL_RMSE] == pytest.approx(math.sqrt(props[P.EVAL_MSE]))
  assert props[P.EVAL_MAE] == pytest.approx(np.mean(np.abs(error)), rel=1e-5)
  assert props[P.EVAL_R2] == pytest.approx(
      1 - np.sum(error ** 2) / np.sum((y - y.mean()) ** 2), rel=1e-5)
  assert props[P.EVAL_EXAMPLES] == 100 and props[P.EVAL_SPLIT] == "eval"
  assert props[P.LABEL_IS_BINARY] == 0 and props[P.EVAL_AUC] == -1

  first = int(np.flatnonzero(losses <= 0.01 * losses[0])[0])
  assert props[P.STEPS_TO_TARGET] == (first + 1) * 10
  assert props[P.SECONDS_TO_TARGET] == pytest.approx((first + 1) * 10 * 0.01)
  assert props[P.CONVERGENCE_STATE] == P.CONVERGED
  assert props[P.CONVERGENCE_RATE] == pytest.approx(-0.02)
  assert props[P.INITIAL_LOSS] == pytest.approx(losses[0])
  assert props[P.FINAL_LOSS] == pytest.approx(losses[-1])
  assert props[P.BEST_LOSS] == pytest.approx(losses[-1])
  assert props[P.NUM_EPOCHS] == 3
  assert props[P.EPOCH_LOSS_PREFIX + "2"] == pytest.approx(losses[19])
  assert props[P.EPOCH_EVAL_LOSS_PREFIX + "2"] == pytest.approx(losses[19] * 1.1)
  assert props[P.GRAD_NORM_TREND] < 0

  assert props[P.WEIGHT_ERROR] == pytest.approx(0.1, abs=1e-6)
  assert props[P.BIAS_ERROR] == pytest.approx(0.1, abs=1e-6)
  assert props[P.LAYOUT] == "mesh" and props[P.MESH_SHAPE] == "2x2"
  assert props[P.REPLICAS] == 2 and props[P.NUM_DEVICES] == 4
  assert json.loads(props[P.DEVICES])[0].endswith("CPU:0")
  assert props[P.EXAMPLES_PER_SEC] == 1500.0

  assert props[P.BLESSED] == 1 and props[P.BLESSING_MESSAGE] == ""
  assert blessing.get_int_custom_property("blessed") == 1
  assert blessing.get_string_custom_property("current_model") == model.uri
  assert os.listdir(blessing.uri) == ["BLESSED"]

  assert props[P.CURVES_FILE] == "curves.json" and props[P.PLOT_FILE] == "loss.png"
  with open(os.path.join(metrics.uri, "curves.json")) as f:
    curves = json.load(f)
  assert curves["records"]["step"][:2] == [10, 20]
  assert curves["records"]["loss"][-1] == pytest.approx(losses[-1])
  assert curves["epochs"][0]["epoch"] == 1
  with open(os.path.join(metrics.uri, "metrics.json")) as f:
    exact = json.load(f)
  assert props[P.METRICS_FILE] == "metrics.json"
  assert set(exact) == set(props)
  assert exact[P.EVAL_MSE] == props[P.EVAL_MSE]  # Unrounded: not stored in a DB here.
  with open(os.path.join(metrics.uri, "loss.png"), "rb") as f:
    assert f.read(4) == b"\x89PNG"


def test_diverged_run_is_not_blessed_and_non_finite_values_are_encoded(tmp_path, inputs):
  history = testing.linear_history([5.0, 3.0, float("nan"), float("nan")],
                                   layout="single", mesh_shape=(), replicas=1)
  _, blessing, props = _run(tmp_path, inputs, history, EvaluatorConfig(require_converged=False))
  assert props[P.CONVERGENCE_STATE] == P.DIVERGED
  assert math.isnan(props[P.FINAL_LOSS])
  assert props[P.STEPS_TO_TARGET] == -1
  assert props[P.WEIGHT_ERROR] == -1.0 and props[P.BIAS_ERROR] == -1.0  # No weights.
  assert props[P.MESH_SHAPE] == "" and props[P.LAYOUT] == "single"
  assert props[P.BLESSED] == 0 and "diverged" in props[P.BLESSING_MESSAGE]
  assert blessing.get_int_custom_property("blessed") == 0
  assert os.listdir(blessing.uri) == ["NOT_BLESSED"]
  with open(os.path.join(tmp_path, "metrics", "metrics.json")) as f:
    assert json.load(f)[P.FINAL_LOSS] == "nan"


def test_bad_config_json_names_the_key(tmp_path, inputs):
  examples, model, _, _ = inputs
  with pytest.raises(ValueError, match="plateau_windw"):
    executor.Executor().Do(
        {keys.MODEL_KEY: [model], keys.EXAMPLES_KEY: [examples], keys.HISTORY_KEY: []},
        {}, {keys.CONFIG_KEY: json.dumps({"plateau_windw": 3})})
