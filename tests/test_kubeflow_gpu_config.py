"""kubeflow/gpu.yaml: the GPU config, and its commented multi-node variant, compile."""

import copy
import os
import re
import subprocess
import sys

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
  # CUDA's JIT cache (Hopper) on a volume, where the image keeps it (CUDA_CACHE_PATH).
  with open(os.path.join(REPO, "kubeflow", "Dockerfile")) as f:
    cache_path = re.search(r"CUDA_CACHE_PATH=(\S+)", f.read()).group(1)
  assert platform["pvcMount"] == [{"constant": "cuda-jit-cache", "mountPath": cache_path}]
  assert cache_path == "/var/cache/cuda"
  config = config_lib.load(GPU_CONFIG)
  assert (config.pipeline.trainer.layout, config.pipeline.trainer.devices) == ("mirrored", 0)
  assert config.pipeline.trainer.batch_size % 4 == 0
  # A GPU pod whose CUDA fails to load fails at once instead of training on the CPU.
  assert (config.pipeline.trainer.require_gpu, config.pipeline.trainer.gpu_memory) == \
      (True, "growth")


def test_gpu_config_is_packaged(tmp_path):
  """setuptools' build_py (the step that fills a wheel) puts the YAML configs and the
  Dockerfile into tfx_parallel/kubeflow/, and the packaged gpu.yaml compiles."""
  build = tmp_path / "build"
  proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib",
                         str(build)], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
  packaged = build / "tfx_parallel" / "kubeflow"
  for name in ("gpu.yaml", "default_config.yaml", "Dockerfile"):
    with open(os.path.join(REPO, "kubeflow", name), "rb") as f:
      assert (packaged / name).read_bytes() == f.read(), name
  output = tmp_path / "pipeline.yaml"
  compiler.compile_file(str(packaged / "gpu.yaml"), str(output))
  assert next(yaml.safe_load_all(output.read_text()))["pipelineInfo"]["name"] == \
      "tfx-parallel-gpu"


def test_multi_node_variant_compiles_with_a_cpu_only_trainer_pod():
  data = _multi_node_variant()
  config = config_lib.from_mapping(copy.deepcopy(data))
  assert config.pipeline.trainer.layout == "multi_worker"
  assert config.pipeline.trainer.require_gpu is True  # Checked by each TFJob replica.
  trainer = config.placement("DistributedTrainer")
  assert trainer.accelerator is None and not trainer.tolerations
  assert trainer.env["TFX_PARALLEL_TFJOB_IMAGE"] == config.placement("default").image
  documents = compiler.compile_package(config).documents()
  env = {e["name"]: e["value"] for e in executors(documents)[TRAINER]["container"]["env"]}
  assert env["TFX_PARALLEL_TFJOB_WORKERS"] == "2"
  assert "TFX_PARALLEL_ARTIFACT_PATHS" not in env  # The entry point chooses remote paths.
  from tfx_parallel.kubeflow import entrypoint  # pylint: disable=g-import-not-at-top
  assert entrypoint.artifact_paths(env) == "remote"  # Replicas cannot see /gcs/ copies.
  from tfx_parallel.components.distributed_trainer.kube import manifest, settings as kube_settings  # pylint: disable=g-import-not-at-top
  settings = kube_settings.settings_from_env(env, config.pipeline.trainer.layout,
                                             config.pipeline.trainer.workers)
  body = manifest.manifest(manifest.spec_for(settings, "train-1", "gs://b/job.json"))
  worker = body["spec"]["tfReplicaSpecs"]["Worker"]
  assert worker["replicas"] == 2
  pod = worker["template"]["spec"]
  assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
  assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
  assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
  assert TRAINER not in platform_executors(documents)
