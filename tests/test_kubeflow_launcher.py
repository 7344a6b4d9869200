"""The whole compiled pipeline, run step by step as open-source KFP's driver and launcher
would run it (tests/kubeflow_launcher.py): from the package alone, with a `minio://`
pipeline root, to a blessed model.

Also the entry point's adaptation on its own (kubeflow/entrypoint.py), and the
driver's rules that the package must satisfy (constant parameters only, no resolvers).
"""

import copy
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from kubeflow_launcher import (EXECUTOR_LOGS, LEGACY_OUTPUT_FILE, MINIO_SESSION_INFO, Launcher,
                               LauncherError, fingerprint, local_path_for_uri,
                               parse_executor_output, resolve_parameters, to_mlmd_value,
                               topological_order)
from kubeflow_util import compile_mapping, fixture_mapping
from tfx_parallel.kubeflow import entrypoint, ui_outputs

PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"  # The open-source install's default.
EXAMPLES_TITLE = "title: tfx.Examples\ntype: object\n"


def _small_config():
  """The fixture config, tiny and on CPU, with the open-source default pipeline root."""
  data = copy.deepcopy(fixture_mapping())
  data["pipeline_root"] = PIPELINE_ROOT
  data["pipeline"]["example_gen"] = {"rows": 2000, "num_features": 4}
  data["pipeline"]["trainer"] = {"layout": "single", "epochs": 10, "learning_rate": 0.1,
                                 "optimizer": "adam", "batch_size": 64}
  # No Beam args (but see the whole-DAG test with the default config's): with any, TFX's
  # Beam executor first builds an sdist of TFX for the workers
  # (dependency_utils.make_beam_dependency_flags), ~50 s here.
  data["components"]["PartitionedExampleGen"]["beam_pipeline_args"] = []
  return data


# --- The entry point's adaptation, without TFX. --------------------------------------

def test_local_path_is_the_launchers():
  assert entrypoint.local_path("gs://b/p/x") == "/gcs/b/p/x"
  assert entrypoint.local_path("minio://mlpipeline/v2/a") == "/minio/mlpipeline/v2/a"
  assert entrypoint.local_path("s3://b/k", "/tmp/pod") == "/tmp/pod/s3/b/k"
  assert entrypoint.local_path("/already/local") == "/already/local"


def _executor_input(input_type, publish_logs=False):
  outputs = {"model": {"artifacts": [
      {"name": "model", "uri": "minio://b/run/Train/s/model",
       "type": {"instanceSchema": "title: tfx.Model\ntype: object\n"}}]}}
  if publish_logs:  # As the driver adds it from 2.5.0 (driver/driver.go provisionOutputs).
    outputs[EXECUTOR_LOGS] = {"artifacts": [
        {"name": EXECUTOR_LOGS, "uri": "minio://b/run/Train/s/executor-logs",
         "type": {"schemaTitle": "system.Artifact"}}]}
  return {
      "inputs": {"parameterValues": {"config": "{}"},
                 "artifacts": {"examples": {"artifacts": [
                     {"name": "7", "uri": "minio://b/run/Gen/s/examples", "type": input_type,
                      "metadata": {"split_names": '["train"]', "display_name": "examples",
                                   "store_session_info": MINIO_SESSION_INFO}}]}}},
      "outputs": {"artifacts": outputs,
                  "outputFile": "/minio/b/run/Train/s/output_metadata.json"}}


@pytest.mark.parametrize("publish_logs", [True, False])
@pytest.mark.parametrize("input_type", [{"instanceSchema": ""}, {"schemaTitle": "system.Dataset"},
                                        None])
def test_adapt_types_inputs_from_the_inputs_spec_and_maps_uris(input_type, publish_logs):
  """With and without the driver's executor-logs output: TFX never sees it."""
  spec = {"artifacts": {"examples": {"artifactType": {"instanceSchema": EXAMPLES_TITLE}}}}
  executor_input = _executor_input(input_type, publish_logs)
  assert entrypoint.backend_outputs(executor_input) == ([EXECUTOR_LOGS] if publish_logs else [])
  adapted, remote = entrypoint.adapt(executor_input, spec, "/pod")
  assert set(adapted["outputs"]["artifacts"]) == {"model"}
  examples = adapted["inputs"]["artifacts"]["examples"]["artifacts"][0]
  assert examples["type"] == {"instanceSchema": EXAMPLES_TITLE}
  assert examples["uri"] == "/pod/minio/b/run/Gen/s/examples"
  model = adapted["outputs"]["artifacts"]["model"]["artifacts"][0]
  assert model["uri"] == "/pod/minio/b/run/Train/s/model"
  assert remote == {"model": ["minio://b/run/Train/s/model"]}
  assert adapted["outputs"]["outputFile"] == "/minio/b/run/Train/s/output_metadata.json"


def test_remote_artifact_paths_keep_the_uris():
  adapted, remote = entrypoint.adapt(_executor_input({"instanceSchema": ""}), {"artifacts": {
      "examples": {"artifactType": {"instanceSchema": EXAMPLES_TITLE}}}}, mount_root=None)
  assert adapted["inputs"]["artifacts"]["examples"]["artifacts"][0]["uri"] == (
      "minio://b/run/Gen/s/examples")
  assert entrypoint.local_to_remote(adapted, None) == {}
  with pytest.raises(entrypoint.EntrypointError, match="TFX_PARALLEL_ARTIFACT_PATHS must be "
                                                       "one of .* Received: 'gcs'"):
    entrypoint.run(["--executor_class_path", "x.Y", "--json_serialized_invocation_args",
                    "{}"], {"TFX_PARALLEL_ARTIFACT_PATHS": "gcs"})


def test_adapt_keeps_a_real_title_and_names_an_untypable_input():
  typed = {"instanceSchema": "title: tfx_parallel.components.common.artifacts.X\n"}
  adapted, _ = entrypoint.adapt(_executor_input(typed), None)
  assert adapted["inputs"]["artifacts"]["examples"]["artifacts"][0]["type"] == typed
  with pytest.raises(entrypoint.EntrypointError, match=r"input artifact 'examples' has type "
                                                       r"'system.Dataset'"):
    entrypoint.adapt(_executor_input({"schemaTitle": "system.Dataset"}), {"artifacts": {}})


