"""Parity with the stock TFMA Evaluator configured by tfma_stage (same model, same split).

Each slow test runs the stock Evaluator's executor (TFMA on Beam's DirectRunner) and our
``quality.evaluate`` on the same fixture model and Examples, per task.
"""
import json
import os

import numpy as np
import pytest

from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import path_utils
from tfx.utils import proto_utils

from tfx_parallel.components.convergence_evaluator import quality
from tfx_parallel.components.convergence_evaluator import task as task_lib
import evaluator_fixtures as testing
from tfx_parallel.components.convergence_evaluator import tfma_stage

FEATURES = ["x0", "x1", "x2", "x3"]


def _output(tmp_path, artifact_class, name):
  artifact = artifact_class()
  artifact.uri = str(tmp_path / name)
  os.makedirs(artifact.uri)
  return artifact


def _run_stock_evaluator(tmp_path, examples, model, label_key, task="regression"):
  """Runs the stock Evaluator's executor with tfma_stage's config; {metric name: value}."""
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  from tfx import types  # pylint: disable=g-import-not-at-top
  component = tfma_stage.stock_evaluator(types.Channel(type=standard_artifacts.Model),
                                         types.Channel(type=standard_artifacts.Examples),
                                         label_key, task=task)
  exec_properties = dict(component.exec_properties)  # The component's own JSON config.
  evaluation = _output(tmp_path, standard_artifacts.ModelEvaluation, "evaluation")
  blessing = _output(tmp_path, standard_artifacts.ModelBlessing, "blessing")
  component.executor_spec.executor_class().Do(
      {specs.EXAMPLES_KEY: [examples], specs.MODEL_KEY: [model]},
      {specs.EVALUATION_KEY: [evaluation], specs.BLESSING_KEY: [blessing]},
      exec_properties)
  [result] = tfma.load_metrics(evaluation.uri)
  return {kv.key.name: kv.value.double_value.value for kv in result.metric_keys_and_values}


def test_stock_evaluator_is_wired_to_our_channels():
  from tfx import types  # pylint: disable=g-import-not-at-top
  evaluator = tfma_stage.stock_evaluator(types.Channel(type=standard_artifacts.Model),
                                         types.Channel(type=standard_artifacts.Examples),
                                         label_key="y")
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  config = proto_utils.json_to_proto(evaluator.exec_properties[specs.EVAL_CONFIG_KEY],
                                     tfma.EvalConfig())
  assert config.model_specs[0].signature_name == "serving_default"
  assert config.model_specs[0].label_key == "y"
  assert json.loads(evaluator.exec_properties[specs.EXAMPLE_SPLITS_KEY]) == ["eval"]


def test_with_tfma_and_a_baseline_the_stock_evaluator_judges_the_same_two_models():
  """--with-tfma with evaluator.baseline=latest_blessed: the stock Evaluator gets the
  latest blessed Model (TFX's LatestBlessedModelStrategy resolver) and our change
  thresholds as TFMA's, so TFMA judges the candidate against the same baseline (their
  agreement: test_tfma_change_thresholds_make_our_blessing_decision)."""
  from tfx_parallel.pipeline import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  config = config_lib.PipelineConfig.from_dict({
      "with_tfma": True, "evaluator": {"baseline": "latest_blessed"}}).validate()
  nodes = {n.id: n for n in pipeline_lib.create_components(config)}
  resolver, evaluator = nodes[tfma_stage.RESOLVER_ID], nodes["Evaluator"]
  assert resolver.exec_properties["resolver_class"].__name__ == "LatestBlessedModelStrategy"
  assert evaluator.inputs["baseline_model"] is resolver.outputs["model"]
  eval_config = proto_utils.json_to_proto(evaluator.exec_properties[specs.EVAL_CONFIG_KEY],
                                          tfma.EvalConfig())
  assert [s.is_baseline for s in eval_config.model_specs] == [False, True]
  [mse] = [m for m in eval_config.metrics_specs[0].metrics
           if m.class_name == "MeanSquaredError"]
  assert mse.threshold.change_threshold.relative.value == pytest.approx(0.01)
  # Without a baseline: no resolver, the stock Evaluator judges the model alone.
  alone = config_lib.PipelineConfig.from_dict({"with_tfma": True}).validate()
  nodes = {n.id: n for n in pipeline_lib.create_components(alone)}
  assert tfma_stage.RESOLVER_ID not in nodes
  assert "baseline_model" not in nodes["Evaluator"].inputs


