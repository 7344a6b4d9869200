"""What a step downloads: one-split and reference outputs (kubeflow/split_outputs.py).

The KFP launcher downloads every input artifact in full (kubeflow/pipelines
``backend/src/v2/component/launcher_v2.go`` master:927-1004), so the compiled package
wires the ConvergenceEvaluator to ExampleGen's one-split output, and a trainer whose
replicas read the Examples themselves to a reference. The whole DAG through the
launcher stand-in is in test_kubeflow_launcher.py; byte counts in
benchmarks/bench_launcher_io.py.
"""
import copy
import json
import logging
import os

import pytest
from ml_metadata.proto import metadata_store_pb2 as mlmd

from kubeflow_util import REPO, compile_mapping
from script_util import load_script
from test_kubeflow_launcher import PIPELINE_ROOT, _small_config
from tfx_parallel.kubeflow import entrypoint, split_outputs

EXAMPLES_METADATA = {"split_names": json.dumps(["train", "eval"]), "label_key": "label",
                     "true_bias": "0.5"}


EXAMPLES_TYPE = {"instanceSchema": "title: tfx.Examples\ntype: object\n"}


def _validator():
  """kubeflow/validate_package.py (standalone; its wiring check needs only kfp's protos)."""
  return load_script("kubeflow/validate_package.py")


def _tasks(spec):
  return spec["root"]["dag"]["tasks"]


def _producer(spec, task="PartitionedExampleGen"):
  component = spec["components"][_tasks(spec)[task]["componentRef"]["name"]]
  return component, spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]


@pytest.fixture(scope="module")
def remote_trainer_package():
  data = _small_config()
  data["components"]["DistributedTrainer"] = dict(
      data["components"].get("DistributedTrainer") or {},
      env={"TFX_PARALLEL_TFJOB_IMAGE": "example.com/tfx-parallel:1"})  # Multi-node: remote paths.
  return compile_mapping(data).pipeline_spec


def test_the_evaluator_reads_the_one_split_output_and_the_trainer_all_of_examples():
  spec = compile_mapping(_small_config()).pipeline_spec
  wired = _tasks(spec)["ConvergenceEvaluator"]["inputs"]["artifacts"]["examples"]
  assert wired["taskOutputArtifact"] == {"producerTask": "PartitionedExampleGen",
                                         "outputArtifactKey": "eval_examples"}
  trainer = _tasks(spec)["DistributedTrainer"]["inputs"]["artifacts"]["examples"]
  assert trainer["taskOutputArtifact"]["outputArtifactKey"] == "examples"
  component, container = _producer(spec)
  outputs = component["outputDefinitions"]["artifacts"]
  assert outputs["eval_examples"] == outputs["examples"]  # Same type: tfx.Examples.
  at = container["args"].index("--split_output")
  assert container["args"][at:at + 3] == ["--split_output", "eval_examples=examples:eval",
                                          "--placement"]  # Beam args stay last.
  assert "--ref_output" not in container["args"]


def test_an_evaluator_on_another_split_gets_that_split():
  data = _small_config()
  data["pipeline"]["evaluator"] = dict(data["pipeline"].get("evaluator") or {}, split="train")
  spec = compile_mapping(data).pipeline_spec
  wired = _tasks(spec)["ConvergenceEvaluator"]["inputs"]["artifacts"]["examples"]
  assert wired["taskOutputArtifact"]["outputArtifactKey"] == "train_examples"
  args = _producer(spec)[1]["args"]
  assert args[args.index("--split_output") + 1] == "train_examples=examples:train"