def test_restore_puts_back_remote_uris_in_artifacts_and_metadata():
  local_to_remote = {"/pod/minio/b/run/Train/s/model": "minio://b/run/Train/s/model"}
  output = {"artifacts": {"blessing": {"artifacts": [{
      "uri": "/pod/minio/b/run/Eval/s/blessing",
      "metadata": {"current_model": "/pod/minio/b/run/Train/s/model", "blessed": 1,
                   "missing": None}}]}}}
  restored = entrypoint.restore(output, {"blessing": ["minio://b/run/Eval/s/blessing"]},
                                local_to_remote)
  blessing = restored["artifacts"]["blessing"]["artifacts"][0]
  assert blessing["uri"] == "minio://b/run/Eval/s/blessing"
  assert blessing["metadata"] == {"current_model": "minio://b/run/Train/s/model", "blessed": 1}
  # The model id TFX knows in the pod is a hash of the KFP name; the input's id replaces it.
  output["artifacts"]["blessing"]["artifacts"][0]["metadata"]["current_model_id"] = 7.3e18
  executor_input = {"inputs": {"artifacts": {"model": {"artifacts": [
      {"name": "42", "uri": "minio://b/run/Train/s/model"}]}}}}
  assert entrypoint.input_ids(executor_input) == {"minio://b/run/Train/s/model": 42}
  restored = entrypoint.restore(output, {"blessing": ["minio://b/run/Eval/s/blessing"]},
                                local_to_remote, entrypoint.input_ids(executor_input))
  assert restored["artifacts"]["blessing"]["artifacts"][0]["metadata"]["current_model_id"] == 42


def test_executor_output_is_parsed_as_strictly_as_protojson(tmp_path):
  """launcher_v2.go getExecutorOutputFile: protojson.Unmarshal into ExecutorOutput."""
  good = {"artifacts": {"model": {"artifacts": [{"uri": "minio://b/m",
                                                 "metadata": {"blessed": 1}}]}}}
  assert parse_executor_output(json.dumps(good), "f")["artifacts"]["model"]["artifacts"][0][
      "metadata"] == {"blessed": 1.0}
  for text, needle in (
      (json.dumps({"artifact": {}}), "artifact"),
      (json.dumps({"artifacts": {"m": {"artifacts": [{"url": "x"}]}}}), "url"),
      ('{"artifacts": {"m": {"artifacts": [{"metadata": {"loss": NaN}}]}}}', "NaN"),
      ('{"parameterValues": {"x": Infinity}}', "Infinity"),
      ('{"artifacts": {}, "artifacts": {}}', "artifacts")):
    with pytest.raises(LauncherError, match=needle):
      parse_executor_output(text, "output_metadata.json")
  # The entry point writes what it parses (no NaN: json.dumps(allow_nan=False)).
  with pytest.raises(ValueError, match="not JSON compliant"):
    json.dumps({"x": float("nan")}, allow_nan=False)


@pytest.mark.slow
def test_a_failing_step_prints_the_error_and_exits_1(tmp_path):
  """The process ends (os._exit) with status 1, and the log names what failed."""
  executor_input = _executor_input({"instanceSchema": ""})
  spec = {"artifacts": {"examples": {"artifactType": {"instanceSchema": EXAMPLES_TITLE}}}}
  proc = subprocess.run(
      [sys.executable, "-m", "tfx_parallel.kubeflow.entrypoint", "--executor_class_path",
       "tfx_parallel.no_such_module.Executor", "--json_serialized_invocation_args",
       json.dumps(executor_input), "--json_serialized_inputs_spec_args", json.dumps(spec)],
      env=dict(os.environ, TFX_PARALLEL_MOUNT_ROOT=str(tmp_path)), capture_output=True,
      text=True, timeout=600)
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "tfx_parallel.no_such_module" in proc.stderr, proc.stderr[-3000:]


# --- What the open-source driver accepts. --------------------------------------------

@pytest.fixture(scope="module")
def package():
  return compile_mapping(_small_config()).pipeline_spec


def test_every_parameter_is_a_runtime_constant_with_a_typed_definition(package):
  text = json.dumps(package)
  assert package["schemaVersion"] == "2.1.0"
  assert "constantValue" not in text and "resolver" not in text.lower()
  for name, task in package["root"]["dag"]["tasks"].items():
    component = package["components"][task["componentRef"]["name"]]
    values = resolve_parameters(name, task, component)
    assert json.loads(values["config"]), name  # The component's config, as JSON text.


def test_the_driver_rules_fail_on_the_old_schema(package):
  task = copy.deepcopy(package["root"]["dag"]["tasks"]["DistributedTrainer"])
  component = package["components"]["DistributedTrainer"]
  task["inputs"]["parameters"]["config"]["runtimeValue"] = {
      "constantValue": {"stringValue": "{}"}}
  with pytest.raises(LauncherError, match="param runtime value spec of type constantValue "
                                          "not implemented"):
    resolve_parameters("DistributedTrainer", task, component)
  with pytest.raises(LauncherError, match="NullValue"):
    to_mlmd_value("x", None)
  # An executor output naming a local path instead of the remote URI cannot be uploaded.
  with pytest.raises(LauncherError, match="unsupported storage scheme"):
    local_path_for_uri("/pod/minio/mlpipeline/run/model")
  assert local_path_for_uri("minio://mlpipeline/run/model") == "minio/mlpipeline/run/model"


def test_tasks_run_after_their_producers(package):
  tasks = package["root"]["dag"]["tasks"]
  assert topological_order(tasks) == ["PartitionedExampleGen", "DistributedTrainer",
                                      "ConvergenceEvaluator"]
  cyclic = copy.deepcopy(tasks)
  cyclic["PartitionedExampleGen"]["dependentTasks"] = ["ConvergenceEvaluator"]
  with pytest.raises(LauncherError, match="cycle"):
    topological_order(cyclic)


# --- The driver's cache. ---------------------------------------------------------------

