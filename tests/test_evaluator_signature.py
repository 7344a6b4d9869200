"""ConvergenceEvaluator downstream of a model that is not DistributedTrainer's: the task
and outputs read from the serving signature, the label from config, and no
TrainingHistory (the convergence part left out, and said so)."""
import os

import numpy as np
import pytest

from tfx.types import artifact_utils, standard_artifacts

import evaluator_fixtures as testing

from tfx_parallel.components.common import artifacts, config_util, keys
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.convergence_evaluator import executor
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import signature
from tfx_parallel.components.convergence_evaluator.config import (BinaryThresholds,
                                                                  EvaluatorConfig)

FEATURES = ["x0", "x1"]
KERNEL, BIAS = [2.0, -1.0], 0.3
S = signature.OutputSpec


def test_contract_outputs_are_used_and_decide_the_task():
  contract = {"probabilities": S("float32", (None, 1)), "logits": S("float32", (None, 1)),
              "class_ids": S("int64", (None, 1))}
  assert signature.infer_task(contract) == ("binary", 2)
  assert signature.output_map(contract, "binary") == signature.OutputMap(
      probabilities="probabilities", logits="logits")
  assert signature.infer_task({"probabilities": S("float32", (None, 4))}) == ("multiclass", 4)
  assert signature.infer_task({"predictions": S("float32", (None, 1))}) == ("regression", 1)


def test_a_single_output_is_the_prediction_or_the_probabilities():
  single = {"outputs": S("float32", (None, 1)), "ids": S("int64", (None,))}
  assert signature.output_map(single, "regression").prediction == "outputs"
  m = signature.output_map(single, "binary")
  assert m.probabilities == "outputs" and m.logits is None
  values = m.values({"outputs": np.array([[0.5], [0.9], [1.0]])}, "binary")
  np.testing.assert_allclose(values["logits"][:2].ravel(), [0.0, np.log(9.0)], rtol=1e-6)
  assert np.isfinite(values["logits"]).all()  # p = 1 is clipped, not inf
  with pytest.raises(ValueError, match=r"output 'outputs' of m has shape \[None, 3\]; a "
                                       r"binary model's output is P\(class 1\)"):
    signature.output_map({"outputs": S("float32", (None, 3))}, "binary", model_dir="m")


def test_an_ambiguous_signature_asks_for_prediction_key():
  two = {"a": S("float32", (None, 1)), "b": S("float32", (None, 1))}
  with pytest.raises(ValueError, match=r"^prediction_key: .* returns \['a', 'b'\], not the "
                                       r"contract outputs and not exactly one float output"):
    signature.output_map(two, "regression")
  assert signature.output_map(two, "regression", "b").prediction == "b"
  with pytest.raises(ValueError, match=r"^prediction_key: .* has no output 'c'"):
    signature.output_map(two, "binary", "c")


@pytest.fixture(scope="module")
def stock_inputs(tmp_path_factory):
  """Stock-like inputs: Examples without custom properties (int64 label 'big'), and a
  Model whose signature returns one sigmoid output named 'outputs', no task properties."""
  root = tmp_path_factory.mktemp("stock")
  x, y = testing.classification_data(400, KERNEL, BIAS, noise=0.5)
  records = testing.serialize_examples(x, y, FEATURES, "big", label_type="int")
  written = testing.write_examples(str(root / "examples"),
                                   {"train": records[:200], "eval": records[200:]},
                                   FEATURES, "big")
  examples = standard_artifacts.Examples()
  examples.uri = written.uri
  examples.split_names = artifact_utils.encode_split_names(["eval", "train"])
  model = testing._export(str(root / "model"),  # pylint: disable=protected-access
                          testing._dense(KERNEL, [BIAS], "sigmoid"),  # pylint: disable=protected-access
                          FEATURES, lambda p: {"outputs": p})
  return examples, model, x[200:], y[200:]


def _run(tmp_path, examples, model, config, history=None):
  metrics = artifacts.ConvergenceMetrics()
  metrics.uri = str(tmp_path / "metrics")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / "blessing")
  os.makedirs(blessing.uri)
  inputs = {keys.MODEL_KEY: [model], keys.EXAMPLES_KEY: [examples]}
  if history is not None:
    inputs[keys.HISTORY_KEY] = [history]
  executor.Executor().Do(inputs, {keys.METRICS_KEY: [metrics], keys.BLESSING_KEY: [blessing]},
                         {keys.CONFIG_KEY: config_util.to_json(config)})
  return P.read_properties(metrics.mlmd_artifact.custom_properties), blessing, metrics


def test_a_stock_model_without_history_is_evaluated_and_blessed_by_thresholds(
    tmp_path, stock_inputs):
  examples, model, x, y = stock_inputs
  config = EvaluatorConfig(task="binary", label_key="big",
                           binary=BinaryThresholds(min_accuracy=0.6))
  props, blessing, metrics = _run(tmp_path / "a", examples, model, config)
  expected = np.mean(((x @ np.float32(KERNEL) + BIAS) > 0).astype(np.int64) == y)
  assert props[P.TASK] == "binary" and props[P.EVAL_EXAMPLES] == 200
  assert props[P.EVAL_ACCURACY] == pytest.approx(expected, abs=1e-9)
  assert props[P.CONVERGENCE_STATE] == "unknown (no TrainingHistory)"
  assert P.FINAL_LOSS not in props and P.CURVES_FILE not in props
  assert props[P.BLESSED] == 1 and os.path.exists(os.path.join(blessing.uri, "BLESSED"))
  assert sorted(os.listdir(metrics.uri)) == ["kfp_metrics.json", "metrics.json", "report.html"]
  # The same model fails a threshold it cannot meet.
  strict = EvaluatorConfig(task="binary", label_key="big",
                           binary=BinaryThresholds(min_accuracy=0.999))
  props, blessing, _ = _run(tmp_path / "b", examples, model, strict)
  assert props[P.BLESSED] == 0 and "eval_accuracy" in props[P.BLESSING_MESSAGE]
  assert os.path.exists(os.path.join(blessing.uri, "NOT_BLESSED"))


def test_without_a_label_anywhere_the_error_names_the_config_key(tmp_path, stock_inputs):
  examples, model = stock_inputs[:2]
  with pytest.raises(ConfigError, match=r"^label_key: not set, and neither the Examples "
                                        r"artifact .* nor a TrainingHistory names the label"):
    _run(tmp_path, examples, model, EvaluatorConfig(task="binary"))


def test_the_component_takes_no_history():
  from tfx import types
  from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator
  component = ConvergenceEvaluator(
      model=types.Channel(type=standard_artifacts.Model),
      examples=types.Channel(type=standard_artifacts.Examples),
      config=EvaluatorConfig(label_key="big"))
  assert sorted(component.inputs) == [keys.EXAMPLES_KEY, keys.MODEL_KEY]
