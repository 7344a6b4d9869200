"""Review of issue #50 claim 3 (baseline comparison): failing tests, each a finding.

Run: nice -n 5 .venv/bin/python -m pytest -q tests/review_baseline.py"""
import json

from tfx_parallel.components.convergence_evaluator import baseline, executor
from tfx_parallel.components.convergence_evaluator.config import ChangeThresholds


def test_an_infinite_candidate_metric_is_written_not_a_crash(tmp_path):
  """A diverged candidate whose eval_mse is inf: recorded without a baseline, but with
  one write_comparison raises 'Out of range float values are not JSON compliant'."""
  comparison = baseline.compare({"eval_mse": float("inf")}, {"eval_mse": 1.0},
                                "regression", ChangeThresholds(), "/base", "channel")
  assert not comparison["passed"]
  executor.write_comparison(str(tmp_path), comparison)
  with open(tmp_path / baseline.FILE_NAME) as f:
    assert json.load(f)["passed"] is False


def test_a_nan_candidate_is_not_blamed_on_a_zero_baseline():
  comparison = baseline.compare({"eval_mse": float("nan")}, {"eval_mse": 1.0},
                                "regression", ChangeThresholds(), "/base", "channel")
  assert "baseline is 0" not in comparison["reason"]


def test_a_baseline_with_another_label_vocabulary_is_scored_with_its_own(tmp_path):
  """Continuous training: a new class ("eel") appears, so the candidate's sorted label
  vocabulary is [cat, dog, eel] and the blessed baseline's [bird, cat, dog]. The
  baseline is the very same cat/dog classifier, yet it is scored with the candidate's
  class ids (executor.compare_with_baseline passes the candidate's TaskInfo): 0.04."""
  import os  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import artifacts, config_util, keys  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import properties as P  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig  # pylint: disable=g-import-not-at-top
  import evaluator_fixtures as testing  # pylint: disable=g-import-not-at-top
  features, cat_dog = ["x0", "x1"], np.array([[2.0, -2.0], [-1.0, 1.0]])
  x, ids = testing.classification_data(300, cat_dog, [0.0, 0.0], noise=0.3)
  names = np.array(["cat", "dog"])[ids]
  train = names[:150].copy()
  train[:5] = "eel"
  examples = testing.write_examples(str(tmp_path / "ex"), {
      "train": testing.serialize_examples(x[:150], train, features, "y", label_type="bytes"),
      "eval": testing.serialize_examples(x[150:], names[150:], features, "y",
                                         label_type="bytes")}, features, "y")
  never = np.zeros((2, 1))
  candidate = testing.export_classifier_model(
      str(tmp_path / "cand"), "multiclass", np.concatenate([cat_dog, never], 1),
      [0.0, 0.0, -50.0], features, ["cat", "dog", "eel"])
  base = testing.export_classifier_model(
      str(tmp_path / "base"), "multiclass", np.concatenate([never, cat_dog], 1),
      [-50.0, 0.0, 0.0], features, ["bird", "cat", "dog"])
  history = testing.write_history(
      str(tmp_path / "h"), testing.linear_history(2.0 * np.exp(-np.arange(1, 31)) + 0.3,
                                                  steps_per_epoch=100),
      task="multiclass", num_classes=3, label_vocabulary=["cat", "dog", "eel"])
  metrics = artifacts.ConvergenceMetrics()
  metrics.uri = str(tmp_path / "m")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / "b")
  os.makedirs(blessing.uri)
  executor.Executor().Do(
      {keys.MODEL_KEY: [candidate], keys.EXAMPLES_KEY: [examples],
       keys.HISTORY_KEY: [history], keys.BASELINE_MODEL_KEY: [base]},
      {keys.METRICS_KEY: [metrics], keys.BLESSING_KEY: [blessing]},
      {keys.CONFIG_KEY: config_util.to_json(EvaluatorConfig())})
  props = P.read_properties(metrics.mlmd_artifact.custom_properties)
  assert props["baseline_eval_accuracy"] == props["eval_accuracy"]


def test_a_python_change_threshold_on_mse_does_not_flip_its_direction():
  """ChangeThreshold's default direction is higher_is_better, so the natural Python form
  (or config_util.from_dict of {"eval_mse": {"relative": 0.05}}) judges MSE upside
  down: a 50 % worse candidate passes. TFMA has no default: an unset direction raises
  (tensorflow_model_analysis 0.47.1 evaluators/metrics_validator.py:95-98)."""
  from tfx_parallel.components.common import config_util  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import config as c  # pylint: disable=g-import-not-at-top
  thresholds = c.ChangeThresholds(regression=c.RegressionChange(
      eval_mse=c.ChangeThreshold(relative=0.05)))
  try:
    c.EvaluatorConfig(change_thresholds=thresholds).validate()
  except config_util.ConfigError:
    return  # Refused: fine.
  worse = baseline.compare({"eval_mse": 1.5}, {"eval_mse": 1.0}, "regression", thresholds,
                           "/base", "channel")
  assert not worse["passed"]