def _fingerprints(data, pvc_cache_key=True, package=None):
  """{task: the driver's fingerprint} for config `data` (or its compiled `package`),
  upstream outputs given fixed ids (`pvc_cache_key`: backend 2.15.0 or later)."""
  package = package or compile_mapping(data)
  launcher = Launcher(package.pipeline_spec, "/nonexistent", PIPELINE_ROOT,
                      platform_spec=package.platform_spec, pvc_cache_key=pvc_cache_key)
  tasks = package.pipeline_spec["root"]["dag"]["tasks"]
  result = {}
  for i, name in enumerate(topological_order(tasks)):
    task = tasks[name]
    component = package.pipeline_spec["components"][task["componentRef"]["name"]]
    container = package.pipeline_spec["deploymentSpec"]["executors"][
        component["executorLabel"]]["container"]
    result[name] = fingerprint(launcher.executor_input(name), container,
                               launcher.pvc_names(component["executorLabel"])
                               if pvc_cache_key else ())
    launcher.mlmd[name] = {key: {"id": 10 * i + j, "uri": f"minio://b/{name}/{key}",
                                 "custom_properties": {}}
                           for j, key in enumerate(sorted(component["outputDefinitions"]["artifacts"]))}
  return result


def _changed(path, value):
  data = _small_config()
  data["components"].setdefault("DistributedTrainer", {})
  node = data
  for key in path[:-1]:
    node = node.setdefault(key, {})
  node[path[-1]] = value
  return data


_GPUS = {"type": "nvidia.com/gpu", "count": 1}


@pytest.mark.parametrize("path, value, rerun", [
    (("components", "default", "image"), "registry.example.com/tfx-parallel:other",
     {"PartitionedExampleGen", "ConvergenceEvaluator"}),  # The trainer has its own image.
    (("components", "DistributedTrainer", "image"), "registry.example.com/gpu:other",
     {"DistributedTrainer"}),
    (("pipeline", "trainer", "epochs"), 4, {"DistributedTrainer"}),
    (("components", "DistributedTrainer", "accelerator"), dict(_GPUS, count=2),
     {"DistributedTrainer"}),
    (("components", "DistributedTrainer", "env"), {"NCCL_DEBUG": "INFO"},
     {"DistributedTrainer"}),
    (("components", "DistributedTrainer", "node_selector"),
     {"cloud.google.com/gke-accelerator": "nvidia-l4"}, {"DistributedTrainer"}),
    (("components", "DistributedTrainer", "pvc_mounts"), {"other-cache": "/var/cache/cuda"},
     {"DistributedTrainer"}),
    # Served from cache: they do not change what a step computes.
    (("components", "DistributedTrainer", "memory_limit"), "64G", set()),
    (("components", "DistributedTrainer", "tolerations"),
     [{"key": "spot", "operator": "Exists"}], set()),
])
def test_cache_fingerprint_changes_with_image_config_gpus_and_env(path, value, rerun):
  """Which config changes re-run a task on a KFP backend with caching on, and which are
  served from cache (driver/cache.go getFingerPrint); upstream outputs held fixed."""
  base = _changed(("components", "DistributedTrainer", "accelerator"), _GPUS)
  base["components"]["DistributedTrainer"]["pvc_mounts"] = {"cuda-jit-cache": "/var/cache/cuda"}
  changed = copy.deepcopy(base)
  node = changed
  for key in path[:-1]:
    node = node.setdefault(key, {})
  node[path[-1]] = value
  before, after = _fingerprints(base), _fingerprints(changed)
  assert {task for task in before if before[task] != after[task]} == rerun


def test_pvc_names_enter_the_cache_key_only_from_2_15():
  """driver/cache.go getFingerPrint takes the PVC names from 2.15.0 (commit 1b3decdc81);
  through 2.14.x another claim at the same path is served from the cache."""
  base = _changed(("components", "DistributedTrainer", "pvc_mounts"),
                  {"cuda-jit-cache": "/var/cache/cuda"})
  other = _changed(("components", "DistributedTrainer", "pvc_mounts"),
                   {"other-cache": "/var/cache/cuda"})
  for pvc_cache_key, rerun in ((True, {"DistributedTrainer"}), (False, set())):
    before = _fingerprints(base, pvc_cache_key)
    after = _fingerprints(other, pvc_cache_key)
    assert {task for task in before if before[task] != after[task]} == rerun, pvc_cache_key


def test_fingerprint_covers_the_drivers_fields_only():
  executor_input = _executor_input({"instanceSchema": ""}, publish_logs=True)
  container = {"image": "i", "command": ["python"], "args": ["{{$}}"],
               "env": [{"name": "A", "value": "1"}], "resources": {"cpuLimit": 1}}
  key = fingerprint(executor_input, container, ["b", "a"])
  assert key == fingerprint(executor_input, dict(container, env=[], resources={}), ["a", "b"])
  other_uri = copy.deepcopy(executor_input)  # Output URIs are wiped from the key.
  other_uri["outputs"]["artifacts"]["model"]["artifacts"][0]["uri"] = "minio://elsewhere"
  assert fingerprint(other_uri, container, ["a", "b"]) == key
  other_input = copy.deepcopy(executor_input)  # Input artifacts count by their MLMD id.
  other_input["inputs"]["artifacts"]["examples"]["artifacts"][0]["name"] = "8"
  for changed in (fingerprint(other_input, container, ["a", "b"]),
                  fingerprint(executor_input, dict(container, image="j"), ["a", "b"]),
                  fingerprint(executor_input, container, ["a"]),
                  fingerprint(_executor_input({"instanceSchema": ""}), container, ["a", "b"])):
    assert changed != key


# --- The whole pipeline. --------------------------------------------------------------

def _default_beam_args():
  """The Beam args kubeflow/default_config.yaml gives PartitionedExampleGen."""
  from tfx_parallel.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  import yaml  # pylint: disable=g-import-not-at-top
  with open(compiler.DEFAULT_CONFIG) as f:
    return yaml.safe_load(f)["components"]["PartitionedExampleGen"]["beam_pipeline_args"]


