"""Every property a later step reads survives Kubeflow Pipelines' encoding (issue 40, 3).

The path a value takes on KFP, with the real parts wherever they run here:

1. the producing step's TFX artifact, set by our own writers;
2. TFX's entry point turns it into the ExecutorOutput (tensorflow/tfx v1.16.0
   ``kubeflow_v2_entrypoint_utils.translate_executor_output``, called from site-packages),
   and our entry point restores the URIs and ids (``kubeflow/entrypoint.restore``);
3. the launcher parses that JSON strictly and records each output in ML Metadata
   (tests/kubeflow_launcher.py ``KfpMetadata``: kubeflow/pipelines ``converter.go``
   ``StructValueToMLMDValue`` into a real ml_metadata store, whose doubles keep 6 decimals
   as the cluster's server does);
4. the next driver reads it back (``toRuntimeArtifact``) into the ExecutorInput, and TFX's
   entry point parses it (``kubeflow_v2_entrypoint_utils.parse_raw_artifact_dict``);
5. the consuming step's own readers.

Locally the same readers see the artifact as LocalDagRunner's store keeps it.
"""
import json

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as tfx_kfp
from tfx.types import artifact_utils
from tfx.types import standard_artifacts

from kubeflow_launcher import KfpMetadata, parse_executor_output
from tfx_parallel.components.common import artifacts as our_artifacts
from tfx_parallel.components.common import custom_properties
from tfx_parallel.components.common import keys
from tfx_parallel.components.common import task_contract
from tfx_parallel.components.convergence_evaluator import executor as evaluator
from tfx_parallel.components.convergence_evaluator import task as task_lib
from tfx_parallel.components.distributed_trainer.inputs import description
from tfx_parallel.components.partitioned_example_gen import properties as example_props
from tfx_parallel.components.partitioned_example_gen.write import IngestSummary
from tfx_parallel.kubeflow import entrypoint

ROOT = "minio://mlpipeline/v2/artifacts/p/run-1"
TITLES = {"examples": "title: tfx.Examples\ntype: object\n",
          "model": "title: tfx.Model\ntype: object\n",
          "blessing": "title: tfx.ModelBlessing\ntype: object\n",
          "history": ("title: tfx_parallel.components.common.artifacts.TrainingHistory\n"
                      "type: object\n")}


def record_through_kfp(store, key, artifact, uri, instance_schema, executor_input=None):
  """Steps 2-3: the ExecutorOutput TFX's entry point writes for `artifact` (an output
  `key` at `uri`), restored by ours, parsed as the launcher does and recorded in `store`
  (a KfpMetadata) with the type `instance_schema`; returns the artifact's id."""
  name_from_id = {}
  output = tfx_kfp.translate_executor_output({key: [artifact]}, name_from_id)
  text = json_format.MessageToJson(pipeline_spec_pb2.ExecutorOutput(artifacts=output))
  restored = entrypoint.restore(json.loads(text), {key: [uri]}, {},
                                entrypoint.input_ids(executor_input or {}))
  parsed = parse_executor_output(json.dumps(restored, allow_nan=False), "output_metadata.json")
  produced = parsed["artifacts"][key]["artifacts"][0]
  return store.record_artifact(key, {"instanceSchema": instance_schema}, produced["uri"],
                               produced.get("metadata", {}))


def _recorded(store, key, artifact, uri, executor_input=None):
  return record_through_kfp(store, key, artifact, uri, TITLES[key], executor_input)


def _executor_input(store, ids):
  """Step 4: the downstream ExecutorInput JSON for {input key: recorded id}."""
  return {"inputs": {"artifacts": {
      key: {"artifacts": [dict(store.runtime_artifact(artifact_id),
                               type={"instanceSchema": TITLES[key]})]}
      for key, artifact_id in ids.items()}}}


def _parsed(executor_input):
  """Step 4: TFX's own parse of the ExecutorInput's artifacts (what the executor gets)."""
  message = pipeline_spec_pb2.ExecutorInput()
  json_format.ParseDict(executor_input, message)
  parsed = tfx_kfp.parse_raw_artifact_dict(message.inputs.artifacts)
  return {key: artifact_utils.get_single_instance(value) for key, value in parsed.items()}


@pytest.fixture
def store(tmp_path):
  return KfpMetadata(str(tmp_path / "mlmd.sqlite"))


def _examples(true_bias, label_key="y"):
  examples = standard_artifacts.Examples()
  examples.uri = f"{ROOT}/PartitionedExampleGen/s/examples"
  example_props.record_output(
      examples, split_names=["train", "eval"], num_shards=0, source="synthetic",
      feature_keys=["x0"], label_key=label_key,
      summary=IngestSummary({"train": 8, "eval": 0}), true_weights=[0.0, 2.5e-7],
      true_bias=true_bias)
  return examples


def _model(task, num_classes, vocabulary=None):
  model = standard_artifacts.Model()
  model.uri = f"{ROOT}/DistributedTrainer/s/model"
  model.set_string_custom_property(keys.TASK, task)  # "" too (write_properties refuses it).
  model.set_int_custom_property(keys.NUM_CLASSES, num_classes)
  if vocabulary is not None:
    model.set_string_custom_property(keys.LABEL_VOCABULARY, json.dumps(vocabulary))
  return model


