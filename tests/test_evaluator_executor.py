"""The real ConvergenceEvaluator executor on fixture artifacts (no TFX mocks)."""
import json
import math
import os

import numpy as np
import pytest

from tfx.types import standard_artifacts

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator import executor
from tfx_parallel.components.convergence_evaluator import properties as P
import evaluator_fixtures as testing
from tfx_parallel.components.convergence_evaluator import config as config_lib
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


def _run(tmp_path, inputs, history, config=EvaluatorConfig(), baseline_model=None,
         **history_task):
  """One executor Do on (examples, model) of ``inputs``, a history written from
  ``history`` with ``history_task`` properties and, if given, a ``baseline_model``
  artifact; (metrics, blessing, the metrics' properties)."""
  examples, model = inputs[:2]
  history_artifact = testing.write_history(str(tmp_path / "history"), history, **history_task)
  metrics = artifacts.ConvergenceMetrics()
  metrics.uri = str(tmp_path / "metrics")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / "blessing")
  os.makedirs(blessing.uri)
  given = {keys.MODEL_KEY: [model], keys.EXAMPLES_KEY: [examples],
           keys.HISTORY_KEY: [history_artifact]}
  if baseline_model is not None:
    given[keys.BASELINE_MODEL_KEY] = [baseline_model]
  executor.Executor().Do(given, {keys.METRICS_KEY: [metrics], keys.BLESSING_KEY: [blessing]},
                         {keys.CONFIG_KEY: config_util.to_json(config)})
  props = P.read_properties(metrics.mlmd_artifact.custom_properties)
  return metrics, blessing, props


def test_converged_run_is_measured_and_blessed(tmp_path, inputs):
  _, model, x, y = inputs
  losses = 20.0 * np.exp(-1.0 * np.arange(1, 31)) + 0.01  # Records every 10 steps.
  history = testing.linear_history(losses, kernel=LEARNED_W, bias=LEARNED_B,
                                   steps_per_epoch=100)
  metrics, blessing, props = _run(tmp_path, inputs, history, EvaluatorConfig(
      regression=config_lib.RegressionThresholds(max_eval_mse=1.0, min_r2=0.5)))

  predictions = x.astype(np.float64) @ np.float32(LEARNED_W) + np.float32(LEARNED_B)
  error = predictions - y
  assert props[P.EVAL_MSE] == pytest.approx(np.mean(error ** 2), rel=1e-5)
  assert props[P.EVAL_RMSE] == pytest.approx(math.sqrt(props[P.EVAL_MSE]))
  assert props[P.EVAL_MAE] == pytest.approx(np.mean(np.abs(error)), rel=1e-5)
  assert props[P.EVAL_R2] == pytest.approx(
      1 - np.sum(error ** 2) / np.sum((y - y.mean()) ** 2), rel=1e-5)
  assert props[P.EVAL_EXAMPLES] == 100 and props[P.EVAL_SPLIT] == "eval"
  assert props[P.LABEL_IS_BINARY] == 0 and props[P.EVAL_AUC] == -1
  assert props[P.TASK] == "regression" and props[P.NUM_CLASSES] == 1  # No task property.
  assert P.EVAL_LOG_LOSS not in props and P.LABEL_VOCABULARY not in props

  # The trivial predictor (the label mean) on the eval split: its MSE is the variance.
  assert props[P.TRIVIAL_LOSS] == pytest.approx(np.var(y.astype(np.float64)), rel=1e-6)
  assert props[P.LOSS_VS_TRIVIAL] == pytest.approx(1 - props[P.EVAL_R2], rel=1e-6)
  assert props[P.TARGET_LOSS] == pytest.approx(0.01 * props[P.TRIVIAL_LOSS])
  first = int(np.flatnonzero(losses <= props[P.TARGET_LOSS])[0])
  assert props[P.STEPS_TO_TARGET] == (first + 1) * 10
  assert props[P.SECONDS_TO_TARGET] == pytest.approx((first + 1) * 10 * 0.01)
  assert props[P.CONVERGENCE_STATE] == P.CONVERGED, props[P.CONVERGENCE_REASON]
  assert "stopped falling" in props[P.CONVERGENCE_REASON]
  assert props[P.CONVERGENCE_RATE] < 0
  assert props[P.INITIAL_LOSS] == pytest.approx(losses[0])
  assert props[P.FINAL_LOSS] == pytest.approx(losses[-1])
  assert props[P.BEST_LOSS] == pytest.approx(losses[-1])
  assert props[P.NUM_EPOCHS] == 3
  assert props[P.EPOCH_LOSS_PREFIX + "2"] == pytest.approx(losses[19])
  assert props[P.EPOCH_EVAL_LOSS_PREFIX + "2"] == pytest.approx(losses[19] * 1.1)

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
  precise = metrics.get_json_value_custom_property(P.PRECISE_VALUES)
  assert precise[P.EVAL_MSE] == exact[P.EVAL_MSE]
  assert set(precise) == {k for k, v in exact.items() if isinstance(props[k], float)}
  with open(os.path.join(metrics.uri, "loss.png"), "rb") as f:
    assert f.read(4) == b"\x89PNG"
  with open(os.path.join(metrics.uri, "report.html")) as f:  # report.py, beside it.
    page = f.read()
  assert "Blessed" in page and "<svg" in page and "No baseline: first run" in page
  forms = _forms(metrics)
  assert forms["metrics"]["eval_mse"] == exact[P.EVAL_MSE] and forms["classification"] is None


