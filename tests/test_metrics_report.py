"""`tfx-parallel metrics`: ML Metadata read-back, table, JSON and overlay plot.

The slow test runs real LocalDagRunner pipelines (Importer nodes feeding
ConvergenceEvaluator) into a SQLite store; the fast tests write the same graph shape
(pipeline / pipeline_run contexts, execution, output event, attribution) with the plain
ml_metadata API.
"""
import json
import math
import os
import re

import pytest

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.pipeline import metrics_report


def test_type_name_matches_the_artifact_class():
  assert metrics_report.METRICS_TYPE == artifacts.ConvergenceMetrics.TYPE_NAME


# --- Fast: a store written with the plain ml_metadata API. -----------------------------

def _store(home):
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = os.path.join(home, "metadata.sqlite")
  config.sqlite.connection_mode = (
      metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE)
  return metadata_store.MetadataStore(config)


def _add_run(store, pipeline, run, props, uri="/nowhere", examples=None):
  """One run: contexts, an execution, its ConvergenceMetrics output; returns artifact id.
  ``examples``: (source, label_key) of an Examples input of the execution."""
  ctx_types = {name: store.put_context_type(metadata_store_pb2.ContextType(name=name))
               for name in ("pipeline", "pipeline_run")}
  art_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(name="ConvergenceMetrics"))
  exe_type = store.put_execution_type(metadata_store_pb2.ExecutionType(name="Evaluator"))
  contexts = []
  for type_name, name in (("pipeline", pipeline), ("pipeline_run", run)):
    found = store.get_context_by_type_and_name(type_name, name)
    contexts.append(found or metadata_store_pb2.Context(type_id=ctx_types[type_name], name=name))
  artifact = metadata_store_pb2.Artifact(type_id=art_type, uri=uri)
  for name, value in props.items():
    if isinstance(value, str):
      artifact.custom_properties[name].string_value = value
    elif isinstance(value, int):
      artifact.custom_properties[name].int_value = value
    else:
      artifact.custom_properties[name].double_value = value
  execution = metadata_store_pb2.Execution(type_id=exe_type)
  event = metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)
  pairs = [(artifact, event)]
  if examples is not None:
    ex_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(name="Examples"))
    source = metadata_store_pb2.Artifact(type_id=ex_type, uri="/examples")
    source.custom_properties["source"].string_value = examples[0]
    source.custom_properties["label_key"].string_value = examples[1]
    pairs.append((source, metadata_store_pb2.Event(type=metadata_store_pb2.Event.INPUT)))
  _, [artifact_id, *_], _ = store.put_execution(
      execution, pairs, contexts, reuse_context_if_already_exist=True)
  return artifact_id


def test_find_runs_filter_last_table_and_json(tmp_path, capsys):
  store = _store(str(tmp_path))
  base = {P.LAYOUT: "mesh", P.MESH_SHAPE: "2x2", P.REPLICAS: 2, P.STEPS_TO_TARGET: 120,
          P.EXAMPLES_PER_SEC: 12345.6, P.BLESSED: 1, P.CONVERGENCE_STATE: "converged",
          P.PARAM_COUNT: 16385, P.STATE_BYTES_PER_DEVICE: 131096}
  _add_run(store, "alpha", "run-1", dict(base, **{P.FINAL_LOSS: 0.01, P.EVAL_MSE: 0.02}),
           examples=("/data/diamonds.csv", "price"))
  _add_run(store, "beta", "run-2", dict(base, **{P.LAYOUT: "single", P.MESH_SHAPE: "",
                                                 P.REPLICAS: 1,
                                                 P.FINAL_LOSS: "nan", P.EVAL_MSE: 3.0,
                                                 P.BLESSED: 0, P.STEPS_TO_TARGET: -1}))
  _add_run(store, "alpha", "run-3", dict(base, **{P.FINAL_LOSS: 0.005, P.EVAL_MSE: 0.01}))

  rows = metrics_report.find_runs(store)
  assert [r.run for r in rows] == ["run-1", "run-2", "run-3"]
  assert math.isnan(rows[1].properties[P.FINAL_LOSS])
  assert [r.run for r in metrics_report.find_runs(store, "alpha")] == ["run-1", "run-3"]
  assert [r.run for r in metrics_report.find_runs(store, last=2)] == ["run-2", "run-3"]

  table = metrics_report.format_table(rows)
  header, first, second = table.splitlines()[:3]
  assert header.split() == ["pipeline", "run", "data", "label", "task", "layout", "replicas",
                            "state", "steps", "to",
                            "target", "eval", "MSE", "R2", "trivial", "loss", "examples/s",
                            "params", "state", "B/device", "blessed", "why", "not", "blessed"]
  # The data file (its name), the label and the task tell runs apart (issue 47).
  assert first.split() == ["alpha", "run-1", "diamonds.csv", "price", "-", "mesh", "2x2",
                           "2", "converged", "120",
                           "0.02", "-", "-", "12,346", "16,385", "131,096", "1", "-"]
  assert second.split() == ["beta", "run-2", "-", "-", "-", "single", "1", "converged", "-1",
                            "3", "-", "-", "12,346", "16,385", "131,096", "0", "-"]
  # Every column is explained under the table, "steps to target" -1 included.
  legend = table.split("\nColumns:\n", 1)[1].splitlines()
  assert [line.strip().split("  ")[0] for line in legend] == [
      "pipeline", "run", "data", "label", "task", "layout", "replicas", "state",
      "steps to target", "eval MSE", "R2", "trivial loss", "examples/s", "params",
      "state B/device", "blessed", "why not blessed"]
  assert "-1: never reached" in [l for l in legend if "steps to target" in l][0]

  assert metrics_report.main(["--home", str(tmp_path), "--json", "--pipeline-name", "beta"]) == 0
  [run] = json.loads(capsys.readouterr().out)
  assert run["pipeline"] == "beta" and run["properties"][P.FINAL_LOSS] is None
  assert metrics_report.main(["--home", str(tmp_path), "--json", "--pipeline-name", "alpha"]) == 0
  assert {(r["data"], r["label"]) for r in json.loads(capsys.readouterr().out)} == {
      ("/data/diamonds.csv", "price"), ("", "")}


