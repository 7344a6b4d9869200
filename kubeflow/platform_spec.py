"""The Kubernetes PlatformSpec: PVC mounts, node selectors and tolerations per executor.

The second YAML document of a KFP v2 package, in the schema kfp-kubernetes emits
(``kfp/kubernetes/kubernetes_executor_config.proto``)::

    platforms:
      kubernetes:
        deploymentSpec:
          executors:
            DistributedTrainer_executor:
              pvcMount: [{constant: cuda-jit-cache, mountPath: /var/cache/cuda,
                          pvcNameParameter: {runtimeValue: {constant: cuda-jit-cache}}}]
              nodeSelector: {labels: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}}
              tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
"""
from typing import Any, Dict, Mapping

from tfx_parallel.kubeflow.config import ComponentPlacement, Toleration


def _toleration(t: Toleration) -> Dict[str, Any]:
  """A ``Toleration`` message as proto JSON (empty fields omitted, int64 as string)."""
  result = {name: value for name, value in (("key", t.key), ("operator", t.operator),
                                             ("value", t.value), ("effect", t.effect))
            if value}
  if t.toleration_seconds is not None:
    result["tolerationSeconds"] = str(t.toleration_seconds)
  return result


def _pvc_mount(claim: str, path: str) -> Dict[str, Any]:
  """A ``PvcMount`` as kfp-kubernetes' ``mount_pvc`` writes it: the claim as
  ``pvcNameParameter`` (current KFP backends) and as the deprecated ``constant`` (older
  ones)."""
  return {"constant": claim, "mountPath": path,
          "pvcNameParameter": {"runtimeValue": {"constant": claim}}}


def executor_config(placement: ComponentPlacement) -> Dict[str, Any]:
  """A ``KubernetesExecutorConfig`` as proto JSON; empty when nothing is set."""
  result: Dict[str, Any] = {}
  if placement.pvc_mounts:
    result["pvcMount"] = [_pvc_mount(claim, path)
                          for claim, path in sorted(placement.pvc_mounts.items())]
  if placement.node_selector:
    result["nodeSelector"] = {"labels": dict(sorted(placement.node_selector.items()))}
  if placement.tolerations:
    result["tolerations"] = [_toleration(t) for t in placement.tolerations]
  return result


def platform_spec(placements: Mapping[str, ComponentPlacement]) -> Dict[str, Any]:
  """The PlatformSpec document for {executor label: placement}; {} when all are empty."""
  executors = {label: config for label, config in
               ((label, executor_config(p)) for label, p in sorted(placements.items()))
               if config}
  if not executors:
    return {}
  return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": executors}}}}
