"""The evaluator's report and the KFP UI's metric forms (components/convergence_evaluator/
report.py), and the compiled package's UI outputs (kubeflow/ui_outputs.py)."""
import json

import pytest

from tfx_parallel.components.convergence_evaluator import report
from tfx_parallel.kubeflow import ui_outputs

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


def _spec():
  return {"root": {"dag": {"tasks": {"Eval": {"componentRef": {"name": "comp-eval"}}}}},
          "components": {"comp-eval": {"executorLabel": "exec-eval", "outputDefinitions": {
              "artifacts": {"metrics": {"artifactType": {"instanceSchema": "title: x.Y\n"}}}}}},
          "deploymentSpec": {"executors": {"exec-eval": {"container": {
              "args": ["--executor_class_path", "C", "--placement", "{}", "--beam"]}}}}}


def test_declare_adds_the_system_outputs_and_the_flag():
  spec = _spec()
  ui_outputs.declare(spec, "Eval", "metrics")
  outputs = spec["components"]["comp-eval"]["outputDefinitions"]["artifacts"]
  assert {k: v["artifactType"]["schemaTitle"] for k, v in outputs.items() if k != "metrics"} == {
      "ui_metrics": "system.Metrics", "ui_classification_metrics": "system.ClassificationMetrics",
      "ui_report": "system.HTML"}
  assert spec["deploymentSpec"]["executors"]["exec-eval"]["container"]["args"] == [
      "--executor_class_path", "C", "--ui_outputs", "metrics", "--placement", "{}", "--beam"]
  with pytest.raises(ui_outputs.UiOutputError, match="has no output 'blessing'"):
    ui_outputs.declare(_spec(), "Eval", "blessing")


def test_make_writes_the_report_file_and_the_metadata(tmp_path):
  source = tmp_path / "metrics"
  source.mkdir()
  (source / report.REPORT_FILE_NAME).write_text("<html>r</html>")
  forms = {"metrics": {"eval_accuracy": 0.9},
           "classification": report.classification(["0", "1"], [[1, 0], [0, 1]])}
  (source / report.KFP_METRICS_FILE_NAME).write_text(json.dumps(forms))
  uris = {k: f"minio://b/run/Eval/s/{k}" for k in ui_outputs.OUTPUTS}
  paths = {k: str(tmp_path / "out" / k) for k in ui_outputs.OUTPUTS}
  made = ui_outputs.make(str(source), paths, uris)
  assert made["ui_metrics"]["artifacts"][0] == {"uri": uris["ui_metrics"],
                                                "metadata": {"eval_accuracy": 0.9}}
  assert made["ui_classification_metrics"]["artifacts"][0]["metadata"] == forms["classification"]
  assert made["ui_report"]["artifacts"][0] == {"uri": uris["ui_report"]}
  assert open(paths["ui_report"]).read() == "<html>r</html>"  # The URI is the file itself.
  (source / report.REPORT_FILE_NAME).unlink()
  with pytest.raises(ui_outputs.UiOutputError, match="wrote no .*report.html.*rebuild the image"):
    ui_outputs.make(str(source), paths, uris)