def test_one_row_per_run_with_the_layout_as_it_really_was(tmp_path):
  store = _store(str(tmp_path))
  common = {P.EVAL_MSE: 19.6438815810449, P.EXAMPLES_PER_SEC: 4582.613430998621,
            P.CONVERGENCE_STATE: "converged", P.BLESSED: 1}
  _add_run(store, "p", "run-1", dict(common, **{P.LAYOUT: "single", P.MESH_SHAPE: "1x1",
                                                P.REPLICAS: 1}))
  # Evaluators before issue 16 recorded the trainer's 1x1 "mesh" of a mirrored run.
  _add_run(store, "p", "run-2", dict(common, **{P.LAYOUT: "mirrored", P.MESH_SHAPE: "1x1",
                                                P.REPLICAS: 2}))
  mesh_id = _add_run(store, "p", "run-3", dict(common, **{P.LAYOUT: "mesh",
                                                          P.MESH_SHAPE: "2x2", P.REPLICAS: 2}))
  # run-4 is a cached rerun of run-3: TFX attributes the same artifact to its context.
  run_type = store.get_context_type("pipeline_run").id
  [run_4] = store.put_contexts([metadata_store_pb2.Context(type_id=run_type, name="run-4")])
  store.put_attributions_and_associations(
      [metadata_store_pb2.Attribution(artifact_id=mesh_id, context_id=run_4)], [])

  rows = metrics_report.find_runs(store)
  assert [(r.run, r.cached) for r in rows] == [("run-1", False), ("run-2", False),
                                               ("run-3", False), ("run-4", True)]
  table = metrics_report.format_table(rows).split("\n\nColumns:")[0].splitlines()
  assert len(table) == 4, table  # header + three runs; run-4 trained nothing
  assert [re.split(r"\s{2,}", line)[1:7] for line in table[1:]] == [
      ["run-1", "-", "-", "-", "single", "1"],
      ["run-2", "-", "-", "-", "mirrored x2", "2"],
      ["run-3 (+1 cached)", "-", "-", "-", "mesh 2x2", "2"]]
  assert "mesh 2x2" in table[3] and "1x1" not in "\n".join(table)
  assert "19.64 " in table[1] and "4,583 " in table[1]
  assert "19.643" not in "\n".join(table) and "4582" not in "\n".join(table)
  unique = [row for row, _ in metrics_report.one_row_per_run(rows)]
  assert metrics_report.curve_labels(unique) == ["p single", "p mirrored x2", "p mesh 2x2"]
  assert metrics_report.curve_labels(rows[:1] * 2) == ["p single", "p single #2"]


