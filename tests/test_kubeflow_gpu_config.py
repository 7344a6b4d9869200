"""kubeflow/gpu.yaml: the GPU config, and its commented multi-node variant, compile."""
import tfx_parallel.pipeline.tfenv  # noqa: F401  (before TFX/TF are imported)

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from kubeflow_util import REPO, executors, platform_executors
from tfx_parallel.kubeflow import compiler
from tfx_parallel.kubeflow import config as config_lib

GPU_CONFIG = os.path.join(REPO, "kubeflow", "gpu.yaml")
TRAINER = "DistributedTrainer_executor"
_VARIANT_MARKER = "# Merge this block over the sections above"


def _merge(base, override):
  """`override` over `base`, recursively for mappings (as the comment in gpu.yaml says)."""
  merged = copy.deepcopy(base)
  for key, value in override.items():
    if isinstance(value, dict) and isinstance(merged.get(key), dict) and value:
      merged[key] = _merge(merged[key], value)
    else:
      merged[key] = value
  return merged


def _multi_node_variant():
  """The commented block at the end of gpu.yaml, uncommented and merged over the file."""
  with open(GPU_CONFIG) as f:
    text = f.read()
  block = text[text.index(_VARIANT_MARKER):].splitlines()
  block = block[block.index("#") + 1:]  # The YAML starts after the first bare "#".
  uncommented = "\n".join(line[2:] for line in block if line.startswith("# "))
  return _merge(yaml.safe_load(text), yaml.safe_load(uncommented))


def test_gpu_config_compiles_to_a_package(tmp_path):
  output = tmp_path / "gpu" / "pipeline.yaml"
  compiler.compile_file(GPU_CONFIG, str(output))
  with open(output) as f:
    documents = list(yaml.safe_load_all(f))
  assert len(documents) == 2
  assert documents[0]["pipelineInfo"]["name"] == "tfx-parallel-gpu"
  assert documents[0]["defaultPipelineRoot"].startswith("gs://")
  trainer = executors(documents)[TRAINER]["container"]
  accelerator = trainer["resources"]["accelerator"]
  assert (accelerator["resourceType"], accelerator["resourceCount"]) == ("nvidia.com/gpu", "4")
  platform = platform_executors(documents)[TRAINER]
  assert platform["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
  assert platform["tolerations"][0]["key"] == "nvidia.com/gpu"
  config = config_lib.load(GPU_CONFIG)
  assert (config.pipeline.trainer.layout, config.pipeline.trainer.devices) == ("mirrored", 0)
  assert config.pipeline.trainer.batch_size % 4 == 0


def test_gpu_config_is_packaged():
  with open(os.path.join(REPO, "setup.py")) as f:
    assert '"gpu.yaml"' in f.read()


def test_multi_node_variant_compiles_with_a_cpu_only_trainer_pod():
  data = _multi_node_variant()
  config = config_lib.from_mapping(copy.deepcopy(data))
  assert config.pipeline.trainer.layout == "multi_worker"
  trainer = config.placement("DistributedTrainer")
  assert trainer.accelerator is None and not trainer.tolerations
  assert trainer.env["TFX_PARALLEL_TFJOB_IMAGE"] == config.placement("default").image
  documents = compiler.compile_package(config).documents()
  env = {e["name"]: e["value"] for e in executors(documents)[TRAINER]["container"]["env"]}
  assert env["TFX_PARALLEL_TFJOB_WORKERS"] == "2"
  from tfx_parallel.components.distributed_trainer import tfjob  # pylint: disable=g-import-not-at-top
  settings = tfjob.settings_from_env(env, config.pipeline.trainer.layout,
                                     config.pipeline.trainer.workers)
  body = tfjob.manifest(tfjob.spec_for(settings, "train-1", "gs://b/job.json"))
  worker = body["spec"]["tfReplicaSpecs"]["Worker"]
  assert worker["replicas"] == 2
  pod = worker["template"]["spec"]
  assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
  assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
  assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
  assert TRAINER not in platform_executors(documents)


def _executor_input(spec, tmp_path, examples_uri, feature_keys, label_key, train_rows):
  """The ExecutorInput the KFP launcher hands the Trainer's container as `{{$}}`."""
  task = spec["root"]["dag"]["tasks"]["DistributedTrainer"]
  component = spec["components"][task["componentRef"]["name"]]
  value = task["inputs"]["parameters"]["config"]["runtimeValue"]
  # TFX 1.16 writes the old constantValue.stringValue; newer compilers write constant.
  config_json = (value["constant"] if "constant" in value
                 else value["constantValue"]["stringValue"])
  inputs = component["inputDefinitions"]["artifacts"]
  outputs = component["outputDefinitions"]["artifacts"]
  task_root = tmp_path / "root" / "DistributedTrainer"
  examples = {"name": "examples-1", "uri": examples_uri,
              "type": inputs["examples"]["artifactType"],
              "metadata": {"split_names": '["train", "eval"]',
                           "row_counts": json.dumps({"train": train_rows, "eval": 256}),
                           "num_shards": 2, "feature_keys": json.dumps(feature_keys),
                           "label_key": label_key}}
  return {
      # Without --json_serialized_inputs_spec_args in the compiled args (TFX's legacy
      # schema), TFX's entrypoint reads the legacy `parameters`; both are given.
      "inputs": {"parameterValues": {"config": config_json},
                 "parameters": {"config": {"stringValue": config_json}},
                 "artifacts": {"examples": {"artifacts": [examples]}}},
      "outputs": {
          "artifacts": {key: {"artifacts": [{"name": f"{key}-1",
                                             "uri": str(task_root / key / "1"),
                                             "type": outputs[key]["artifactType"]}]}
                        for key in outputs},
          "outputFile": str(task_root / "executor_output.json")},
  }


@pytest.mark.slow
def test_compiled_trainer_step_trains_a_model_like_the_kfp_launcher(tmp_path):
  """Runs the compiled Trainer container's command and args, with `{{$}}` replaced by an
  ExecutorInput for local paths, as the KFP launcher would in the pod."""
  import trainer_util  # pylint: disable=g-import-not-at-top  # Imports TensorFlow.
  with open(GPU_CONFIG) as f:
    data = yaml.safe_load(f)
  data["pipeline"]["trainer"]["epochs"] = 2
  spec = compiler.compile_package(config_lib.from_mapping(data)).pipeline_spec
  container = spec["deploymentSpec"]["executors"][TRAINER]["container"]
  examples_uri = str(tmp_path / "examples")
  feature_keys, label_key, rows = trainer_util.write_examples(examples_uri)
  executor_input = _executor_input(spec, tmp_path, examples_uri, feature_keys, label_key,
                                   rows)
  args = [json.dumps(executor_input) if a == "{{$}}" else a for a in container["args"]]
  command = list(container["command"])
  assert command[:3] == ["python", "-m",
                         "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]
  command[0] = sys.executable
  env = dict(os.environ, **{e["name"]: e["value"] for e in container["env"]})
  proc = subprocess.run(command + args, env=env, cwd=str(tmp_path), capture_output=True,
                        text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-4000:]
  model_uri = executor_input["outputs"]["artifacts"]["model"]["artifacts"][0]["uri"]
  assert os.path.exists(os.path.join(model_uri, "Format-Serving", "saved_model.pb"))
  with open(executor_input["outputs"]["outputFile"]) as f:
    output = json.load(f)
  history = output["artifacts"]["history"]["artifacts"][0]["metadata"]
  assert history["layout"] == "mirrored" and int(history["steps_run"]) >= 2