def _what_readers_see(examples, model):
  """Every value the trainer and the evaluator read from these artifacts."""
  weights, bias = evaluator.read_true_parameters(examples)
  return {"true_weights": weights, "true_bias": bias,
          "label_key": description._hint(examples, keys.LABEL_KEY),  # pylint: disable=protected-access
          "num_shards": description._hint(examples, keys.NUM_SHARDS),  # pylint: disable=protected-access
          "row_count_eval": custom_properties.value(examples, keys.ROW_COUNT_PREFIX + "eval"),
          "task": custom_properties.value(model, keys.TASK),
          "num_classes": custom_properties.value(model, keys.NUM_CLASSES)}


@pytest.mark.parametrize("true_bias", [0.0, 3e-7, -1.25e-9, 2.0])
@pytest.mark.parametrize("task, num_classes", [("", 0), ("regression", 1), ("multiclass", 3)])
def test_falsy_and_tiny_values_read_back_on_kfp_as_locally(store, true_bias, task,
                                                           num_classes):
  """0, "", 0.0 and values below 1e-6 reach the consumers as they were set."""
  examples, model = _examples(true_bias), _model(task, num_classes)
  local = _what_readers_see(examples, model)
  assert local == {"true_weights": [0.0, 2.5e-7], "true_bias": true_bias, "label_key": "y",
                   "num_shards": 0, "row_count_eval": 0, "task": task,
                   "num_classes": num_classes}
  ids = {"examples": _recorded(store, "examples", examples, examples.uri),
         "model": _recorded(store, "model", model, model.uri)}
  on_kfp = _parsed(_executor_input(store, ids))
  assert _what_readers_see(on_kfp["examples"], on_kfp["model"]) == local
  # What went wrong before: TFX's own getter drops falsy struct values on KFP.
  if not task:
    assert on_kfp["model"].get_custom_property(keys.TASK) is None
  if not num_classes:
    assert on_kfp["model"].get_custom_property(keys.NUM_CLASSES) is None
  # And a double keeps 6 decimals in ML Metadata: a tiny bias as a number reads 0.
  tiny = standard_artifacts.Examples()
  tiny.uri = examples.uri
  tiny.set_float_custom_property(keys.TRUE_BIAS, 3e-7)
  as_double = _parsed(_executor_input(store, {"examples": _recorded(
      store, "examples", tiny, tiny.uri)}))["examples"]
  assert custom_properties.value(as_double, keys.TRUE_BIAS) == 0.0


@pytest.mark.parametrize("task, num_classes, vocabulary", [
    ("", 0, None), ("binary", 2, ["no", "yes"]), ("multiclass", 3, None)])
def test_the_evaluators_task_resolution_is_the_same_on_kfp(store, task, num_classes,
                                                           vocabulary):
  """task.read_properties + resolve: the same TaskInfo, or the same error, on both."""
  model = _model(task, num_classes, vocabulary)
  history = our_artifacts.TrainingHistory()
  history.uri = f"{ROOT}/DistributedTrainer/s/history"
  if task:
    task_contract.write_properties(history, task, num_classes, vocabulary)
  ids = {"model": _recorded(store, "model", model, model.uri),
         "history": _recorded(store, "history", history, history.uri)}
  on_kfp = _parsed(_executor_input(store, ids))

  def resolved(model_artifact, history_artifact):
    try:
      return task_lib.resolve(task_lib.read_properties(model_artifact),
                              task_lib.read_properties(history_artifact))
    except ValueError as e:
      return str(e)

  local = resolved(model, history)
  assert resolved(on_kfp["model"], on_kfp["history"]) == local
  if task:
    assert local == task_lib.TaskInfo(task, num_classes, tuple(vocabulary or ()) or None,
                                      "Model")
  else:  # The empty task is named as it was set, not as 'None'.
    assert local == "Model: task must be one of ['regression', 'binary', 'multiclass']. " \
                    "Received: ''"


def test_num_classes_must_be_whole(store):
  model = _model("multiclass", 3)
  model.set_float_custom_property(keys.NUM_CLASSES, 2.5)
  with pytest.raises(ValueError, match="'num_classes' must be an integer. Received: 2.5"):
    task_lib.read_properties(model)


def test_current_model_id_is_the_models_ml_metadata_id_on_kfp(store):
  """The evaluator's blessing names the Model's ML Metadata id, as it does locally."""
  model = _model("regression", 1)
  model_id = _recorded(store, "model", model, model.uri)
  executor_input = _executor_input(store, {"model": model_id})
  model_in_pod = _parsed(executor_input)["model"]
  assert model_in_pod.id != model_id  # TFX's sha256 of the name "<id>" (~1e18).
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = "/nonexistent"  # Only the properties are used here.
  blessing.set_string_custom_property("current_model", model_in_pod.uri)
  blessing.set_int_custom_property("current_model_id", model_in_pod.id)
  blessing.set_int_custom_property("blessed", 1)
  recorded = store.runtime_artifact(_recorded(store, "blessing", blessing,
                                              f"{ROOT}/Eval/s/blessing", executor_input))
  assert recorded["metadata"]["current_model_id"] == model_id
  assert recorded["metadata"]["current_model"] == model.uri
  # Without the inputs' ids the record would hold the hash (what the issue saw).
  unrestored = store.runtime_artifact(_recorded(store, "blessing", blessing,
                                                f"{ROOT}/Eval/s/blessing"))
  assert unrestored["metadata"]["current_model_id"] > 1e17