def test_regression_and_classification_runs_each_show_their_tasks_columns(tmp_path, capsys):
  store = _store(str(tmp_path))
  _add_run(store, "fares", "run-1", {
      P.TASK: "regression", P.LAYOUT: "single", P.REPLICAS: 1, P.CONVERGENCE_STATE: "converged",
      P.STEPS_TO_TARGET: -1, P.EVAL_MSE: 12.5, P.EVAL_R2: 0.87, P.TRIVIAL_LOSS: 96.2,
      P.BLESSED: 1, P.BLESSING_MESSAGE: ""})
  _add_run(store, "tips", "run-2", {
      P.TASK: "binary", P.LAYOUT: "mesh", P.MESH_SHAPE: "1x2", P.REPLICAS: 1,
      P.CONVERGENCE_STATE: "diverged", P.EVAL_ACCURACY: 0.739, P.EVAL_AUC: 0.487,
      P.EVAL_LOG_LOSS: 818.0, P.TRIVIAL_LOSS: 0.5606, P.BLESSED: 0,
      P.BLESSING_MESSAGE: "training diverged"})
  assert metrics_report.main(["--home", str(tmp_path)]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == "regression runs:" and lines[4] == "classification runs:", lines
  assert lines[1].split()[2:12] == ["data", "label", "task", "layout", "replicas", "state",
                                    "steps", "to", "target", "eval"]
  assert "R2" in lines[1] and "accuracy" not in lines[1] and "log loss" not in lines[1]
  assert lines[2].split()[4:12] == ["regression", "single", "1", "converged", "-1", "12.5",
                                    "0.87", "96.2"]
  assert lines[5].split()[5:12] == ["layout", "replicas", "state", "accuracy", "AUC", "log",
                                    "loss"]
  assert "MSE" not in lines[5] and "R2" not in lines[5]
  assert lines[6].split()[4:7] == ["binary", "mesh", "1x2"]
  assert lines[6].split()[8:12] == ["diverged", "0.739", "0.487", "818"]
  assert lines[6].split()[-3:] == ["0", "training", "diverged"]


# --- A store written the way Kubeflow Pipelines v2 writes the cluster's. ----------------

KFP_TITLE = f"title: {metrics_report.KFP_METRICS_TYPE}\ntype: object\n"
KFP_SCALARS = {P.LAYOUT: "mirrored", P.MESH_SHAPE: "", P.REPLICAS: 2, P.STEPS_TO_TARGET: 0,
               P.EXAMPLES_PER_SEC: 12345.678901, P.BLESSED: 1, P.BLESSING_MESSAGE: "",
               P.CONVERGENCE_STATE: "converged", P.TASK: "regression", P.NUM_CLASSES: 1,
               P.FINAL_LOSS: 3.2e-9, P.EVAL_MSE: 0.0123456789, P.EVAL_R2: 0.0,
               P.TRIVIAL_LOSS: 1.5, P.EVAL_LOSS_CHANGE: math.nan, P.STOPPED_EARLY: False,
               P.PARAM_COUNT: 16385}


def test_kfp_type_name_is_the_compiled_schema_title():
  """kubeflow/artifact_types.retitle writes the class's import path as the title."""
  cls = artifacts.ConvergenceMetrics
  assert metrics_report.KFP_METRICS_TYPE == f"{cls.__module__}.{cls.__qualname__}"


def _kfp_store(path):
  """Two KFP runs of one pipeline, the second served from the cache, recorded by the
  launcher stand-in's KfpMetadata (client.go / converter.go) from what TFX's entry point
  writes for a ConvergenceMetrics artifact set by our own properties.set_properties."""
  from kubeflow_launcher import KfpMetadata  # pylint: disable=g-import-not-at-top
  from test_kubeflow_records import record_through_kfp  # pylint: disable=g-import-not-at-top
  store = KfpMetadata(path)
  root = "minio://mlpipeline/v2/artifacts"
  contexts = store.pipeline("tfx-parallel", "9b1d-run-1", root)
  metrics = artifacts.ConvergenceMetrics()
  metrics.uri = f"{root}/tfx-parallel/9b1d-run-1/ConvergenceEvaluator/s/metrics"
  P.set_properties(metrics, KFP_SCALARS)
  metrics_id = record_through_kfp(store, "metrics", metrics, metrics.uri, KFP_TITLE)
  store.publish_execution(store.create_execution("ConvergenceEvaluator", contexts),
                          contexts, {"metrics": metrics_id})
  cached = store.pipeline("tfx-parallel", "9b1d-run-2", root)
  store.publish_execution(store.create_execution("ConvergenceEvaluator", cached),
                          cached, {"metrics": metrics_id}, cached=True)
  return store


def test_metrics_read_a_store_written_the_way_kfp_writes_it(tmp_path, capsys):
  store = _kfp_store(str(tmp_path / "metadata.sqlite"))
  [stored] = store.store.get_artifacts_by_type(metrics_report.KFP_METRICS_TYPE)
  assert stored.custom_properties[P.BLESSED].WhichOneof("value") == "double_value"
  assert stored.custom_properties[P.FINAL_LOSS].double_value == 0.0  # 6 decimals.
  assert set(stored.custom_properties[P.PRECISE_VALUES].struct_value.fields) == {"struct"}

  rows = metrics_report.find_runs(store.store)
  assert [(r.pipeline, r.run, r.cached) for r in rows] == [
      ("tfx-parallel", "9b1d-run-1", False), ("tfx-parallel", "9b1d-run-2", True)]
  properties = rows[0].properties
  expected = {k: (int(v) if isinstance(v, bool) else v) for k, v in KFP_SCALARS.items()}
  assert math.isnan(properties[P.EVAL_LOSS_CHANGE])
  del expected[P.EVAL_LOSS_CHANGE]
  assert {k: properties[k] for k in expected} == expected
  assert all(type(properties[k]) is type(v) for k, v in expected.items()), properties

  assert metrics_report.main(["--home", str(tmp_path)]) == 0
  table = capsys.readouterr().out.splitlines()
  assert table[1].split()[:12] == ["tfx-parallel", "9b1d-run-1", "(+1", "cached)", "-", "-",
                                   "regression", "mirrored", "x2", "2", "converged", "0"], table
  assert "12,346" in table[1] and " 1 " in table[1] and "1.0" not in table[1]


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "results.md")
RECIPE_MARKER = "<!-- ML Metadata recipe: run by tests/test_metrics_report.py -->"


