"""Container resources and environment, in both generations of the KFP schema.

KFP backends before 2.3 read the numeric ``cpuLimit``/``memoryLimit`` (CPUs, GB) and
``accelerator.type``/``count``; newer ones read the string ``resourceCpuLimit`` ...
and ``accelerator.resourceType``/``resourceCount``. We emit both, exactly as the KFP
SDK (``kfp.compiler``) does for ``set_cpu_limit("4").set_memory_limit("16G")``, so the
resources are read by every backend from 2.0 on (the package as a whole needs 2.1.0:
platform_spec.OLDEST_BACKEND). The numeric conversions mirror
``kfp.compiler.compiler_utils._cpu_to_float`` / ``_memory_to_float``.
"""
import json
from typing import Any, Dict, List

from tfx_parallel.kubeflow.config import ComponentPlacement
from tfx_parallel.components.common import tfenv

# Where the trainer's checkpoints outlive its pod (ComponentPlacement.checkpoint_volume).
CHECKPOINT_VOLUME_ENV = "TFX_PARALLEL_CHECKPOINT_VOLUME"
# Bytes per unit suffix of a Kubernetes memory quantity.
_MEMORY_UNITS = {
    "E": 10**18, "P": 10**15, "T": 10**12, "G": 10**9, "M": 10**6, "K": 10**3,
    "Ei": 2**60, "Pi": 2**50, "Ti": 2**40, "Gi": 2**30, "Mi": 2**20, "Ki": 2**10,
}


def cpu_to_float(cpu: str) -> float:
  """"500m" -> 0.5, "4" -> 4.0 (a validated Kubernetes CPU quantity)."""
  return float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)


def memory_to_gb(memory: str) -> float:
  """"16G" -> 16.0, "1Gi" -> 1.073741824, "512" (bytes) -> 5.12e-07."""
  for suffix in sorted(_MEMORY_UNITS, key=len, reverse=True):
    if memory.endswith(suffix):
      return float(memory[:-len(suffix)]) * _MEMORY_UNITS[suffix] / 10**9
  return float(memory) / 10**9


def container_resources(placement: ComponentPlacement) -> Dict[str, Any]:
  """``PipelineContainerSpec.resources`` as a JSON dict (empty when nothing is set)."""
  result: Dict[str, Any] = {}
  for field, legacy, current, to_number in (
      ("cpu_limit", "cpuLimit", "resourceCpuLimit", cpu_to_float),
      ("cpu_request", "cpuRequest", "resourceCpuRequest", cpu_to_float),
      ("memory_limit", "memoryLimit", "resourceMemoryLimit", memory_to_gb),
      ("memory_request", "memoryRequest", "resourceMemoryRequest", memory_to_gb)):
    value = getattr(placement, field)
    if value is not None:
      result[legacy] = to_number(value)
      result[current] = value
  if placement.accelerator is not None:
    count = str(placement.accelerator.count)  # int64 fields are strings in proto JSON.
    result["accelerator"] = {"type": placement.accelerator.type, "count": count,
                             "resourceType": placement.accelerator.type,
                             "resourceCount": count}
  return result


def container_env(placement: ComponentPlacement) -> List[Dict[str, str]]:
  """``PipelineContainerSpec.env``: the project's TensorFlow defaults plus the config's.

  The TFX container entrypoint imports TensorFlow before our executors, so
  TF_USE_LEGACY_KERAS=1 must already be in the environment (see components/common/tfenv.py).
  """
  env = {**tfenv.ENV_DEFAULTS, **placement.env, "TF_USE_LEGACY_KERAS": "1"}
  if placement.checkpoint_volume is not None:  # Read by kubeflow/entrypoint.py.
    env[CHECKPOINT_VOLUME_ENV] = placement.checkpoint_volume
  return [{"name": name, "value": env[name]} for name in sorted(env)]


def cache_placement(placement: ComponentPlacement) -> str:
  """JSON of what the pod gets that can change a step's result, for ``--placement``.

  The open-source KFP driver's cache fingerprint covers the image, command and args,
  parameters and input artifacts, but not resources, env, node selector or tolerations
  (kubeflow/pipelines ``backend/src/v2/driver/cache.go`` ``getFingerPrint``,
  ``backend/src/v2/cacheutils/cache.go`` ``GenerateCacheKey``). Carried in the args, the
  GPU type and count, the node selector (GPU model) and the environment re-run a cached
  step when they change; CPU and memory sizes, and tolerations, do not.
  """
  accelerator = placement.accelerator
  data = {"accelerator": ({"type": accelerator.type, "count": accelerator.count}
                          if accelerator is not None else None),
          "node_selector": dict(sorted(placement.node_selector.items())),
          "env": {e["name"]: e["value"] for e in container_env(placement)}}
  return json.dumps(data, sort_keys=True, separators=(",", ":"))
