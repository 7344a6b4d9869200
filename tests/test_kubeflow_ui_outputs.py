"""The evaluator's results in the KFP UI (kubeflow/ui_outputs.py): the compiled outputs,
what the entry point makes, and what the launcher records in ML Metadata, read back the
way the frontend reads it (kubeflow/pipelines frontend/src/components/viewers/
MetricsVisualizations.tsx and ROCCurveHelper.tsx, identical from 2.4.1, which Kubeflow
v1.10.0 ships, through 2.15.0, which v1.11.0 ships, to 2.16.0)."""
import json
import math

import pytest
from google.protobuf import json_format

from kubeflow_launcher import KfpMetadata
from tfx_parallel.components.convergence_evaluator import report
from tfx_parallel.kubeflow import ui_outputs


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


def _struct(artifact, name, wrapper):
  """customProperties.get(name)?.getStructValue()?.toJavaScript()[wrapper], or None."""
  value = artifact.custom_properties.get(name)
  if value is None or value.WhichOneof("value") != "struct_value":
    return None
  return json_format.MessageToDict(value.struct_value).get(wrapper)


def frontend_view(artifact, type_name):
  """What the Visualizations tab draws of one ML Metadata artifact; raises AssertionError
  where the frontend would show an error banner or skip it."""
  props = artifact.custom_properties
  assert props["display_name"].string_value, "no display_name: not shown (tsx 238-333)"
  if type_name == "system.Metrics":  # ScalarMetricsSection, tsx 824-846.
    return {k: json_format.MessageToDict(v) for k, v in props.items() if k != "display_name"}
  assert type_name == "system.ClassificationMetrics", type_name
  matrix = _struct(artifact, "confusionMatrix", "struct")  # tsx 746-754.
  roc = _struct(artifact, "confidenceMetrics", "list")  # tsx 601-651.
  assert matrix is not None or roc is not None, "neither confusionMatrix nor confidenceMetrics"
  if matrix is not None:  # validateConfusionMatrix, tsx 777-803.
    labels = [spec["displayName"] for spec in matrix["annotationSpecs"]]
    assert all(isinstance(x, str) for x in labels)
    assert len(matrix["rows"]) == len(labels)
    assert all(len(r["row"]) == len(labels) and all(isinstance(v, (int, float)) for v in r["row"])
               for r in matrix["rows"])
  for point in roc or []:  # ConfidenceMetricRunType, ROCCurveHelper.tsx 11-15.
    assert set(point) >= {"confidenceThreshold", "falsePositiveRate", "recall"}, point
    assert all(isinstance(point[k], (int, float)) and math.isfinite(point[k])
               for k in ("confidenceThreshold", "falsePositiveRate", "recall"))
  return {"matrix": matrix, "roc": roc}


def test_recorded_artifacts_carry_what_the_frontend_reads(tmp_path):
  """make() -> the executor output -> the stand-in launcher's RecordArtifact."""
  source = tmp_path / "metrics"
  source.mkdir()
  (source / report.REPORT_FILE_NAME).write_text("<!DOCTYPE html><html></html>")
  roc = report.roc_points([0, 0, 1, 1], [0.1, 0.6, 0.4, 0.9], points=5)
  forms = {"metrics": report.kfp_metrics({"eval_accuracy": 0.75, "blessed": 1}),
           "classification": report.classification(["no", "yes"], [[1, 1], [1, 1]], roc)}
  (source / report.KFP_METRICS_FILE_NAME).write_text(json.dumps(forms))
  uris = {k: f"minio://b/run/Eval/s/{k}" for k in ui_outputs.OUTPUTS}
  made = ui_outputs.make(str(source), {k: str(tmp_path / k) for k in uris}, uris)
  store = KfpMetadata(str(tmp_path / "mlmd.sqlite"))
  views = {}
  for key, title in ui_outputs.OUTPUTS.items():
    entry = made[key]["artifacts"][0]
    artifact_id = store.record_artifact(key, {"schemaTitle": title}, entry["uri"],
                                        entry.get("metadata") or {})
    [artifact] = store.store.get_artifacts_by_id([artifact_id])
    [artifact_type] = store.store.get_artifact_types_by_id([artifact.type_id])
    assert artifact_type.name == title
    assert artifact.custom_properties["display_name"].string_value == key
    if title != "system.HTML":
      views[key] = frontend_view(artifact, title)
  assert views["ui_metrics"]["eval_accuracy"] == {"doubleValue": 0.75}
  matrix = views["ui_classification_metrics"]["matrix"]
  assert matrix == {"annotationSpecs": [{"displayName": "no"}, {"displayName": "yes"}],
                    "rows": [{"row": [1, 1]}, {"row": [1, 1]}]}
  assert [p["recall"] for p in views["ui_classification_metrics"]["roc"]] == [1, 1, 0.5, 0.5, 0]