def _readme_recipe():
  import re  # pylint: disable=g-import-not-at-top
  with open(README, encoding="utf-8") as f:
    text = f.read()
  assert RECIPE_MARKER in text, f"docs/results.md lost its marker {RECIPE_MARKER!r}"
  match = re.match(r"\s*```python\n(.*?)\n```", text.split(RECIPE_MARKER, 1)[1], re.S)
  assert match, "no ```python block right after the marker"
  return match.group(1)


@pytest.mark.parametrize("written_by", ["local", "kfp"])
def test_the_readme_recipe_reads_local_and_kfp_stores(tmp_path, monkeypatch, capsys,
                                                      written_by):
  """The docs (results.md) plain-ml_metadata recipe, run as written from a directory holding
  runs/metadata.sqlite: a local store (TFX's type names, typed values) and one written
  as KFP writes it."""
  path = tmp_path / "runs" / "metadata.sqlite"
  path.parent.mkdir()
  if written_by == "kfp":
    _kfp_store(str(path))
  else:
    local = artifacts.ConvergenceMetrics()
    local.uri = "/nowhere"
    P.set_properties(local, KFP_SCALARS)
    store = _store(str(path.parent))
    [stored] = store.get_artifacts_by_id([_add_run(store, "tfx-parallel", "run-1", {})])
    for name, value in local.mlmd_artifact.custom_properties.items():  # As TFX sets them.
      stored.custom_properties[name].CopyFrom(value)
    store.put_artifacts([stored])
  monkeypatch.chdir(tmp_path)
  exec(compile(_readme_recipe(), "docs/results.md", "exec"), {})  # pylint: disable=exec-used
  lines = capsys.readouterr().out.splitlines()
  assert lines == ["regression mirrored 2 converged 0 3.2e-09 0.0123456789"], lines


def test_grpc_address_is_checked_and_an_unreachable_one_named(capsys):
  assert metrics_report.main(["--grpc", "localhost"]) == 2
  assert "--grpc must be HOST:PORT, e.g. localhost:8080. Received: 'localhost'" in \
      capsys.readouterr().err
  assert metrics_report.main(["--grpc", "127.0.0.1:9"]) == 1  # Nothing listens there.
  assert "Cannot reach ML Metadata at 127.0.0.1:9" in capsys.readouterr().err


def test_missing_store_and_empty_store(tmp_path, capsys):
  assert metrics_report.main(["--home", str(tmp_path / "nothing")]) == 1
  assert "No ML Metadata store" in capsys.readouterr().err
  _store(str(tmp_path))
  assert metrics_report.main(["--home", str(tmp_path)]) == 0
  assert "No runs" in capsys.readouterr().out


# --- Slow: real pipelines. ---------------------------------------------------------------