@pytest.mark.slow
def test_eval_mse_matches_tfma_within_1e_4_relative(tmp_path):
  x, y = testing.synthetic_data(3000, [1.0, -2.0, 0.5, 3.0], 1.5, noise=0.7, seed=5)
  missing = np.zeros_like(x, bool)
  missing[::11, 2] = True  # Both evaluators must see the model's 0.0 default.
  records = testing.serialize_examples(x, y, FEATURES, "y", missing=missing)
  examples = testing.write_examples(str(tmp_path / "examples"),
                                    {"train": records[:1000], "eval": records[1000:]},
                                    FEATURES, "y", shards=2)
  model = testing.export_linear_model(str(tmp_path / "model"), [0.9, -2.1, 0.6, 2.8], 1.2,
                                      FEATURES)

  ours = quality.evaluate(path_utils.serving_model_path(model.uri), examples.uri, "eval",
                          "y", batch_size=256)
  theirs = _run_stock_evaluator(tmp_path, examples, model, "y")
  assert theirs["example_count"] == ours.examples == 2000
  assert ours.mse == pytest.approx(theirs["mean_squared_error"], rel=1e-4)
  assert ours.mae == pytest.approx(theirs["mean_absolute_error"], rel=1e-4)


def test_classification_configs_read_the_probabilities_with_matching_metrics():
  binary = tfma_stage.eval_config("y", task="binary")
  assert binary.model_specs[0].prediction_key == "probabilities"
  assert [m.class_name for m in binary.metrics_specs[0].metrics] == [
      "ExampleCount", "BinaryAccuracy", "AUC", "Precision", "Recall", "BinaryCrossEntropy"]
  multi = tfma_stage.eval_config("y", task="multiclass")
  assert "SparseCategoricalAccuracy" in [m.class_name for m in multi.metrics_specs[0].metrics]
  with pytest.raises(ValueError, match="task must be one of .* Received: 'ranking'"):
    tfma_stage.eval_config("y", task="ranking")


def _classification_inputs(tmp_path, task, kernel, bias, seed):
  x, ids = testing.classification_data(3000, kernel, bias, noise=1.0, seed=seed)
  missing = np.zeros_like(x, bool)
  missing[::13, 1] = True  # Both evaluators must see the model's 0.0 default.
  # Float labels, as PartitionedExampleGen writes a numeric label column today.
  records = testing.serialize_examples(x, ids.astype(np.float32), FEATURES, "label",
                                       missing=missing)
  examples = testing.write_examples(str(tmp_path / "examples"),
                                    {"train": records[:1000], "eval": records[1000:]},
                                    FEATURES, "label", shards=2)
  # The served model is a little off the data's, so neither metric is near 1.
  model = testing.export_classifier_model(str(tmp_path / "model"), task,
                                          np.asarray(kernel) * 0.8 + 0.1,
                                          np.asarray(bias) - 0.1, FEATURES)
  info = task_lib.resolve(task_lib.read_properties(model), {})
  ours = quality.evaluate(path_utils.serving_model_path(model.uri), examples.uri, "eval",
                          "label", 256, info)
  return ours, _run_stock_evaluator(tmp_path, examples, model, "label", task=task)


@pytest.mark.slow
def test_binary_accuracy_and_auc_match_tfma_within_1e_4(tmp_path):
  ours, theirs = _classification_inputs(tmp_path, "binary", [1.0, -2.0, 0.5, 3.0], 0.4,
                                        seed=8)
  assert theirs["example_count"] == ours.examples == 2000
  assert 0.6 < ours.accuracy < 0.95 and 0.6 < ours.auc < 0.99
  assert ours.accuracy == pytest.approx(theirs["binary_accuracy"], abs=1e-4)
  assert ours.auc == pytest.approx(theirs["auc"], abs=1e-4)
  assert ours.precision == pytest.approx(theirs["precision"], abs=1e-4)
  assert ours.recall == pytest.approx(theirs["recall"], abs=1e-4)
  # TFMA's log loss is from (clipped) probabilities, ours from the logits.
  assert ours.log_loss == pytest.approx(theirs["binary_crossentropy"], rel=1e-5)


@pytest.mark.slow
def test_multiclass_accuracy_matches_tfma_within_1e_4(tmp_path):
  kernel = [[1.0, -1.0, 0.0], [0.5, 1.0, -1.5], [-1.0, 0.3, 1.0], [0.2, 0.0, -0.4]]
  ours, theirs = _classification_inputs(tmp_path, "multiclass", kernel, [0.1, 0.0, -0.1],
                                        seed=9)
  assert theirs["example_count"] == ours.examples == 2000
  assert 0.4 < ours.accuracy < 0.95
  assert ours.accuracy == pytest.approx(theirs["sparse_categorical_accuracy"], abs=1e-4)