def _forms(metrics):
  with open(os.path.join(metrics.uri, "kfp_metrics.json")) as f:
    return json.load(f)


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


BINARY_W, BINARY_B = [2.0, -1.0], 0.2
MULTI_W, MULTI_B = [[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]], [0.0, 0.1, -0.1]


@pytest.fixture(scope="module")
def classification(tmp_path_factory):
  """Examples with a float 0/1 label and a string label, and the two classifiers."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("classification")
  x, y = testing.classification_data(300, BINARY_W, BINARY_B, noise=0.5, seed=11)
  _, ids = testing.classification_data(300, MULTI_W, MULTI_B, noise=0.5, seed=11)
  names = np.array(["lo", "mid", "hi"])[ids]
  splits = {}
  for split, rows in (("train", slice(0, 100)), ("eval", slice(100, 300))):
    binary = testing.serialize_examples(x[rows], y[rows].astype(np.float32), FEATURES, "y")
    multi = testing.serialize_examples(x[rows], names[rows], FEATURES, "z", label_type="bytes")
    for b, m in zip(binary, multi):  # One example holding both labels.
      example = tf.train.Example.FromString(b)
      example.features.feature["z"].CopyFrom(tf.train.Example.FromString(m).features.feature["z"])
      splits.setdefault(split, []).append(example.SerializeToString())
  binary_model = testing.export_classifier_model(str(root / "binary"), "binary", BINARY_W,
                                                 BINARY_B, FEATURES)
  multi_model = testing.export_classifier_model(str(root / "multi"), "multiclass", MULTI_W,
                                                MULTI_B, FEATURES, with_properties=False)
  return {"x": x[100:], "y": y[100:], "ids": ids[100:], "splits": splits, "root": root,
          "binary": binary_model, "multi": multi_model}


def _examples(classification, label_key):
  return testing.write_examples(str(classification["root"] / f"examples-{label_key}"),
                                classification["splits"], FEATURES, label_key)


def _converged():
  return testing.linear_history(20.0 * np.exp(-1.0 * np.arange(1, 31)) + 0.01,
                                layout="single", mesh_shape=(), replicas=1)


def test_binary_model_is_evaluated_as_binary_and_blessed_by_binary_thresholds(
    tmp_path, classification):
  inputs = (_examples(classification, "y"), classification["binary"])
  config = EvaluatorConfig(binary=config_lib.BinaryThresholds(min_accuracy=0.6, min_auc=0.7),
                           regression=config_lib.RegressionThresholds(max_eval_mse=0.0))
  metrics, blessing, props = _run(tmp_path, inputs, _converged(), config)  # History: no task.
  x, y = classification["x"], classification["y"]
  z = x.astype(np.float64) @ np.float32(BINARY_W) + np.float32(BINARY_B)
  assert props[P.TASK] == "binary" and props[P.NUM_CLASSES] == 2
  assert props[P.EVAL_EXAMPLES] == 200
  assert props[P.EVAL_ACCURACY] == np.mean((z > 0) == (y == 1))
  assert props[P.EVAL_LOG_LOSS] == pytest.approx(np.mean(np.logaddexp(0, z) - y * z),
                                                 rel=1e-5)
  tp = np.sum((z > 0) & (y == 1))
  assert props[P.EVAL_PRECISION] == tp / np.sum(z > 0)
  assert props[P.EVAL_RECALL] == tp / np.sum(y == 1)
  assert props[P.EVAL_POSITIVES] == np.sum(y == 1)
  p = np.mean(y == 1)  # The trivial predictor: the class prior, whatever the features.
  assert props[P.TRIVIAL_LOSS] == pytest.approx(-(p * np.log(p) + (1 - p) * np.log(1 - p)))
  assert props[P.LOSS_VS_TRIVIAL] == pytest.approx(props[P.EVAL_LOG_LOSS] /
                                                   props[P.TRIVIAL_LOSS])
  assert 0.7 < props[P.EVAL_AUC] <= 1.0
  assert P.EVAL_MSE not in props and P.EVAL_R2 not in props
  assert props[P.BLESSED] == 1, props[P.BLESSING_MESSAGE]  # regression bound not checked.
  assert blessing.get_int_custom_property("blessed") == 1
  forms = _forms(metrics)["classification"]  # The KFP UI's (report.py): [[tn, fp], [fn, tp]].
  fp, fn = np.sum((z > 0) & (y == 0)), np.sum((z <= 0) & (y == 1))
  assert forms["confusionMatrix"]["rows"] == [{"row": [200 - tp - fp - fn, fp]},
                                              {"row": [fn, tp]}]
  roc = forms["confidenceMetrics"]
  assert len(roc) == 101 and roc[0]["recall"] == roc[0]["falsePositiveRate"] == 1.0
  area = sum((a["falsePositiveRate"] - b["falsePositiveRate"]) * (a["recall"] + b["recall"]) / 2
             for a, b in zip(roc, roc[1:]))
  assert area == pytest.approx(props[P.EVAL_AUC], abs=0.02)

  config = EvaluatorConfig(binary=config_lib.BinaryThresholds(min_auc=0.999))
  _, _, props = _run(tmp_path / "strict", inputs, _converged(), config)
  assert props[P.BLESSED] == 0
  assert props[P.BLESSING_MESSAGE].startswith("eval_auc ") and "binary.min_auc" in \
      props[P.BLESSING_MESSAGE]


def test_multiclass_task_from_the_history_with_string_labels(tmp_path, classification):
  inputs = (_examples(classification, "z"), classification["multi"])  # Model: no task.
  metrics, _, props = _run(tmp_path, inputs, _converged(), task="multiclass", num_classes=3,
                     label_vocabulary=["lo", "mid", "hi"])
  x, ids = classification["x"], classification["ids"]
  predicted = (x.astype(np.float64) @ np.float32(MULTI_W) + np.float32(MULTI_B)).argmax(1)
  assert props[P.TASK] == "multiclass" and props[P.NUM_CLASSES] == 3
  assert json.loads(props[P.LABEL_VOCABULARY]) == ["lo", "mid", "hi"]
  assert props[P.EVAL_ACCURACY] == pytest.approx(np.mean(predicted == ids), abs=1e-12)
  for k in range(3):
    assert props[f"{P.EVAL_CLASS_EXAMPLES_PREFIX}{k}"] == np.sum(ids == k)
    assert props[f"{P.EVAL_CLASS_ACCURACY_PREFIX}{k}"] == pytest.approx(
        np.mean(predicted[ids == k] == k), abs=1e-12)
  assert props[P.EVAL_LOG_LOSS] > 0 and P.EVAL_AUC not in props
  forms = _forms(metrics)["classification"]
  assert [a["displayName"] for a in forms["confusionMatrix"]["annotationSpecs"]] == [
      "lo", "mid", "hi"]
  rows = np.array([r["row"] for r in forms["confusionMatrix"]["rows"]])
  assert (rows == np.bincount(ids * 3 + predicted, minlength=9).reshape(3, 3)).all()
  assert "confidenceMetrics" not in forms


def test_task_from_config_and_conflicts_fail_before_evaluation(tmp_path, classification):
  examples = _examples(classification, "y")
  config = EvaluatorConfig(task="binary")
  model = testing.export_classifier_model(str(tmp_path / "bare"), "binary", BINARY_W,
                                          BINARY_B, FEATURES, with_properties=False)
  _, _, props = _run(tmp_path / "config", (examples, model), _converged(), config)
  assert props[P.TASK] == "binary" and props[P.EVAL_AUC] > 0.7
  with pytest.raises(ValueError, match=r"Model artifact at .* says 'binary', TrainingHistory "
                                       r"artifact at .* says 'multiclass'"):
    _run(tmp_path / "conflict", (examples, classification["binary"]), _converged(),
         task="multiclass", num_classes=3)
  assert not os.path.exists(tmp_path / "conflict" / "metrics")  # Nothing written.


def _converged_history():
  losses = 20.0 * np.exp(-1.0 * np.arange(1, 31)) + 0.01
  return testing.linear_history(losses, kernel=LEARNED_W, bias=LEARNED_B, steps_per_epoch=100)


def _examples_with(inputs, tmp_path, **properties):
  """The fixture's Examples (same files) as a new artifact with extra string properties."""
  examples = standard_artifacts.Examples()
  examples.uri = inputs[0].uri
  examples.split_names = inputs[0].split_names
  for name in inputs[0].mlmd_artifact.custom_properties:
    examples.mlmd_artifact.custom_properties[name].CopyFrom(
        inputs[0].mlmd_artifact.custom_properties[name])
  for name, value in properties.items():
    examples.set_string_custom_property(name, value)
  return (examples,) + tuple(inputs[1:])


