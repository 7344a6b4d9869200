"""`tfx-parallel compile`: config validation, resources, placement, golden package."""

import argparse
import copy
import difflib
import json
import os
import re

import pytest
import yaml

from kubeflow_util import (GOLDEN_PACKAGE, REPO, compile_mapping, executors, fixture_mapping,
                           normalize, platform_executors)
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.kubeflow import compiler, resources
from tfx_parallel.kubeflow import config as config_lib

TRAINER = "DistributedTrainer_executor"
EXAMPLE_GEN = "PartitionedExampleGen_executor"
EVALUATOR = "ConvergenceEvaluator_executor"


@pytest.fixture(scope="module")
def documents():
  return compile_mapping(fixture_mapping()).documents()


def _with(path, value, data=None):
  """The fixture mapping with the dotted `path` set to `value`."""
  data = copy.deepcopy(data or fixture_mapping())
  *parents, last = path.split(".")
  node = data
  for key in parents:
    node = node.setdefault(key, {})
  node[last] = value
  return data


# --- Config validation: every error names the key. ---------------------------------

@pytest.mark.parametrize("path,value,key", [
    ("components.DistributedTrainer.cpu_limit", "4 cores",
     "components.DistributedTrainer.cpu_limit"),
    ("components.default.memory_request", "1GB", "components.default.memory_request"),
    ("components.ConvergenceEvaluator.memory_request", "8G",
     "components.ConvergenceEvaluator.memory_request"),  # above the default limit 2G
    ("components.DistributedTrainer.accelerator", {"type": "nvidia.com/gpu", "count": 0},
     "components.DistributedTrainer.accelerator.count"),
    ("components.DistributedTrainer.accelerator", {"kind": "gpu"},
     "components.DistributedTrainer.accelerator.kind"),
    ("components.DistributedTrainer.tolerations", [{"key": "a", "operator": "Maybe"}],
     "components.DistributedTrainer.tolerations[0].operator"),
    ("components.DistributedTrainer.tolerations",
     [{"key": "a", "operator": "Exists", "value": "v"}],
     "components.DistributedTrainer.tolerations[0].value"),
    ("components.DistributedTrainer.tolerations",
     [{"key": "a", "effect": "NoSchedule", "toleration_seconds": 5, "value": "x"}],
     "components.DistributedTrainer.tolerations[0].toleration_seconds"),
    ("components.DistributedTrainer.node_selector", ["gpu"],
     "components.DistributedTrainer.node_selector"),
    ("components.default.gpus", 1, "components.default.gpus"),
    ("components.default.image", "", "components.default.image"),
    ("components.PartitionedExampleGen.beam_pipeline_args", ["runner=Flink"],
     "components.PartitionedExampleGen.beam_pipeline_args"),
    ("components.DistributedTrainer.env", {"1BAD": "x"}, "components.DistributedTrainer.env.1BAD"),
    ("components.DistributedTrainer.pvc_mounts", {"CUDA_cache": "/var/cache/cuda"},
     "components.DistributedTrainer.pvc_mounts.CUDA_cache"),
    ("components.DistributedTrainer.pvc_mounts", {"cuda-cache": "var/cache/cuda"},
     "components.DistributedTrainer.pvc_mounts.cuda-cache"),
    ("components.DistributedTrainer.pvc_mounts", {"a": "/cache", "b": "/cache"},
     "components.DistributedTrainer.pvc_mounts"),
    ("components.DistributedTrainer.pvc_mounts", ["cuda-cache"],
     "components.DistributedTrainer.pvc_mounts"),
    ("pipeline.trainer.layout", "ring", "pipeline.trainer.layout"),
    ("pipeline.example_gen.rows", 0, "pipeline.example_gen.rows"),
    ("pipeline.pipeline_name", "tfx_parallel", "pipeline.pipeline_name"),
    ("pipeline_root", "/tmp/pipelines", "pipeline_root"),
    ("pipeline_root", "runs/pipelines", "pipeline_root"),
    ("image", "x", "image"),
])
def test_config_errors_name_the_key(path, value, key):
  with pytest.raises(ConfigError) as e:
    config_lib.from_mapping(_with(path, value))
  assert e.value.key == key, str(e.value)
  assert str(e.value).startswith(key + ": ")


@pytest.mark.parametrize("path,value,key", [
    ("components.Trainer", {"cpu_limit": "2"}, "components.Trainer"),
    ("components.DistributedTrainer.beam_pipeline_args", ["--runner=FlinkRunner"],
     "components.DistributedTrainer.beam_pipeline_args"),
])
def test_errors_that_need_the_pipeline_name_the_key(path, value, key):
  with pytest.raises(ConfigError) as e:
    compile_mapping(_with(path, value))
  assert e.value.key == key, str(e.value)