@pytest.mark.slow
def test_a_string_label_reaches_tfma_through_the_exported_classes_output(tmp_path):
  """The trainer's export names the classes (``classes`` + ``scores``), so TFMA maps a
  string label to class ids by the same vocabulary (metric_util.
  prepare_labels_and_predictions) and its accuracy is ConvergenceEvaluator's."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  from tfx.types import artifact_utils  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import task_contract  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs import stats  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import export  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / "examples")
  tu.write_classification_examples(root, rows=200, eval_rows=300, label_type="bytes")
  examples = standard_artifacts.Examples()
  examples.uri = root
  examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
  spec, _, _ = stats.prepare(root, ["x"], ["color"], "y", task=None, max_vocabulary=10,
                             hash_buckets=0, hparams={}, skip_missing_labels=False,
                             normalize=False)
  assert spec.label_vocabulary == ("c0", "c1", "c2")
  tf.keras.utils.set_random_seed(3)
  model = user_module.build(user_module.load(builtin="linear"), spec)
  artifact = _output(tmp_path, standard_artifacts.Model, "model")
  export.export(path_utils.serving_model_path(artifact.uri), model, Preprocessor(spec))
  task_contract.write_properties(artifact, spec.task, spec.num_classes, spec.label_vocabulary)
  info = task_lib.resolve(task_lib.read_properties(artifact), {})
  ours = quality.evaluate(path_utils.serving_model_path(artifact.uri), root, "eval", "y",
                          64, info)
  theirs = _run_stock_evaluator(tmp_path, examples, artifact, "y", task="multiclass")
  assert theirs["example_count"] == ours.examples == 300
  assert 0.0 < ours.accuracy < 1.0
  assert ours.accuracy == pytest.approx(theirs["sparse_categorical_accuracy"], abs=1e-4)


def _tfma_blesses_against(tmp_path, examples, model, base, label_key, thresholds):
  """The stock Evaluator (tfma_stage, our change thresholds as TFMA's) on ``model``
  against ``base``: (TFMA's validation_ok, the blessing's ``blessed``)."""
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  from tfx import types  # pylint: disable=g-import-not-at-top
  component = tfma_stage.stock_evaluator(
      types.Channel(type=standard_artifacts.Model),
      types.Channel(type=standard_artifacts.Examples), label_key,
      baseline_model=types.Channel(type=standard_artifacts.Model),
      change_thresholds=thresholds)
  evaluation = _output(tmp_path, standard_artifacts.ModelEvaluation, "evaluation")
  blessing = _output(tmp_path, standard_artifacts.ModelBlessing, "blessing")
  component.executor_spec.executor_class().Do(
      {specs.EXAMPLES_KEY: [examples], specs.MODEL_KEY: [model],
       specs.BASELINE_MODEL_KEY: [base]},
      {specs.EVALUATION_KEY: [evaluation], specs.BLESSING_KEY: [blessing]},
      dict(component.exec_properties))
  return (tfma.load_validation_result(evaluation.uri).validation_ok,
          blessing.get_int_custom_property("blessed"))


@pytest.mark.slow
def test_tfma_change_thresholds_make_our_blessing_decision(tmp_path):
  """Issue #50 item 3: the same two models, the same split and the same change
  thresholds (the default, eval_mse at most 1 % worse, and an absolute bound on MAE):
  TFMA's GenericChangeThreshold validation and baseline.compare agree, both ways."""
  from tfx_parallel.components.convergence_evaluator import baseline  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import executor  # pylint: disable=g-import-not-at-top
  x, y = testing.synthetic_data(400, [1.0, -2.0, 0.5, 3.0], 1.5, noise=0.5, seed=6)
  records = testing.serialize_examples(x, y, FEATURES, "y")
  examples = testing.write_examples(str(tmp_path / "examples"), {"eval": records},
                                    FEATURES, "y")
  near = testing.export_linear_model(str(tmp_path / "near"), [0.95, -2.0, 0.5, 2.9], 1.45,
                                     FEATURES)
  far = testing.export_linear_model(str(tmp_path / "far"), [0.7, -1.6, 0.5, 2.5], 1.2,
                                    FEATURES)
  thresholds = config_lib.ChangeThresholds(regression=config_lib.RegressionChange(
      eval_mae=config_lib.ChangeThreshold("lower_is_better", absolute=0.05)))

  def ours(candidate, base):
    q = [executor.quality_properties(quality.evaluate(
        path_utils.serving_model_path(m.uri), examples.uri, "eval", "y", 256), "eval")
         for m in (candidate, base)]
    return baseline.compare(q[0], q[1], "regression", thresholds, base.uri, "channel")

  worse, better = ours(far, near), ours(near, far)
  assert not worse["passed"] and better["passed"]
  assert _tfma_blesses_against(tmp_path / "worse", examples, far, near, "y",
                               thresholds) == (False, 0)
  assert _tfma_blesses_against(tmp_path / "better", examples, near, far, "y",
                               thresholds) == (True, 1)