@pytest.mark.slow
@pytest.mark.parametrize("publish_logs, output_file, beam_args", [
    # 2.15.0 to master (default install: PUBLISH_LOGS "true"); no Beam args.
    (True, "task_root", "none"),
    # 2.1.0 to 2.4.x (or a later one with PUBLISH_LOGS "false"; retries from 2.4.1), with the Beam args of
    # kubeflow/default_config.yaml (in-pod DirectRunner, multi_processing): TFX first packs
    # itself into an sdist for the workers (tfx/utils/dependency_utils.py
    # make_beam_dependency_flags; ~50 s here).
    (False, "legacy", "default"),
], ids=["master", "2.1-2.4-default-beam-args"])
def test_compiled_package_runs_to_a_blessed_model_like_open_source_kfp(tmp_path, package,
                                                                      publish_logs,
                                                                      output_file, beam_args):
  """Every step runs the package's own command and args in its own "pod"; artifacts
  move only through the object store, by their minio:// URIs. A second run of the same
  DAG is served from the driver's cache."""
  if beam_args == "default":
    data = _small_config()
    data["components"]["PartitionedExampleGen"]["beam_pipeline_args"] = _default_beam_args()
    assert "--direct_running_mode=multi_processing" in _default_beam_args()
    package = compile_mapping(data).pipeline_spec
  launcher = Launcher(package, str(tmp_path), PIPELINE_ROOT, publish_logs=publish_logs,
                      output_file=output_file,
                      retries=output_file != "legacy")  # 2.1-2.4.0 ignore retryPolicy.
  order = launcher.run()
  assert order == ["PartitionedExampleGen", "DistributedTrainer", "ConvergenceEvaluator"]
  with open(tmp_path / "PartitionedExampleGen.log") as f:
    assert ("Added --extra_package=" in f.read()) == (beam_args == "default")

  for task, executor_input in launcher.executor_inputs.items():  # What the steps received.
    assert set(executor_input["inputs"]) == {"parameterValues", "artifacts"}, task
    assert (EXECUTOR_LOGS in executor_input["outputs"]["artifacts"]) == publish_logs, task
    assert (executor_input["outputs"]["outputFile"] == LEGACY_OUTPUT_FILE) == (
        output_file == "legacy"), task
    wired = package["root"]["dag"]["tasks"][task].get("inputs", {}).get("artifacts", {})
    for key, artifacts in executor_input["inputs"]["artifacts"].items():  # From MLMD.
      metadata = artifacts["artifacts"][0]["metadata"]
      produced_as = wired[key]["taskOutputArtifact"]["outputArtifactKey"]  # Its output key.
      assert metadata["display_name"] == produced_as and metadata["store_session_info"], (
          task, key)
  recorded = {(task, key): a for task, outputs in launcher.mlmd.items()
              for key, a in outputs.items()}
  for (task, key), artifact in recorded.items():
    assert artifact["uri"].startswith(f"{PIPELINE_ROOT}/tfx-parallel-fixture/run-1/{task}/"), (
        task, key, artifact["uri"])
    for name, value in artifact["custom_properties"].items():
      assert str(tmp_path) not in json.dumps(value), (task, key, name, value)

  examples = recorded[("PartitionedExampleGen", "examples")]
  assert sorted(json.loads(examples["custom_properties"]["split_names"])) == ["eval", "train"]
  for split in ("train", "eval"):
    split_dir = os.path.join(launcher.object_path(examples["uri"]), f"Split-{split}")
    assert os.listdir(split_dir), split_dir

  model = recorded[("DistributedTrainer", "model")]
  assert os.path.isfile(os.path.join(launcher.object_path(model["uri"]), "Format-Serving",
                                     "saved_model.pb"))
  history = recorded[("DistributedTrainer", "history")]["custom_properties"]
  assert history["layout"] == "single" and int(history["steps_run"]) >= 3

  metrics = recorded[("ConvergenceEvaluator", "metrics")]["custom_properties"]
  assert metrics["convergence_state"] == "converged", metrics
  assert int(metrics["blessed"]) == 1, metrics
  blessing = recorded[("ConvergenceEvaluator", "blessing")]
  assert int(blessing["custom_properties"]["blessed"]) == 1
  assert blessing["custom_properties"]["current_model"] == model["uri"]
  assert blessing["custom_properties"]["current_model_id"] == model["id"]  # Not a hash.
  # What the KFP UI draws (kubeflow/ui_outputs.py): the system types, display_name, each
  # system.Metrics property a double (MetricsVisualizations.tsx 2.4.1 to 2.16.0:824-846),
  # and the HTML report as the object at the artifact's URI (Apis.readFile, :872-896).
  type_names = {t.id: t.name for t in launcher.metadata.store.get_artifact_types()}
  for key, title in ui_outputs.OUTPUTS.items():
    [ui] = launcher.metadata.store.get_artifacts_by_id([recorded[("ConvergenceEvaluator",
                                                                   key)]["id"]])
    assert type_names[ui.type_id] == title, key
    assert ui.custom_properties["display_name"].string_value == key
  [ui] = launcher.metadata.store.get_artifacts_by_id(
      [recorded[("ConvergenceEvaluator", "ui_metrics")]["id"]])
  assert ui.custom_properties["eval_mse"].double_value == pytest.approx(
      float(metrics["eval_mse"]))
  assert {n for n, v in ui.custom_properties.items() if v.WhichOneof("value") != "double_value"
          } == {"display_name", "store_session_info"}
  with open(launcher.object_path(recorded[("ConvergenceEvaluator", "ui_report")]["uri"])) as f:
    page = f.read()
  assert page.startswith("<!DOCTYPE html>") and "Blessed" in page and "<svg" in page
  # The run's ML Metadata, as the cluster's holds it, read by `tfx-parallel metrics`.
  from tfx_parallel.pipeline import metrics_report  # pylint: disable=g-import-not-at-top
  [row] = metrics_report.find_runs(launcher.metadata.store)
  assert (row.pipeline, row.run, row.metrics_id) == ("tfx-parallel-fixture", "run-1",
                                                     recorded[("ConvergenceEvaluator",
                                                               "metrics")]["id"])
  assert row.properties["convergence_state"] == "converged"
  assert row.properties["blessed"] == 1 and isinstance(row.properties["replicas"], int)
  assert os.path.isfile(os.path.join(launcher.object_path(blessing["uri"]), "BLESSED"))

  # Each execution's INPUT events name the artifacts its driver resolved (client.go
  # 2.17.0:740-751), so ML Metadata links the trainer to the Examples it read.
  store = launcher.metadata.store
  for task, executor_input in launcher.executor_inputs.items():
    [execution] = [e for e in store.get_executions()
                   if e.custom_properties["task_name"].string_value == task]
    inputs = sorted((e.path.steps[0].key, e.artifact_id)
                    for e in store.get_events_by_execution_ids([execution.id])
                    if e.type == e.INPUT)
    assert inputs == sorted((key, int(a["name"])) for key, artifacts in
                            executor_input["inputs"]["artifacts"].items()
                            for a in artifacts["artifacts"]), task
  assert ("examples", examples["id"]) in [
      (e.path.steps[0].key, e.artifact_id) for e in store.get_events_by_execution_ids(
          [x.id for x in store.get_executions()
           if x.custom_properties["task_name"].string_value == "DistributedTrainer"])
      if e.type == e.INPUT]

  for task in order:  # The launcher's log artifact, recorded beside TFX's outputs.
    logs = recorded.get((task, EXECUTOR_LOGS))
    assert (logs is not None) == publish_logs, task
    if logs:
      assert logs["uri"].endswith("/executor-logs-0")
      with open(launcher.object_path(logs["uri"])) as f:
        assert "Executor output written to" in f.read(), task

  def tree_bytes(uri):
    path = launcher.object_path(uri)
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path)
               for n in names)

  # launcher_v2.go downloadArtifacts: each input in full, whatever the step reads.
  for task in ("DistributedTrainer", "ConvergenceEvaluator"):
    inputs = launcher.executor_inputs[task]["inputs"]["artifacts"].values()
    assert launcher.downloaded[task] == sum(tree_bytes(a["artifacts"][0]["uri"])
                                            for a in inputs), task
  # The evaluator reads only its split: ExampleGen's one-split output (split_outputs.py).
  eval_examples = recorded[("PartitionedExampleGen", "eval_examples")]
  evaluator_inputs = launcher.executor_inputs["ConvergenceEvaluator"]["inputs"]["artifacts"]
  assert evaluator_inputs["examples"]["artifacts"][0]["uri"] == eval_examples["uri"]
  assert os.listdir(launcher.object_path(eval_examples["uri"])) == ["Split-eval"]
  assert json.loads(eval_examples["custom_properties"]["split_names"]) == ["eval"]
  for name in ("label_key", "true_bias", "true_weights"):
    assert eval_examples["custom_properties"][name] == examples["custom_properties"][name]
  assert tree_bytes(eval_examples["uri"]) == tree_bytes(examples["uri"] + "/Split-eval")
  assert tree_bytes(eval_examples["uri"]) < tree_bytes(examples["uri"]) / 2

  first = copy.deepcopy(launcher.mlmd)
  assert launcher.run() == order and launcher.cached_tasks == order  # Nothing runs again,
  assert launcher.mlmd == first  # the recorded outputs are reused.


