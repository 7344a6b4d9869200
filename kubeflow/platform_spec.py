"""The Kubernetes PlatformSpec: PVC mounts, node selectors and tolerations per executor.

The second YAML document of a KFP v2 package, in the schema kfp-kubernetes emits
(``kfp/kubernetes/kubernetes_executor_config.proto``)::

    platforms:
      kubernetes:
        deploymentSpec:
          executors:
            DistributedTrainer_executor:
              pvcMount: [{constant: cuda-jit-cache, mountPath: /var/cache/cuda}]
              nodeSelector: {labels: {cloud.google.com/gke-accelerator: nvidia-tesla-t4}}
              tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]

Only fields every supported backend (2.1.0 and later, see :data:`OLDEST_BACKEND`) knows
are written. Through 2.4.0 the driver parses this config strictly
(``jsonpb.UnmarshalString`` in kubeflow/pipelines ``backend/src/v2/cmd/driver/main.go``)
against the ``kubernetes_executor_config.proto`` its go.mod pins; from 2.4.1 it discards
unknown fields (``backend/src/common/util/json.go`` ``UnmarshalString``).
``tolerations`` exist from 2.1.0's pin (19a24e3) on, so 2.0.x is not supported;
``pvcNameParameter`` exists only in the proto of 2.5.0 and later, so PVC mounts use the
deprecated ``constant``, which every driver still reads (``driver/k8s.go``
``makeVolumeMountPatch``: "Support deprecated fields").
"""
from typing import Any, Dict, Mapping

from tfx_parallel.kubeflow.config import ComponentPlacement, Toleration

OLDEST_BACKEND = "2.1.0"  # The oldest open-source KFP backend whose driver accepts this.


def _toleration(t: Toleration) -> Dict[str, Any]:
  """A ``Toleration`` message as proto JSON (empty fields omitted, int64 as string)."""
  result = {name: value for name, value in (("key", t.key), ("operator", t.operator),
                                             ("value", t.value), ("effect", t.effect))
            if value}
  if t.toleration_seconds is not None:
    result["tolerationSeconds"] = str(t.toleration_seconds)
  return result


def _pvc_mount(claim: str, path: str) -> Dict[str, Any]:
  """A ``PvcMount`` with the claim in the deprecated ``constant``: backends 2.1.0 to 2.4.0
  reject ``pvcNameParameter`` (kfp-kubernetes' ``mount_pvc`` writes both)."""
  return {"constant": claim, "mountPath": path}


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