def _pipeline(name, root, inputs, history_uri):
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator  # pylint: disable=g-import-not-at-top
  examples, model = inputs
  examples_in = tfx.dsl.Importer(
      source_uri=examples.uri, artifact_type=standard_artifacts.Examples,
      properties={"split_names": examples.split_names},
      # Importer takes only int / str custom properties: true_bias goes in as a string
      # (the executor reads it with float()).
      custom_properties={k: (str(v) if isinstance(v, float) else v) for k, v in (
          (k, examples.get_custom_property(k))
          for k in examples.mlmd_artifact.custom_properties)},
  ).with_id("examples")
  model_in = tfx.dsl.Importer(source_uri=model.uri,
                              artifact_type=standard_artifacts.Model).with_id("model")
  history_in = tfx.dsl.Importer(source_uri=history_uri,
                                artifact_type=artifacts.TrainingHistory).with_id("history")
  evaluator = ConvergenceEvaluator(model=model_in.outputs["result"],
                                   examples=examples_in.outputs["result"],
                                   history=history_in.outputs["result"])
  return tfx.dsl.Pipeline(
      pipeline_name=name, pipeline_root=os.path.join(root, "pipelines", name),
      components=[examples_in, model_in, history_in, evaluator], enable_cache=True,
      metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
          os.path.join(root, "metadata.sqlite")))


@pytest.mark.slow
def test_local_dag_runner_runs_are_reported(tmp_path, capsys):
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  import evaluator_fixtures as testing  # pylint: disable=g-import-not-at-top
  features = ["x0", "x1"]
  x, y = testing.synthetic_data(128, [1.0, 2.0], 0.5, noise=0.1)  # >= min_eval_examples.
  examples = testing.write_examples(
      str(tmp_path / "data"), {"eval": testing.serialize_examples(x, y, features, "y")},
      features, "y", [1.0, 2.0], 0.5)
  model = testing.export_linear_model(str(tmp_path / "model"), [1.0, 2.0], 0.5, features)
  histories = {}
  for name, losses in (("good", [4.0, 1.0, 0.1, 0.02, 0.0101, 0.0100]),
                       ("bad", [4.0, 8.0, float("inf")])):
    histories[name] = str(tmp_path / f"history-{name}")
    testing.write_history(histories[name], testing.linear_history(
        losses, kernel=[1.0, 2.1], bias=0.5, steps_per_epoch=10))
  home = str(tmp_path / "home")
  runner = tfx.orchestration.LocalDagRunner()
  runner.run(_pipeline("alpha", home, (examples, model), histories["good"]))
  runner.run(_pipeline("beta", home, (examples, model), histories["bad"]))
  runner.run(_pipeline("alpha", home, (examples, model), histories["good"]))  # Cached.

  store = metrics_report.summary.open_store(os.path.join(home, "metadata.sqlite"))
  rows = metrics_report.find_runs(store)
  assert [(r.pipeline, r.cached) for r in rows] == [("alpha", False), ("beta", False),
                                                    ("alpha", True)]
  assert rows[0].metrics_id == rows[2].metrics_id and rows[0].run != rows[2].run
  good, bad = rows[0].properties, rows[1].properties
  assert good[P.CONVERGENCE_STATE] == P.CONVERGED and good[P.BLESSED] == 1
  assert 0.001 < good[P.EVAL_MSE] < 0.05  # Noise 0.1: MSE ~ 0.01.
  assert good[P.WEIGHT_ERROR] == pytest.approx(0.1, abs=1e-6)
  # 0.02 <= 0.01 x the label variance (about 5) at the 4th record.
  assert good[P.STEPS_TO_TARGET] == 40, good[P.TARGET_LOSS]
  assert bad[P.CONVERGENCE_STATE] == P.DIVERGED and bad[P.BLESSED] == 0
  assert bad[P.FINAL_LOSS] == math.inf
  # Full precision from metrics.json, where ML Metadata keeps 6 decimals.
  with open(os.path.join(rows[0].metrics_uri, "metrics.json")) as f:
    assert good[P.EVAL_R2] == json.load(f)[P.EVAL_R2]
  assert good[P.EVAL_R2] != round(good[P.EVAL_R2], 6)

  plot = str(tmp_path / "out" / "loss.png")
  assert metrics_report.main(["--home", home, "--pipeline-name", "alpha", "--last", "1",
                              "--plot", plot]) == 0
  out = capsys.readouterr()
  table = out.out.split("\n\nColumns:")[0]
  assert len(table.strip().splitlines()) == 3  # Header, one run, the cache footnote.
  assert "1 run(s)" in out.err
  with open(plot, "rb") as f:
    assert f.read(4) == b"\x89PNG"