def test_placement_flag_is_consumed_not_passed_to_beam():
  args, beam_args = entrypoint._parse([  # pylint: disable=protected-access
      "--executor_class_path", "x.Y", "--json_serialized_invocation_args", "{}",
      "--placement", '{"accelerator": null}', "--runner=DirectRunner"])
  assert args.placement == '{"accelerator": null}' and beam_args == ["--runner=DirectRunner"]


# --- No stale Examples from the cache (kubeflow/cache.py). ------------------------------

def _csv_config(pattern):
  data = _small_config()
  data["pipeline"]["example_gen"] = {"source": pattern, "label": "y"}
  return data


def _write_csv(path, rows):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text("x,y\n" + "".join(f"{i},{2 * i + 1}\n" for i in range(rows)))


def test_a_csv_ingest_is_never_cached_and_compile_says_why(tmp_path, capsys, package):
  """`tfx-parallel compile` turns KFP caching off for the file ExampleGen's task (the
  others keep it) and says why; the fingerprint the driver would look up does not change
  with the file, which is why it must be off."""
  import argparse  # pylint: disable=g-import-not-at-top
  import yaml  # pylint: disable=g-import-not-at-top
  from tfx_parallel.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  from tfx_parallel.kubeflow.package import Package  # pylint: disable=g-import-not-at-top
  csv = tmp_path / "data" / "train.csv"
  _write_csv(csv, 5)
  config_path = tmp_path / "kubeflow.yaml"
  config_path.write_text(yaml.safe_dump(_csv_config(str(tmp_path / "data" / "*.csv"))))
  output = tmp_path / "pipeline.yaml"
  assert compiler.run(argparse.Namespace(config=str(config_path), output=str(output),
                                         target="kfp")) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[1:] == ["tfx-parallel compile: note: PartitionedExampleGen: reads input files, and the KFP cache key does "
                       "not cover them (a changed file at the same path would be served "
                       'stale): caching off for this step (docs/kubeflow.md, "Caching").'], lines
  documents = list(yaml.safe_load_all(output.read_text()))
  compiled = Package(pipeline_spec=documents[0],
                     platform_spec=documents[1] if len(documents) > 1 else {})
  tasks = compiled.pipeline_spec["root"]["dag"]["tasks"]
  assert {name: task["cachingOptions"].get("enableCache", False)
          for name, task in tasks.items()} == {"PartitionedExampleGen": False,
                                               "DistributedTrainer": True,
                                               "ConvergenceEvaluator": True}
  before = _fingerprints(None, package=compiled)["PartitionedExampleGen"]
  _write_csv(csv, 7)  # Same path, other rows.
  assert _fingerprints(None, package=compiled)["PartitionedExampleGen"] == before
  # Synthetic rows are a function of the config: cached as before.
  assert all(task["cachingOptions"]["enableCache"]
             for task in package["root"]["dag"]["tasks"].values())