def test_a_trainer_with_remote_paths_reads_a_reference(remote_trainer_package):
  spec = remote_trainer_package
  trainer = _tasks(spec)["DistributedTrainer"]["inputs"]["artifacts"]["examples"]
  assert trainer["taskOutputArtifact"] == {"producerTask": "PartitionedExampleGen",
                                           "outputArtifactKey": "examples_ref"}
  component, container = _producer(spec)
  assert set(component["outputDefinitions"]["artifacts"]) == {"examples", "eval_examples",
                                                              "examples_ref"}
  at = container["args"].index("--split_output")
  assert container["args"][at:at + 5] == ["--split_output", "eval_examples=examples:eval",
                                          "--ref_output", "examples_ref=examples",
                                          "--placement"]
  # Its own type, declared on both sides (and in the trainer's inputs spec argument);
  # the Examples keep theirs.
  validator = _validator()
  outputs = component["outputDefinitions"]["artifacts"]
  assert validator.type_title(outputs["examples_ref"]["artifactType"]) == \
      "tfx_parallel.ExamplesRef"
  assert validator.type_title(outputs["examples"]["artifactType"]) == "tfx.Examples"
  trainer_component = spec["components"][_tasks(spec)["DistributedTrainer"]["componentRef"][
      "name"]]
  assert validator.type_title(trainer_component["inputDefinitions"]["artifacts"]["examples"][
      "artifactType"]) == "tfx_parallel.ExamplesRef"
  args = spec["deploymentSpec"]["executors"][trainer_component["executorLabel"]][
      "container"]["args"]
  argued = json.loads(args[args.index("--json_serialized_inputs_spec_args") + 1])
  assert validator.type_title(argued["artifacts"]["examples"]["artifactType"]) == \
      "tfx_parallel.ExamplesRef"
  validator.wiring_types(spec)


def test_the_validator_refuses_a_reference_typed_apart_from_its_consumer(
    remote_trainer_package):
  """The rule the reference relies on: KFP's driver checks no types, the validator does."""
  validator = _validator()
  for where, retype in (
      ("output", lambda s: _producer(s)[0]["outputDefinitions"]["artifacts"]["examples_ref"]),
      ("input", lambda s: s["components"][_tasks(s)["DistributedTrainer"]["componentRef"][
          "name"]]["inputDefinitions"]["artifacts"]["examples"])):
    spec = copy.deepcopy(remote_trainer_package)
    retype(spec)["artifactType"] = dict(EXAMPLES_TYPE)  # As before: a tfx.Examples pointer.
    with pytest.raises(ValueError, match=r"task 'DistributedTrainer' input 'examples' is "
                                         r"declared '(tfx\.Examples|tfx_parallel\.ExamplesRef)'"
                                         r" but wired to PartitionedExampleGen\.examples_ref"):
      validator.wiring_types(spec)
  spec = copy.deepcopy(remote_trainer_package)
  trainer = spec["components"][_tasks(spec)["DistributedTrainer"]["componentRef"]["name"]]
  args = spec["deploymentSpec"]["executors"][trainer["executorLabel"]]["container"]["args"]
  at = args.index("--json_serialized_inputs_spec_args") + 1
  argued = json.loads(args[at])
  argued["artifacts"]["examples"]["artifactType"] = dict(EXAMPLES_TYPE)
  args[at] = json.dumps(argued)
  with pytest.raises(ValueError, match=r"--json_serialized_inputs_spec_args declares input "
                                       r"'examples' as 'tfx.Examples', its component as "
                                       r"'tfx_parallel.ExamplesRef'"):
    validator.wiring_types(spec)


def test_flags_are_parsed_or_named():
  assert split_outputs.parse_flags(["eval_examples=examples:eval"]) == {
      "eval_examples": ("examples", "eval")}
  with pytest.raises(split_outputs.SplitOutputError,
                     match=r"--split_output must be KEY=SOURCE:SPLIT. Received: 'e=x'"):
    split_outputs.parse_flags(["e=x"])
  with pytest.raises(split_outputs.SplitOutputError,
                     match=r"--ref_output must be KEY=SOURCE. Received: 'r'"):
    split_outputs.parse_refs(["r"])
  args, _ = entrypoint._parse([  # pylint: disable=protected-access
      "--executor_class_path", "x.Y", "--json_serialized_invocation_args", "{}",
      "--split_output", "a=b:c", "--ref_output", "r=b", "--runner=DirectRunner"])
  assert (args.split_output, args.ref_output) == (["a=b:c"], ["r=b"])