def test_load_names_the_file(tmp_path):
  path = tmp_path / "kubeflow.yaml"
  path.write_text(yaml.safe_dump(_with("components.default.cpu_limit", "lots")))
  with pytest.raises(ConfigError, match=r"components\.default\.cpu_limit: .*kubeflow\.yaml"):
    config_lib.load(str(path))


def test_component_sections_override_the_default_key_by_key():
  config = config_lib.from_mapping(fixture_mapping())
  trainer = config.placement("DistributedTrainer")
  example_gen = config.placement("PartitionedExampleGen")
  assert trainer.cpu_limit == "8" and trainer.image.endswith("gpu:fixture")
  assert example_gen.cpu_limit == "1" and example_gen.image.endswith("tfx-parallel:fixture")
  assert config.placement("ConvergenceEvaluator") == config.components["default"]
  assert config.pipeline.trainer.layout == "mirrored" and config.pipeline.trainer.devices == 0


def test_default_config_puts_the_trainer_on_a_gpu_node_with_mirrored():
  config = config_lib.load(compiler.DEFAULT_CONFIG)
  trainer = config.placement("DistributedTrainer")
  assert trainer.accelerator.type == "nvidia.com/gpu" and trainer.accelerator.count >= 1
  assert "cloud.google.com/gke-accelerator" in trainer.node_selector
  assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in trainer.tolerations)
  assert (config.pipeline.trainer.layout, config.pipeline.trainer.devices) == ("mirrored", 0)
  for name in ("PartitionedExampleGen", "ConvergenceEvaluator"):
    placement = config.placement(name)
    assert placement.accelerator is None and not placement.node_selector
    assert not placement.tolerations


# --- Resources and placement in the compiled package. ------------------------------

def test_quantity_conversions_match_kfp():
  # kfp.compiler.compiler_utils._cpu_to_float / _memory_to_float.
  assert resources.cpu_to_float("500m") == 0.5 and resources.cpu_to_float("8") == 8.0
  assert resources.memory_to_gb("16G") == 16.0
  assert resources.memory_to_gb("1Gi") == pytest.approx(1.073741824)
  assert resources.memory_to_gb("512Mi") == pytest.approx(0.536870912)
  assert resources.memory_to_gb("2000000000") == 2.0


def test_every_executor_has_both_resource_generations_and_env(documents):
  assert set(executors(documents)) == {TRAINER, EXAMPLE_GEN, EVALUATOR}
  for label, executor in executors(documents).items():
    res = executor["container"]["resources"]
    for legacy, current in (("cpuLimit", "resourceCpuLimit"), ("cpuRequest", "resourceCpuRequest"),
                            ("memoryLimit", "resourceMemoryLimit"),
                            ("memoryRequest", "resourceMemoryRequest")):
      assert isinstance(res[legacy], float), (label, legacy)
      assert isinstance(res[current], str), (label, current)
    env = {e["name"]: e["value"] for e in executor["container"]["env"]}
    assert env["TF_USE_LEGACY_KERAS"] == "1", label
  example_gen = executors(documents)[EXAMPLE_GEN]["container"]["resources"]
  assert example_gen["cpuRequest"] == 0.5 and example_gen["resourceCpuRequest"] == "500m"
  assert example_gen["memoryRequest"] == pytest.approx(1.073741824)
  assert example_gen["resourceMemoryLimit"] == "2G" and "accelerator" not in example_gen