@pytest.mark.slow
def test_a_changed_csv_at_the_same_path_gives_new_examples_on_kfp(tmp_path):
  """The compiled ingest runs twice through the launcher stand-in with the file changed
  in between: the second run is not served from the cache and counts the new rows."""
  csv = tmp_path / "data" / "train.csv"
  _write_csv(csv, 40)
  package = compile_mapping(_csv_config(str(tmp_path / "data" / "*.csv"))).pipeline_spec
  launcher = Launcher(package, str(tmp_path / "kfp"), PIPELINE_ROOT, publish_logs=False)
  counts, fingerprints = [], []
  for run, rows in (("run-1", 40), ("run-2", 60)):
    _write_csv(csv, rows)
    launcher.new_run(run)
    launcher.run_task("PartitionedExampleGen")
    fingerprints.append(launcher.fingerprints["PartitionedExampleGen"])
    examples = launcher.mlmd["PartitionedExampleGen"]["examples"]
    counts.append(sum(json.loads(examples["custom_properties"]["row_counts"]).values()))
  assert launcher.cached_tasks == [] and counts == [40, 60]
  assert fingerprints[0] == fingerprints[1]  # With caching on, the lookup would have hit.


# --- Preemption: a retried trainer resumes from its checkpoints on a volume. -----------

_CHECKPOINT_CLAIM, _CHECKPOINT_MOUNT = "trainer-checkpoints", "/mnt/checkpoints"


def _committed_checkpoints(workdir):
  """Committed checkpoint state files on the emulated claim (checkpoint.py's `checkpoint`)."""
  found = []
  for directory, _, files in os.walk(os.path.join(workdir, "pvc", _CHECKPOINT_CLAIM)):
    if "checkpoint" in files and os.path.basename(os.path.dirname(directory)) == "_checkpoints":
      found.append(os.path.join(directory, "checkpoint"))
  return found


def _history(launcher):
  with open(os.path.join(launcher.object_path(
      launcher.mlmd["DistributedTrainer"]["history"]["uri"]), "history.json")) as f:
    return json.load(f)


def _preemptible_config():
  data = _small_config()
  data["pipeline"]["trainer"].update({"epochs": 12, "checkpoint_every": 40, "log_every": 40})
  data["components"]["DistributedTrainer"] = {
      "pvc_mounts": {_CHECKPOINT_CLAIM: _CHECKPOINT_MOUNT},
      "checkpoint_volume": _CHECKPOINT_MOUNT, "retry": {"max_retry_count": 1}}
  return data


def test_retry_policy_and_checkpoint_volume_are_compiled():
  package = compile_mapping(_preemptible_config())
  tasks = package.pipeline_spec["root"]["dag"]["tasks"]
  assert tasks["DistributedTrainer"]["retryPolicy"] == {
      "maxRetryCount": 1, "backoffDuration": "60s", "backoffFactor": 2.0,
      "backoffMaxDuration": "604800s"}
  assert tasks["PartitionedExampleGen"]["retryPolicy"]["maxRetryCount"] == 2  # The default.
  env = {e["name"]: e["value"] for e in package.pipeline_spec["deploymentSpec"]["executors"][
      "DistributedTrainer_executor"]["container"]["env"]}
  assert env["TFX_PARALLEL_CHECKPOINT_VOLUME"] == _CHECKPOINT_MOUNT
  assert package.notes == ()
  # Without a volume, the default store keeps them (minio:// as s3://, s3://, gs://); on
  # another root compile says that a retry starts again.
  data = _preemptible_config()
  del data["components"]["DistributedTrainer"]["checkpoint_volume"]
  for root in ("minio://mlpipeline/v2/artifacts", "s3://b/root", "gs://b/root"):
    data["pipeline_root"] = root
    assert compile_mapping(data).notes == (), root
  data["pipeline_root"] = "oci://registry/root"
  notes = compile_mapping(data).notes
  assert len(notes) == 1 and "trains again from step 0" in notes[0], notes
  from tfx_parallel.components.common.config_util import ConfigError  # pylint: disable=g-import-not-at-top
  data = _preemptible_config()
  data["components"]["default"]["checkpoint_volume"] = "/mnt/checkpoints"
  data["components"]["default"]["pvc_mounts"] = {"c": "/mnt/checkpoints"}
  with pytest.raises(ConfigError, match=r"components.default.checkpoint_volume: only "
                                        r"DistributedTrainer writes checkpoints"):
    compile_mapping(data)
  data = _preemptible_config()
  data["components"]["DistributedTrainer"]["checkpoint_volume"] = "/elsewhere"
  with pytest.raises(ConfigError, match=r"components.DistributedTrainer.checkpoint_volume: "
                                        r"must be an absolute path at or below one of "
                                        r"pvc_mounts \['/mnt/checkpoints'\]"):
    compile_mapping(data)
  data = _preemptible_config()
  data["components"]["DistributedTrainer"]["env"] = {"TFX_PARALLEL_TFJOB_IMAGE": "i"}
  with pytest.raises(ConfigError, match=r"the TFJob's replicas .* do not mount"):
    compile_mapping(data)
  data = _preemptible_config()
  data["components"]["DistributedTrainer"]["retry"] = {"backoff_factor": 1.5}
  with pytest.raises(ConfigError, match=r"components.DistributedTrainer.retry.backoff_factor: "
                                        r"must be an integer >= 1. Received: 1.5"):
    compile_mapping(data)