def _executor_output(uri):
  return {"artifacts": {"examples": {"artifacts": [
      {"uri": uri, "metadata": copy.deepcopy(EXAMPLES_METADATA)}]}}}


def test_make_copies_only_the_split_and_keeps_the_properties(tmp_path):
  source = tmp_path / "examples"
  for split, size in (("train", 400), ("eval", 100)):
    (source / f"Split-{split}").mkdir(parents=True)
    (source / f"Split-{split}" / "data_tfrecord-00000-of-00001.gz").write_bytes(b"x" * size)
  output = _executor_output(str(source))
  split_outputs.make_all({"eval_examples": ("examples", "eval")}, output,
                         {"examples": str(source), "eval_examples": str(tmp_path / "eval")},
                         {"examples": "minio://b/e", "eval_examples": "minio://b/ee"})
  [entry] = output["artifacts"]["eval_examples"]["artifacts"]
  assert entry["uri"] == "minio://b/ee"
  assert entry["metadata"] == dict(EXAMPLES_METADATA, split_names='["eval"]')
  assert os.listdir(tmp_path / "eval") == ["Split-eval"]
  assert (tmp_path / "eval" / "Split-eval" / "data_tfrecord-00000-of-00001.gz").read_bytes() \
      == b"x" * 100
  with pytest.raises(split_outputs.SplitOutputError,
                     match=r"output 'examples' has no split 'test' \(its splits: \['train', "
                           r"'eval'\]\); set the evaluator's split \(pipeline.evaluator.split\)"):
    split_outputs.make("test_examples", "examples", "test", output, str(source),
                       str(tmp_path / "t"), "minio://b/t")


def test_a_reference_names_the_files_and_the_step_gets_them_only_with_remote_paths(tmp_path):
  output = _executor_output(str(tmp_path / "examples"))
  split_outputs.make_refs({"examples_ref": "examples"}, output,
                          {"examples": str(tmp_path / "examples"),
                           "examples_ref": str(tmp_path / "ref")},
                          {"examples": "gs://b/run/ExampleGen/examples",
                           "examples_ref": "gs://b/run/ExampleGen/examples_ref"},
                          {"examples": EXAMPLES_TYPE, "examples_ref": split_outputs.REF_TYPE})
  [entry] = output["artifacts"]["examples_ref"]["artifacts"]
  assert entry["metadata"][split_outputs.REF_URI] == "gs://b/run/ExampleGen/examples"
  assert json.loads(entry["metadata"][split_outputs.REF_TARGET_TYPE]) == EXAMPLES_TYPE
  assert entry["metadata"]["split_names"] == EXAMPLES_METADATA["split_names"]
  assert os.listdir(tmp_path / "ref") == [split_outputs.REF_FILE]  # What the pod downloads.

  # As the driver hands it over: no type (toRuntimeArtifact), the declared one is the
  # reference's; TFX's executor gets the Examples' URI, type and (resolved) id.
  executor_input = {"inputs": {"artifacts": {"examples": {"artifacts": [
      {"name": "7", "uri": entry["uri"], "metadata": entry["metadata"]}]}}},
                    "outputs": {"artifacts": {}, "outputFile": "/tmp/out.json"}}
  inputs_spec = {"artifacts": {"examples": {"artifactType": split_outputs.REF_TYPE}}}
  adapted, _ = entrypoint.adapt(executor_input, inputs_spec, mount_root=None,  # Remote.
                                target_ids={"examples": 5})
  [artifact] = adapted["inputs"]["artifacts"]["examples"]["artifacts"]
  assert artifact["uri"] == "gs://b/run/ExampleGen/examples"
  assert artifact["type"] == EXAMPLES_TYPE
  assert artifact["name"] == "5"
  assert not {split_outputs.REF_URI, split_outputs.REF_TARGET_TYPE} & set(artifact["metadata"])
  adapted, _ = entrypoint.adapt(executor_input, inputs_spec, mount_root=None)  # Unresolved.
  assert adapted["inputs"]["artifacts"]["examples"]["artifacts"][0]["name"] == "7"
  with pytest.raises(split_outputs.SplitOutputError,
                     match=r"input artifact 'examples' is a reference to gs://b/run/ExampleGen/"
                           r"examples: only a step with remote artifact paths"):
    entrypoint.adapt(executor_input, inputs_spec, mount_root=str(tmp_path))  # Local paths.