def test_trainer_has_gpus_pvc_mount_node_selector_and_tolerations(documents):
  container = executors(documents)[TRAINER]["container"]
  assert container["resources"]["accelerator"] == {
      "type": "nvidia.com/gpu", "count": "2", "resourceType": "nvidia.com/gpu",
      "resourceCount": "2"}
  assert container["resources"]["resourceMemoryLimit"] == "32Gi"
  assert container["image"] == "registry.example.com/tfx-parallel-gpu:fixture"
  assert {"name": "NCCL_DEBUG", "value": "WARN"} in container["env"]
  assert platform_executors(documents) == {TRAINER: {
      # The deprecated `constant` only: backends 2.1.0-2.4.0 reject pvcNameParameter
      # (tests/test_kubeflow_kfp.py parses it with each backend's pinned proto).
      "pvcMount": [{"constant": "cuda-jit-cache", "mountPath": "/var/cache/cuda"}],
      "nodeSelector": {"labels": {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
                                  "pool": "gpu"}},
      "tolerations": [
          {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
          {"key": "preemptible", "operator": "Equal", "value": "true", "effect": "NoExecute",
           "tolerationSeconds": "300"}]}}


def test_beam_args_only_on_example_gen(documents):
  args = executors(documents)[EXAMPLE_GEN]["container"]["args"]
  assert args[-4:] == ["--runner=DataflowRunner", "--project=fixture-project",
                       "--region=europe-west4", "--temp_location=gs://fixture-bucket/tmp"]
  for label in (TRAINER, EVALUATOR):
    assert not any(a.startswith("--runner") for a in executors(documents)[label]["container"]["args"])


def test_bare_pipeline_spec_with_pipeline_root_from_config(documents):
  spec = documents[0]
  assert "pipelineSpec" not in spec and "runtimeConfig" not in spec  # not a PipelineJob
  assert spec["defaultPipelineRoot"] == "gs://fixture-bucket/tfx-parallel"
  assert spec["pipelineInfo"]["name"] == "tfx-parallel-fixture"
  assert spec["schemaVersion"] == "2.1.0"  # The only version the KFP API server accepts.
  trainer_config = spec["root"]["dag"]["tasks"]["DistributedTrainer"]["inputs"]["parameters"]
  assert '"layout": "mirrored"' in trainer_config["config"]["runtimeValue"]["constant"]
  assert "constantValue" not in yaml.safe_dump(spec)  # The KFP driver resolves `constant` only.


def test_every_step_runs_our_entry_point_with_its_inputs_spec(documents):
  """Our entry point adapts the open-source launcher's ExecutorInput (kubeflow/entrypoint.py);
  the inputs spec it reads carries the same (importable) titles as the component."""
  spec = documents[0]
  for task in spec["root"]["dag"]["tasks"].values():
    component = spec["components"][task["componentRef"]["name"]]
    container = executors(documents)[component["executorLabel"]]["container"]
    assert container["command"] == ["python", "-m", "tfx_parallel.kubeflow.entrypoint"]
    args = container["args"]
    inputs_spec = json.loads(args[args.index("--json_serialized_inputs_spec_args") + 1])
    assert inputs_spec == component["inputDefinitions"]
    placement = json.loads(args[args.index("--placement") + 1])  # For KFP's cache key.
    assert set(placement) == {"accelerator", "node_selector", "env"}
    assert placement["env"]["TF_USE_LEGACY_KERAS"] == "1"
  trainer = json.loads(executors(documents)[TRAINER]["container"]["args"][
      executors(documents)[TRAINER]["container"]["args"].index("--placement") + 1])
  assert trainer["accelerator"] == {"type": "nvidia.com/gpu", "count": 2}
  assert trainer["env"]["NCCL_DEBUG"] == "WARN"


def test_custom_artifact_types_are_importable_and_untouched(documents):
  from tfx.utils import import_utils  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import artifacts  # pylint: disable=g-import-not-at-top
  titles = set()
  for component in documents[0]["components"].values():
    for side in ("inputDefinitions", "outputDefinitions"):
      for artifact in component.get(side, {}).get("artifacts", {}).values():
        if "schemaTitle" in artifact["artifactType"]:  # KFP's own (kubeflow/ui_outputs.py).
          titles.add(artifact["artifactType"]["schemaTitle"])
        else:
          titles.add(yaml.safe_load(artifact["artifactType"]["instanceSchema"])["title"])
  custom = {t for t in titles if not t.startswith(("tfx.", "system."))}
  assert {t for t in titles if t.startswith("system.")} == {
      "system.Metrics", "system.ClassificationMetrics", "system.HTML"}
  assert custom == {"tfx_parallel.components.common.artifacts.TrainingHistory",
                    "tfx_parallel.components.common.artifacts.ConvergenceMetrics"}
  for title in custom:  # What the TFX entrypoint in the pod does with the title.
    assert import_utils.import_class_by_path(title).__name__ == title.rsplit(".", 1)[1]
  # Compiling must not leave the ML Metadata type names changed.
  assert artifacts.TrainingHistory.TYPE_NAME == "TrainingHistory"
  assert artifacts.ConvergenceMetrics.TYPE_NAME == "ConvergenceMetrics"


# --- No credentials, no local paths. ------------------------------------------------

_LOCAL_PATH = re.compile(r"(?<![\w.:/-])(/work|/root|/tmp|/home|/Users|/var/folders)(/|\b)")
_CREDENTIAL = re.compile(r"password|passwd|secret|token|private_key|BEGIN [A-Z ]*PRIVATE|"
                         r"AKIA[0-9A-Z]{16}|GOOGLE_APPLICATION_CREDENTIALS|credentials",
                         re.IGNORECASE)


def test_package_has_no_local_paths_or_credentials(documents):
  text = yaml.safe_dump_all(documents)
  for needle in {REPO, os.getcwd(), os.path.expanduser("~")} - {"/"}:
    assert needle not in text, needle
  assert not _LOCAL_PATH.search(text), _LOCAL_PATH.search(text).group(0)
  assert not _CREDENTIAL.search(text), _CREDENTIAL.search(text).group(0)


# --- The CLI front door and the golden package. -------------------------------------

def test_cli_writes_the_package(tmp_path, capsys):
  parser = argparse.ArgumentParser()
  compiler.add_arguments(parser)
  output = tmp_path / "out" / "pipeline.yaml"
  assert compiler.run(parser.parse_args(["--output", str(output)])) == 0
  with open(output) as f:
    docs = list(yaml.safe_load_all(f))
  assert len(docs) == 2 and docs[0]["defaultPipelineRoot"].startswith("gs://")
  assert "Wrote Kubeflow pipeline package" in capsys.readouterr().out

  bad = tmp_path / "bad.yaml"
  bad.write_text("pipeline_root: /local\n")
  assert compiler.run(parser.parse_args(["--config", str(bad), "--output",
                                         str(tmp_path / "x.yaml")])) == 2
  assert "pipeline_root" in capsys.readouterr().err
  assert not (tmp_path / "x.yaml").exists()


# Console lines `tfx-parallel compile` may print: its own, prefixed. Anything else (TF's
# C++ registration notes, google.api_core's FutureWarnings, TFX's absl warnings: 36 lines
# before issue 38) is noise and fails the test.
_COMPILE_LINE = re.compile(r"^(Wrote Kubeflow pipeline package |tfx-parallel compile: (warning|note): )")


def test_compile_is_quiet_and_warns_about_placeholders_and_local_paths(tmp_path):
  """The packaged default config, with a CSV of this machine as its data source: three
  warnings naming the YAML keys, the one line of the package, and nothing else."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  data = tmp_path / "rows.csv"
  data.write_text("x,y\n1,2\n")
  with open(compiler.DEFAULT_CONFIG) as f:
    mapping = yaml.safe_load(f)
  mapping["pipeline"]["example_gen"] = {"source": str(tmp_path / "*.csv"), "label": "y"}
  path = tmp_path / "kubeflow.yaml"
  path.write_text(yaml.safe_dump(mapping))
  proc = subprocess.run([sys.executable, "-m", "tfx_parallel.pipeline.cli", "compile",
                         "--config", str(path), "--output", str(tmp_path / "p.yaml")],
                        capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = (proc.stdout + proc.stderr).splitlines()
  noise = [line for line in lines if not _COMPILE_LINE.match(line)]
  assert not noise, f"{len(noise)} lines of noise:\n" + "\n".join(noise[:40])
  warnings = [line.split("warning: ", 1)[1] for line in lines if "warning: " in line]
  notes = [line for line in lines if "compile: note: " in line]
  assert len(warnings) == 3 and len(notes) == 1 and len(lines) == 5, lines
  assert "PartitionedExampleGen: reads input files" in notes[0]  # Its cache is off.
  assert warnings[0].startswith("pipeline_root 'gs://your-bucket/tfx-parallel' is the "
                                "placeholder")
  assert warnings[1].startswith("components.ConvergenceEvaluator.image, "
                                "components.DistributedTrainer.image, ")
  assert warnings[2].startswith(f"pipeline.example_gen.source '{tmp_path}/*.csv' matches 1 "
                                f"file(s) on this machine")


def test_a_config_of_ones_own_compiles_without_warnings(tmp_path):
  config = config_lib.from_mapping(fixture_mapping())
  assert compiler.warnings_of(config) == []
  for source in ("gs://b/data/*.csv", "/mnt/data/*.csv", "synthetic", "taxi"):
    changed = _with("pipeline.example_gen.source", source)
    assert compiler.warnings_of(config_lib.from_mapping(changed)) == [], source
  relative = config_lib.from_mapping(_with("pipeline.example_gen.source", "data/x.csv"))
  assert compiler.warnings_of(relative) == [
      "pipeline.example_gen.source 'data/x.csv' is relative to this machine's working "
      "directory; the pods read their own file system: use a bucket URI (gs://, s3://) or "
      "a path mounted in the pods (components.PartitionedExampleGen.pvc_mounts)"]


def test_compile_names_a_bad_pipeline_setting_by_its_yaml_path():
  with pytest.raises(ConfigError, match=r"^pipeline\.trainer\.epoch: unknown setting; close "
                                        r"matches: \['trainer\.epochs'"):
    config_lib.from_mapping(_with("pipeline.trainer.epoch", 3))
  with pytest.raises(ConfigError, match=r"^pipeline\.trainer\.epochs: must be an integer. "
                                        r"Received: pipeline\.trainer\.epochs: 'x'"):
    config_lib.from_mapping(_with("pipeline.trainer.epochs", "x"))


def test_golden_package(documents):
  """Regenerate with: UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_kubeflow.py -k golden"""
  actual = yaml.safe_dump_all(normalize(documents), sort_keys=True)
  if os.environ.get("UPDATE_GOLDEN"):
    with open(GOLDEN_PACKAGE, "w") as f:
      f.write("# Golden output of tests/golden/kubeflow_config.yaml (version fields "
              "stripped).\n# Regenerate: UPDATE_GOLDEN=1 .venv/bin/python -m pytest "
              "tests/test_kubeflow.py -k golden\n" + actual)
  with open(GOLDEN_PACKAGE) as f:
    expected_docs = list(yaml.safe_load_all(f))
  expected = yaml.safe_dump_all(expected_docs, sort_keys=True)
  diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                      "golden", "compiled", n=2))
  assert actual == expected, ("compiled package differs from tests/golden/"
                              "kubeflow_pipeline.yaml (regenerate with UPDATE_GOLDEN=1 if "
                              "intended):\n" + diff)


@pytest.mark.parametrize("change,needle", [
    (lambda s: s.update(schemaVersion="2.0.0"), "accepts only 2.1.0"),
    (lambda s: s["root"]["dag"]["tasks"]["DistributedTrainer"]["inputs"]["parameters"][
        "config"].update(runtimeValue={"constantValue": {"stringValue": "{}"}}),
     "DistributedTrainer parameter config: runtimeValue \\['constantValue'\\]"),
    (lambda s: s["deploymentSpec"]["executors"].update(
        latest_model_resolver={"resolver": {"outputArtifactQueries": {}}}),
     "executor latest_model_resolver is a resolver"),
])
def test_open_source_check_rejects_what_kfp_rejects(documents, change, needle):
  from tfx_parallel.kubeflow import package  # pylint: disable=g-import-not-at-top
  spec = copy.deepcopy(documents[0])
  package.check_open_source(spec)
  change(spec)
  with pytest.raises(ValueError, match=needle):
    package.check_open_source(spec)


def _vertex_mapping():
  data = fixture_mapping()
  trainer = data["components"]["DistributedTrainer"]
  del trainer["node_selector"], trainer["tolerations"], trainer["pvc_mounts"]
  trainer["accelerator"]["type"] = "NVIDIA_TESLA_T4"
  return data


@pytest.mark.parametrize("path,value,key", [
    ("components.DistributedTrainer.node_selector", {"pool": "gpu"},
     "components.DistributedTrainer.node_selector"),
    ("components.default.tolerations", [{"key": "a", "operator": "Exists"}],
     "components.DistributedTrainer.tolerations"),
    ("components.DistributedTrainer.accelerator", {"type": "nvidia.com/gpu", "count": 1},
     "components.DistributedTrainer.accelerator.type"),
    ("pipeline_root", "minio://mlpipeline/v2/artifacts", "pipeline_root"),
    ("components.DistributedTrainer.pvc_mounts", {"cuda-jit-cache": "/var/cache/cuda"},
     "components.DistributedTrainer.pvc_mounts"),
])
def test_vertex_target_rejects_what_vertex_cannot_use(path, value, key):
  config = config_lib.from_mapping(_with(path, value, _vertex_mapping()))
  with pytest.raises(ConfigError) as e:
    compiler.compile_package(config, target="vertex")
  assert e.value.key == key, str(e.value)


def test_vertex_target_writes_the_pipeline_spec_alone(tmp_path):
  path = tmp_path / "kubeflow.yaml"
  path.write_text(yaml.safe_dump(_vertex_mapping()))
  parser = argparse.ArgumentParser()
  compiler.add_arguments(parser)
  output = tmp_path / "vertex.yaml"
  assert compiler.run(parser.parse_args(["--config", str(path), "--output", str(output),
                                         "--target", "vertex"])) == 0
  with open(output) as f:
    docs = list(yaml.safe_load_all(f))
  assert len(docs) == 1 and docs[0]["schemaVersion"] == "2.1.0"
  trainer = executors(docs)["DistributedTrainer_executor"]["container"]["resources"]
  assert trainer["accelerator"]["type"] == "NVIDIA_TESLA_T4"