def test_checkpoint_root_is_keyed_by_run_and_task():
  executor_input = {"outputs": {"artifacts": {
      "model": {"artifacts": [{"uri": "minio://b/root/pipe/run-7/Trainer/salt/model"}]},
      EXECUTOR_LOGS: {"artifacts": [{"uri": "minio://b/root/pipe/run-7/Trainer/salt/x",
                                     "type": {"schemaTitle": "system.Artifact"}}]}}}}
  volume = {"TFX_PARALLEL_CHECKPOINT_VOLUME": "/mnt/ck", "TFX_PARALLEL_MOUNT_ROOT": "/pod"}
  assert entrypoint.checkpoint_root(executor_input, volume) == (
      "/pod/mnt/ck/minio/b/root/pipe/run-7/Trainer")
  # minio:// as TensorFlow opens it (tensorflow-io's s3://), the task's root.
  assert entrypoint.checkpoint_root(executor_input, {}) == "s3://b/root/pipe/run-7/Trainer"
  oci = json.loads(json.dumps(executor_input).replace("minio://", "oci://"))
  assert entrypoint.checkpoint_root(oci, {}) is None  # No durable place.
  gcs = json.loads(json.dumps(executor_input).replace("minio://", "gs://"))
  assert entrypoint.checkpoint_root(gcs, {}) == "gs://b/root/pipe/run-7/Trainer"
  # The trainer executor keeps its checkpoints under that root, else beside its model.
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  root = executor.checkpoint_root({executor.CHECKPOINT_ROOT_ENV: "gs://b/run-7/Trainer"})
  assert executor.checkpoint_dir("/pod/gcs/b/run-7/Trainer/s/model", "/ex", "{}",
                                 root=root).startswith("gs://b/run-7/Trainer/_checkpoints/")
  assert executor.checkpoint_dir("/pod/gcs/b/run-7/Trainer/s/model", "/ex", "{}",
                                 root=executor.checkpoint_root({})).startswith(
                                     "/pod/gcs/b/run-7/Trainer/_checkpoints/")


def test_up_to_2_16_a_download_lists_by_raw_prefix_and_takes_siblings_along(tmp_path):
  """KFP 2.16.0's DownloadBlob downloads every key under the raw prefix (object_store.go
  2.16.0:127-154), so reading `examples` also takes the sibling output `examples_ref`,
  written at filepath.Rel's "../examples_ref"; 2.17.0 takes only keys under "examples/"
  (isBlobKeyUnderPrefix, 2.17.0:171-174)."""
  package = {"pipelineInfo": {"name": "p"}, "root": {"dag": {"tasks": {}}}}
  sizes = {"under": None, "raw": None}
  for mode in sizes:
    launcher = Launcher(package, str(tmp_path / mode), PIPELINE_ROOT, download_prefix=mode)
    task = f"{PIPELINE_ROOT}/p/run-1/Gen/salt"
    for rel, data in (("examples/Split-train/data", b"x" * 100),
                      ("examples_ref/FILES_AT", b"y" * 7),
                      ("eval_examples/Split-eval/data", b"z" * 30)):
      path = os.path.join(launcher.object_path(f"{task}/{rel}"))
      os.makedirs(os.path.dirname(path), exist_ok=True)
      with open(path, "wb") as f:
        f.write(data)
    local = str(tmp_path / mode / "pod" / "minio" / "examples")
    sizes[mode] = launcher.download(f"{task}/examples", local)
    assert os.path.isfile(os.path.join(local, "Split-train", "data"))
    assert os.path.isfile(os.path.join(os.path.dirname(local), "examples_ref", "FILES_AT")) == (
        mode == "raw")
    assert launcher.download(f"{task}/examples_ref", str(tmp_path / mode / "ref")) == 7
  assert sizes == {"under": 100, "raw": 107}
  with pytest.raises(ValueError, match="download_prefix must be one of"):
    Launcher(package, str(tmp_path / "x"), PIPELINE_ROOT, download_prefix="prefix")


def test_compile_prints_the_note_where_no_durable_place_exists(tmp_path, capsys):
  """The note of a retried trainer that would start again from step 0 reaches the
  console of `tfx-parallel compile` (issue #48 item 5)."""
  import argparse  # pylint: disable=g-import-not-at-top
  import yaml  # pylint: disable=g-import-not-at-top
  from tfx_parallel.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  data = _preemptible_config()
  del data["components"]["DistributedTrainer"]["checkpoint_volume"]
  data["pipeline_root"] = "oci://registry/root"
  config_path = tmp_path / "kubeflow.yaml"
  config_path.write_text(yaml.safe_dump(data))
  assert compiler.run(argparse.Namespace(config=str(config_path),
                                         output=str(tmp_path / "p.yaml"), target="kfp")) == 0
  err = capsys.readouterr().err
  assert ("tfx-parallel compile: note: components.DistributedTrainer.checkpoint_volume is "
          "not set and pipeline_root oci://registry/root is not one of gs://, s3://, "
          "minio://") in err, err
  assert "trains again from step 0" in err


_CHECK_VOLUME = """
import os, sys
from tfx_parallel.kubeflow import entrypoint  # As root: the interpreter is under /root.
os.setgid(1000); os.setuid(1000)  # The image's user, as on a pod without fsGroup.
try:
  entrypoint.check_volume(sys.argv[1], {"TFX_PARALLEL_CHECKPOINT_VOLUME": "/mnt/ck",
                                        "TFX_PARALLEL_MOUNT_ROOT": sys.argv[2]})
  print("OK")
except entrypoint.EntrypointError as e:
  print("ERROR", e)
"""


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to own the volume and drop to uid 1000")
def test_a_checkpoint_volume_the_step_cannot_write_fails_before_training_naming_the_fix():
  """A fresh claim's root is root:root 0755 (KFP sets no fsGroup): the step's user
  (uid 1000) cannot write it. The entry point says so, with the fix, before training;
  after the fix (`chmod 1777`) the same check passes."""
  import tempfile  # pylint: disable=g-import-not-at-top
  pod = tempfile.mkdtemp(prefix="tfx-parallel-pod-")
  try:
    os.chmod(pod, 0o755)
    volume = os.path.join(pod, "mnt", "ck")
    os.makedirs(volume, mode=0o755)
    os.chmod(os.path.join(pod, "mnt"), 0o755)
    os.chmod(volume, 0o755)  # root:root 0755, as a new claim's root usually is.
    root = os.path.join(volume, "minio", "b", "pipe", "run-1", "DistributedTrainer")

    def check():
      return subprocess.run([sys.executable, "-c", _CHECK_VOLUME, root, pod],
                            capture_output=True, text=True, timeout=120).stdout.strip()
    said = check()
    assert said.startswith("ERROR checkpoint_volume /mnt/ck ("), said
    assert "owned by uid 0 gid 0, mode 755) is not writable by this step's user (uid 1000" in said
    assert "fsGroup" in said and "StorageClass" in said and "chmod 1777" in said
    os.chmod(volume, 0o1777)  # The fix.
    assert check() == "OK"
  finally:
    shutil.rmtree(pod)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to own the claim and drop to uid 1000")