def _kfp_records(path, pre_publish=True):
  """A real ML Metadata store holding what KFP records, written by the launcher
  stand-in's driver and launcher calls: the ExampleGen execution with its outputs
  `examples` and the reference `examples_ref` (types named by schema title,
  SchemaToArtifactType), another run's Examples at the same URI, and two consumers of
  the reference as the driver creates them (CreateExecution: INPUT event on the
  reference) and the launcher pre-publishes them (`pod_name`), before the trainer's
  command runs. Returns (KfpMetadata, ids)."""
  from kubeflow_launcher import KfpMetadata  # pylint: disable=g-import-not-at-top
  records = KfpMetadata(str(path))
  uri = "minio://b/r/ExampleGen/examples"
  older_run = records.pipeline("p", "older-run", "minio://b")
  # The same URI under another execution (a cached or earlier run) must not be taken.
  elsewhere_id = records.record_artifact("examples", EXAMPLES_TYPE, uri, {})
  records.publish_execution(records.create_execution("ExampleGen", older_run), older_run,
                            {"examples": elsewhere_id})
  run = records.pipeline("p", "run", "minio://b")
  examples_id = records.record_artifact("examples", EXAMPLES_TYPE, uri, {})
  ref_id = records.record_artifact("examples_ref", split_outputs.REF_TYPE,
                                   "minio://b/r/ExampleGen/examples_ref",
                                   {split_outputs.REF_URI: uri})
  records.publish_execution(records.create_execution("ExampleGen", run), run,
                            {"examples": examples_id, "examples_ref": ref_id})
  other_id = records.create_execution("Other", run, {"examples": [ref_id]})
  trainer_id = records.create_execution("DistributedTrainer", run, {"examples": [ref_id]})
  if pre_publish:
    records.pre_publish(other_id, "another-pod")
    records.pre_publish(trainer_id, "run-trainer-pod")
  return records, {"examples": examples_id, "ref": ref_id, "trainer": trainer_id,
                   "other": other_id}


def _inputs_of(store, execution_id):
  return sorted(e.artifact_id for e in store.get_events_by_execution_ids([execution_id])
                if e.type == mlmd.Event.INPUT)


def test_the_consumer_resolves_the_reference_in_ml_metadata_and_links_the_examples(tmp_path):
  records, ids = _kfp_records(tmp_path / "mlmd.sqlite")
  store = records.store
  assert split_outputs.link_target(store, ids["ref"], "examples", "run-trainer-pod") == \
      ids["examples"]
  [ref] = store.get_artifacts_by_id([ids["ref"]])
  assert ref.custom_properties[split_outputs.REF_TARGET_ID].int_value == ids["examples"]
  assert _inputs_of(store, ids["trainer"]) == sorted([ids["ref"], ids["examples"]])
  assert _inputs_of(store, ids["other"]) == [ids["ref"]]  # Only the pod's own execution.
  assert store.get_artifact_types_by_id([ref.type_id])[0].name == "tfx_parallel.ExamplesRef"
  # A retried pod (same execution) adds no second edge.
  split_outputs.link_target(store, ids["ref"], "examples", "run-trainer-pod")
  assert _inputs_of(store, ids["trainer"]) == sorted([ids["ref"], ids["examples"]])
  # Through the entry point, over ML Metadata's gRPC API (the stand-in serves the store
  # as metadata-grpc-service serves the cluster's).
  executor_input = {"inputs": {"artifacts": {"examples": {"artifacts": [
      {"name": str(ids["ref"]), "uri": ref.uri,
       "metadata": {split_outputs.REF_URI: "minio://b/r/ExampleGen/examples"}}]}}}}
  try:
    environ = {entrypoint.MLMD_HOST_ENV: "127.0.0.1",
               entrypoint.MLMD_PORT_ENV: str(records.serve()),
               entrypoint.POD_NAME_ENV: "run-trainer-pod"}
    assert entrypoint.link_references(executor_input, environ) == {
        "examples": ids["examples"]}
  finally:
    records.close()