def test_eval_split_warnings_of_the_examples_replace_the_verdict(tmp_path, inputs):
  """#47: a split whose eval holds 2 distinct rows was judged "diverged". The ingest
  records eval_split_warnings on the Examples; the evaluator then says so instead of
  judging the model, and does not bless. "[]" and no property (stock ExampleGen) judge."""
  warnings = ["eval holds 2 distinct rows of 131", "class 'b' is missing from train"]
  assert keys.EVAL_SPLIT_WARNINGS == "eval_split_warnings"
  warned = _examples_with(inputs, tmp_path, eval_split_warnings=json.dumps(warnings))
  _, blessing, props = _run(tmp_path / "warned", warned, _converged_history())
  assert props[P.CONVERGENCE_STATE] == P.UNREPRESENTATIVE == "unrepresentative eval split"
  assert props[P.CONVERGENCE_REASON] == "; ".join(warnings)
  assert json.loads(props[P.EVAL_SPLIT_WARNINGS]) == warnings
  assert props[P.BLESSED] == 0 and os.listdir(blessing.uri) == ["NOT_BLESSED"]
  assert props[P.BLESSING_MESSAGE] == (
      "unrepresentative eval split: eval holds 2 distinct rows of 131; class 'b' is "
      "missing from train; the model was not judged")
  assert props[P.EVAL_EXAMPLES] == 100  # The metrics are still measured and recorded.
  fine = _examples_with(inputs, tmp_path, eval_split_warnings="[]")
  _, _, props = _run(tmp_path / "fine", fine, _converged_history())
  assert props[P.CONVERGENCE_STATE] == P.CONVERGED and props[P.BLESSED] == 1
  assert props[P.EVAL_SPLIT_WARNINGS] == "[]"
  # Stock ExampleGen's Examples carry no such property: judged.
  stock = _examples_with(inputs, tmp_path)
  del stock[0].mlmd_artifact.custom_properties[keys.EVAL_SPLIT_WARNINGS]
  _, _, props = _run(tmp_path / "stock", stock, _converged_history())
  assert props[P.CONVERGENCE_STATE] == P.CONVERGED and props[P.BLESSED] == 1
  broken = _examples_with(inputs, tmp_path, eval_split_warnings="eval is odd")
  with pytest.raises(ValueError, match=r"'eval_split_warnings' property that is not JSON"):
    _run(tmp_path / "broken", broken, _converged_history())