def test_the_stand_in_runs_the_step_as_the_images_user_on_a_root_owned_claim():
  """Issue #48 item 8: the launcher stand-in's claims are root:root 0755, as a new
  volume's root is, and its step runs as the image's user (uid 1000), so a step that
  writes the claim fails as it would on the cluster. The trainer step alone (its input
  artifacts left out: it stops at the volume check, before TFX) fails once, naming the
  fix; after `chmod 1777` (what an fsGroup or a StorageClass gives), it gets past it."""
  import tempfile  # pylint: disable=g-import-not-at-top
  from kubeflow_launcher import Launcher, LauncherError  # pylint: disable=g-import-not-at-top
  package = compile_mapping(_preemptible_config())
  spec = copy.deepcopy(package.pipeline_spec)
  task = spec["root"]["dag"]["tasks"]["DistributedTrainer"]
  task.get("inputs", {}).pop("artifacts", None)
  task.pop("dependentTasks", None)
  spec["root"]["dag"]["tasks"] = {"DistributedTrainer": task}
  spec["components"][task["componentRef"]["name"]]["inputDefinitions"].pop("artifacts", None)
  workdir = tempfile.mkdtemp(prefix="tfx-parallel-launcher-")  # pytest's tmp is 0700.
  try:
    os.chmod(workdir, 0o755)
    launcher = Launcher(spec, workdir, PIPELINE_ROOT, platform_spec=package.platform_spec,
                        retries=False, run_as=1000)

    def attempt():
      with pytest.raises(LauncherError) as failed:  # No Examples: TFX fails after the check.
        launcher.run_task("DistributedTrainer")
      return str(failed.value)
    said = attempt()
    assert "checkpoint_volume /mnt/checkpoints (" in said and "uid 1000" in said, said[-3000:]
    assert "owned by uid 0 gid 0, mode 755) is not writable" in said, said[-3000:]
    [claim] = os.listdir(os.path.join(workdir, "pvc"))
    os.chmod(os.path.join(workdir, "pvc", claim), 0o1777)  # The fix.
    attempt()
    with open(os.path.join(workdir, "DistributedTrainer.log")) as f:
      said = f.read()
    assert "is not writable" not in said, said[-3000:]
    assert re.search(r"Checkpoints: \S+/mnt/checkpoints/minio/mlpipeline/", said), said[-3000:]
    made = os.path.join(workdir, "pvc", claim, "minio")  # By the step, as uid 1000.
    assert os.stat(made).st_uid == 1000
  finally:
    shutil.rmtree(workdir)


@pytest.mark.slow
def test_a_preempted_trainer_resumes_on_retry_and_ends_like_an_uninterrupted_one(tmp_path):
  """The trainer's pod is SIGKILLed (with its training process) once a checkpoint is
  committed; KFP's retry runs it in a fresh pod with the same ExecutorInput; it resumes
  from the volume and ends within tolerance of an uninterrupted run of the same data."""
  package = compile_mapping(_preemptible_config())
  whole = Launcher(package.pipeline_spec, str(tmp_path / "whole"), PIPELINE_ROOT,
                   platform_spec=package.platform_spec)
  whole.run_task("PartitionedExampleGen")
  whole.run_task("DistributedTrainer")
  assert whole.attempts["DistributedTrainer"] == [0]

  killed = []

  def preempt(task, attempt, pod):
    if task == "DistributedTrainer" and attempt == 0 and _committed_checkpoints(pod_root):
      killed.append(attempt)
      return True
    return False

  pod_root = str(tmp_path / "preempted")
  preempted = Launcher(package.pipeline_spec, pod_root, PIPELINE_ROOT, run_id="run-2",
                       platform_spec=package.platform_spec, interrupt=preempt)
  # One ML Metadata for both runs, as KFP has one store: the driver's INPUT event
  # (create_execution) names the Examples artifact by the id the first run recorded.
  os.makedirs(pod_root, exist_ok=True)
  shutil.copyfile(whole.metadata.path, os.path.join(pod_root, "mlmd.sqlite"))
  preempted.mlmd["PartitionedExampleGen"] = whole.mlmd["PartitionedExampleGen"]
  shutil.copytree(whole.bucket, preempted.bucket)  # The Examples, in the object store.
  preempted.run_task("DistributedTrainer")
  assert killed and preempted.attempts["DistributedTrainer"] == [-9, 0]
  with open(tmp_path / "preempted" / "DistributedTrainer-retry-1.log") as f:
    log = f.read()
  checkpoints = f"{_CHECKPOINT_MOUNT}/minio/mlpipeline/v2/artifacts/tfx-parallel-fixture/run-2/"
  assert f"[trainer] checkpoints: " in log and checkpoints in log, log[-3000:]
  resumed = _history(preempted)["resumed_from_step"]
  total = _history(whole)["total_steps"]
  assert 0 < resumed < total and f"at step {resumed}" in log
  assert _history(preempted)["total_steps"] == total
  assert not _committed_checkpoints(pod_root)  # Cleared once the run finished.
  # Every logged loss after the resume, up to the last, follows the uninterrupted run's:
  # within 5% (measured: step 80 1.6837e-2 vs 1.6838e-2) or, at the data's noise floor
  # (noise 0.01: a mean squared error near 1e-4), within 2e-5.
  records = [{r["step"]: r["loss"] for r in _history(l)["records"]} for l in (whole, preempted)]
  assert sorted(records[1]) == sorted(records[0]) and max(records[0]) == total
  for step in sorted(s for s in records[0] if s > resumed):
    assert abs(records[1][step] - records[0][step]) <= 0.05 * records[0][step] + 2e-5, (
        step, records)