def test_without_the_launchers_pod_name_the_reference_resolves_but_adds_no_edge(
    tmp_path, caplog):
  """The pod's own execution is the one the launcher marked with `pod_name` before the
  command (prePublish); without it no execution is taken for this pod's."""
  records, ids = _kfp_records(tmp_path / "mlmd.sqlite", pre_publish=False)
  with caplog.at_level(logging.WARNING):
    assert split_outputs.link_target(records.store, ids["ref"], "examples",
                                     "run-trainer-pod") == ids["examples"]
  assert "No execution reading artifact" in caplog.text
  assert _inputs_of(records.store, ids["trainer"]) == [ids["ref"]]


def test_a_store_that_cannot_resolve_the_reference_is_said_and_the_step_goes_on(
    tmp_path, caplog):
  records, ids = _kfp_records(tmp_path / "mlmd.sqlite")
  store = records.store
  [ref] = store.get_artifacts_by_id([ids["ref"]])
  ref.custom_properties[split_outputs.REF_URI].string_value = "minio://b/nowhere"
  store.put_artifacts([ref])
  with caplog.at_level(logging.WARNING):
    assert split_outputs.link_target(store, ids["ref"], "examples", "run-trainer-pod") is None
  assert "has no output at minio://b/nowhere" in caplog.text
  executor_input = {"inputs": {"artifacts": {"examples": {"artifacts": [
      {"name": str(ids["ref"]), "metadata": {split_outputs.REF_URI: "minio://b/x"}}]}}}}

  def unreachable(host, port):
    raise ConnectionError(f"{host}:{port} refused")
  environ = {entrypoint.MLMD_HOST_ENV: "metadata-grpc-service"}
  with caplog.at_level(logging.WARNING):
    assert entrypoint.link_references(executor_input, environ, unreachable) == {}
  assert "ML Metadata at metadata-grpc-service:8080 could not resolve" in caplog.text
  assert entrypoint.link_references(executor_input, {}, unreachable) == {}
  assert "METADATA_GRPC_SERVICE_HOST is not set" in caplog.text
  caplog.clear()  # A real gRPC client on a port nobody serves: one line, no exception.
  with caplog.at_level(logging.WARNING):
    assert entrypoint.link_references(executor_input, {
        entrypoint.MLMD_HOST_ENV: "127.0.0.1", entrypoint.MLMD_PORT_ENV: "1"}) == {}
  [said] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  assert "ML Metadata at 127.0.0.1:1 could not resolve" in said and "\n" not in said


def test_outputs_the_entry_point_makes_are_hidden_from_tfx():
  executor_input = {"inputs": {"artifacts": {}}, "outputs": {"artifacts": {
      key: {"artifacts": [{"uri": f"{PIPELINE_ROOT}/{key}",
                           "type": {"schemaTitle": "tfx.Examples"}}]}
      for key in ("examples", "eval_examples")}, "outputFile": "/tmp/out.json"}}
  adapted, remote = entrypoint.adapt(executor_input, None, "/", made_here=["eval_examples"])
  assert list(adapted["outputs"]["artifacts"]) == ["examples"]
  assert list(remote) == ["examples"]
