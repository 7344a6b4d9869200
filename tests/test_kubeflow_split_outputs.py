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
import os

import pytest

from kubeflow_util import compile_mapping
from test_kubeflow_launcher import PIPELINE_ROOT, _small_config
from tfx_parallel.kubeflow import entrypoint, split_outputs

EXAMPLES_METADATA = {"split_names": json.dumps(["train", "eval"]), "label_key": "label",
                     "true_bias": "0.5"}


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
                           "examples_ref": "gs://b/run/ExampleGen/examples_ref"})
  [entry] = output["artifacts"]["examples_ref"]["artifacts"]
  assert entry["metadata"][split_outputs.REF_URI] == "gs://b/run/ExampleGen/examples"
  assert entry["metadata"]["split_names"] == EXAMPLES_METADATA["split_names"]
  assert os.listdir(tmp_path / "ref") == [split_outputs.REF_FILE]  # What the pod downloads.

  executor_input = {"inputs": {"artifacts": {"examples": {"artifacts": [
      {"name": "7", "uri": entry["uri"], "metadata": entry["metadata"],
       "type": {"schemaTitle": "tfx.Examples"}}]}}},
                    "outputs": {"artifacts": {}, "outputFile": "/tmp/out.json"}}
  adapted, _ = entrypoint.adapt(executor_input, None, mount_root=None)  # Remote paths.
  [artifact] = adapted["inputs"]["artifacts"]["examples"]["artifacts"]
  assert artifact["uri"] == "gs://b/run/ExampleGen/examples"
  assert split_outputs.REF_URI not in artifact["metadata"]
  with pytest.raises(split_outputs.SplitOutputError,
                     match=r"input artifact 'examples' is a reference to gs://b/run/ExampleGen/"
                           r"examples: only a step with remote artifact paths"):
    entrypoint.adapt(executor_input, None, mount_root=str(tmp_path))  # Local paths.


def test_outputs_the_entry_point_makes_are_hidden_from_tfx():
  executor_input = {"inputs": {"artifacts": {}}, "outputs": {"artifacts": {
      key: {"artifacts": [{"uri": f"{PIPELINE_ROOT}/{key}",
                           "type": {"schemaTitle": "tfx.Examples"}}]}
      for key in ("examples", "eval_examples")}, "outputFile": "/tmp/out.json"}}
  adapted, remote = entrypoint.adapt(executor_input, None, "/", made_here=["eval_examples"])
  assert list(adapted["outputs"]["artifacts"]) == ["examples"]
  assert list(remote) == ["examples"]
