"""The end-of-run summary: the layout as it really was, readable numbers, few lines."""
import json

import pytest

from tfx_parallel.components.common import keys
from tfx_parallel.pipeline import summary


@pytest.mark.parametrize("args,text", [
    (("single", "", 1), "single"),
    (("single", "1x1", 1), "single"),
    (("mirrored", "1x1", 2), "mirrored x2"),  # the trainer's 1x1 is not a mesh
    (("multi_worker", [1, 1], 4), "multi_worker x4"),
    (("mesh", "2x2", 2), "mesh 2x2 (2 replicas x 2-way model)"),
    (("mesh", [1, 4], 1), "mesh 1x4 (1 replica x 4-way model)"),
    ((None, None, None), "?")])
def test_describe_layout(args, text):
  assert summary.describe_layout(*args) == text


def test_describe_layout_counts_devices():
  assert summary.describe_layout("mesh", "2x2", 2, 4) == \
      "mesh 2x2 (2 replicas x 2-way model, 4 devices)"


def _found(tmp_path, **metrics):
  history = tmp_path / "history"
  history.mkdir()
  (history / keys.HISTORY_FILE).write_text(json.dumps({
      "steps_run": 620, "weights": {"kernel": [[0.99991234], [1.99923456]],
                                    "bias": [2.99951234]}}))
  m = {"layout": "mesh", "mesh_shape": "2x2", "replicas": 2, "num_devices": 4,
       "last_step": 620, "final_loss": 0.00010178999145864509,
       "examples_per_sec": 4582.613430998621, "convergence_state": "converged",
       "eval_mse": 0.000103689, "eval_r2": 0.99998, "eval_examples": 2005,
       "eval_split": "eval", "weight_error": 0.0008335113525390625,
       "bias_error": 0.00048, "uri": "/r/pipelines/p/ConvergenceEvaluator/metrics/3",
       "blessing_message": ""}
  m.update(metrics)
  return {"ConvergenceMetrics": m, "TrainingHistory": {"uri": str(history)},
          "Examples": {keys.TRUE_WEIGHTS: "[1.0, 2.0]", keys.TRUE_BIAS: 3.0},
          "Model": {"uri": "/r/pipelines/p/DistributedTrainer/model/2"},
          "ModelBlessing": {"blessed": 1 if not metrics.get("blessing_message") else 0},
          "_run": {"name": "2026-12-03T07:13:11.123456"}}


def test_summary_lines_with_readable_numbers(tmp_path):
  text = summary.format_summary(_found(tmp_path), "runs/logs/p.log",
                                relative=lambda p: p.replace("/r/", "runs/"))
  assert text.splitlines() == [
      "layout     mesh 2x2 (2 replicas x 2-way model, 4 devices)",
      "training   620 steps, final loss 0.0001018, 4,583 ex/s, state converged",
      "eval       MSE 0.0001037, R2 1 on 2,005 eval rows",
      "learned    w=[0.99991, 1.9992] b=2.9995 (true w=[1.0, 2.0] b=3.0: |w err|max "
      "0.0008335, |b err| 0.00048)",
      "blessed    True",
      "model      runs/pipelines/p/DistributedTrainer/model/2",
      "metrics    runs/pipelines/p/ConvergenceEvaluator/metrics/3  (metrics.json, "
      "curves.json, loss.png)",
      "report     runs/pipelines/p/ConvergenceEvaluator/metrics/3/report.html  (open in a "
      "browser)",
      "log        runs/logs/p.log"]


def test_not_blessed_says_why_and_a_classifier_shows_accuracy(tmp_path):
  found = _found(tmp_path, blessing_message="eval_accuracy 0.61 < binary.min_accuracy 0.8",
                 eval_mse=None, eval_accuracy=0.6123456, eval_auc=0.7000001,
                 eval_log_loss=0.6543219)
  lines = summary.format_summary(found).splitlines()
  assert "blessed    False (eval_accuracy 0.61 < binary.min_accuracy 0.8)" in lines
  assert "eval       accuracy 0.6123, AUC 0.7, log loss 0.6543 on 2,005 eval rows" in lines
  assert not any(line.startswith("log ") for line in lines)


def test_not_blessed_names_the_setting_as_the_command_takes_it(tmp_path):
  # #47 review: the console's warning said "add --set evaluator.min_eval_examples=95",
  # the summary below it "set evaluator.min_eval_examples=95", which run does not take.
  from tfx_parallel.pipeline import cli, settings  # pylint: disable=g-import-not-at-top
  reason = ("only 95 eval example(s), fewer than min_eval_examples 100: too few to tell "
            "a good model from a lucky one. Use more data or a larger eval split, or "
            "accept it: set evaluator.min_eval_examples=95")
  found = _found(tmp_path, blessing_message=reason)
  lines = summary.format_summary(found, suggest=cli.RUN_FORM.message).splitlines()
  [line] = [l for l in lines if l.startswith("blessed")]
  assert line.endswith("accept it: add --set evaluator.min_eval_examples=95)"), line
  python = summary.format_summary(found, suggest=settings.PYTHON.message)
  assert "EvaluatorConfig(min_eval_examples=95)" in python, python
  assert f"blessed    False ({reason})" in summary.format_summary(found).splitlines()