def test_too_few_eval_rows_are_not_blessed_and_the_log_names_the_setting(tmp_path, inputs,
                                                                          caplog):
  """#47: an 83-row file was blessed on 13 eval rows without a word."""
  config = EvaluatorConfig(min_eval_examples=101)
  with caplog.at_level("WARNING"):
    _, blessing, props = _run(tmp_path, inputs, _converged_history(), config)
  assert props[P.CONVERGENCE_STATE] == P.CONVERGED and props[P.BLESSED] == 0
  assert os.listdir(blessing.uri) == ["NOT_BLESSED"]
  assert props[P.BLESSING_MESSAGE].startswith(
      "only 100 eval example(s), fewer than min_eval_examples 101")
  assert "set evaluator.min_eval_examples=100" in props[P.BLESSING_MESSAGE]
  assert "set evaluator.min_eval_examples=100" in caplog.text
  # At the minimum: blessed; the default is 100.
  assert EvaluatorConfig().min_eval_examples == 100
  _, _, props = _run(tmp_path / "at", inputs, _converged_history())
  assert props[P.BLESSED] == 1 and props[P.EVAL_UNLABELLED] == 0
  with pytest.raises(config_util.ConfigError, match="min_eval_examples"):
    EvaluatorConfig(min_eval_examples=-1).validate()
