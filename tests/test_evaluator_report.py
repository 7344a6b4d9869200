"""The evaluator's report and the KFP UI's metric forms (components/convergence_evaluator/
report.py)."""
import json

import pytest

from tfx_parallel.components.convergence_evaluator import report

SCALARS = {"convergence_state": "converged", "convergence_reason": "eval loss stopped falling",
           "blessed": 1, "blessing_message": "", "eval_split": "eval", "eval_examples": 400,
           "eval_accuracy": 0.94, "eval_auc": 0.98, "eval_log_loss": 0.16,
           "eval_precision": -1.0, "final_loss": 0.055, "steps_to_target": -1,
           "layout": "mesh", "mesh_shape": "2x1", "replicas": 2}
CURVES = {"target_loss": 0.08, "trivial_loss": 0.69, "reason": "eval loss stopped falling",
          "records": {"step": [0, 10, 20], "loss": [0.7, 0.3, None]},
          "epochs": [{"epoch": 0, "step": 20, "train_loss": 0.2, "eval_loss": 0.25}]}
COMPARISON = {"baseline_uri": "minio://b/base/model", "baseline_source": "latest_blessed",
              "metrics": [{"name": "eval_log_loss", "candidate": 0.16, "baseline": 0.15,
                           "direction": "lower_is_better", "absolute_change": 0.01,
                           "relative_change": 0.0667, "absolute_threshold": None,
                           "relative_threshold": 0.05, "passed": False}],
              "passed": False, "reason": "eval_log_loss rose 6.67 %"}


def test_metrics_are_finite_numbers_without_the_not_available_ones():
  metrics = report.kfp_metrics(dict(SCALARS, eval_mse=float("nan")))
  assert metrics == {"eval_examples": 400.0, "eval_accuracy": 0.94, "eval_auc": 0.98,
                     "eval_log_loss": 0.16, "final_loss": 0.055, "blessed": 1.0}
  json.dumps(metrics, allow_nan=False)


def test_confusion_matrix_and_roc_have_the_sdks_form():
  """sdk-2.5.0 artifact_types.py:217-240 (annotationSpecs/rows/row) and :175-193."""
  roc = report.roc_points([0, 0, 1, 1], [0.1, 0.6, 0.4, 0.9], points=3)
  assert roc == {"thresholds": [0.0, 0.5, 1.0], "recall": [1.0, 0.5, 0.0],
                 "false_positive_rate": [1.0, 0.5, 0.0]}
  assert report.roc_points([1, 1], [0.2, 0.3]) == {}
  forms = report.classification(["no", "yes"], [[5, 1], [2, 7]], roc)
  assert forms["confusionMatrix"] == {
      "annotationSpecs": [{"displayName": "no"}, {"displayName": "yes"}],
      "rows": [{"row": [5, 1]}, {"row": [2, 7]}]}
  assert forms["confidenceMetrics"][1] == {"confidenceThreshold": 0.5, "recall": 0.5,
                                           "falsePositiveRate": 0.5}
  assert "confidenceMetrics" not in report.classification(["a", "b", "c"], [[1] * 3] * 3)
  with pytest.raises(ValueError, match=r"must be 2x2 over labels \['a', 'b'\]. Received"):
    report.confusion_matrix(["a", "b"], [[1, 2, 3], [4, 5, 6]])


def test_report_says_verdict_reason_layout_and_comparison_self_contained():
  page = report.report_html(SCALARS, CURVES, COMPARISON,
                            report.classification(["0", "1"], [[5, 1], [2, 7]]))
  for text in ("Blessed", "eval loss stopped falling", "2x1", "eval_log_loss rose 6.67 %",
               "+6.67 %", "FAIL", "minio://b/base/model", "<svg", "polyline",
               "Confusion matrix"):
    assert text in page, text
  assert "src=" not in page and "href=" not in page  # No fetch from the UI's iframe.
  first = report.report_html(dict(SCALARS, blessed=0), None, None)
  assert "No baseline: first run, judged alone." in first and "Not blessed" in first
  assert "No training history" in first and "<svg" not in first


def test_nan_scores_give_no_roc_and_the_report_says_why():
  """A diverged binary model: NaN sorts above every threshold, so a curve of NaN scores
  claimed recall 1 at threshold 1 while the confusion matrix counted them negative."""
  labels = [0, 1, 0, 1, 1, 0, 1, 0]
  assert report.roc_points(labels, [float("nan")] * 8) == {}
  assert report.roc_points(labels, [0.1, 0.9, 0.2, float("nan"), 0.8, 0.3, 0.7, 0.4]) == {}
  scalars = dict(SCALARS, eval_auc=float("nan"))
  assert "eval_auc" not in report.kfp_metrics(scalars)  # system.Metrics: numbers only.
  page = report.report_html(scalars, CURVES, None, report.classification(
      ["0", "1"], [[4, 0], [4, 0]]))
  assert "eval_auc is NaN" in page and "no ROC curve" in page
  assert "eval_auc is NaN" not in report.report_html(SCALARS, CURVES)
