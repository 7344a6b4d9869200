"""The kubeflow.org/v1 TFJob resource (:func:`manifest` of a :class:`TFJobSpec`), its
deterministic name (:func:`job_name`), and the Role and RoleBinding both backends need
(:func:`rbac_manifests`). Pure: dicts in, dicts out. The TrainJob is in trainjob.py."""
import dataclasses
import hashlib
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.distributed_trainer.kube import object_store
from tfx_parallel.components.distributed_trainer.kube import trainjob
from tfx_parallel.components.distributed_trainer.kube.settings import (ENV_HEARTBEAT, ENV_ORPHAN,
                                                                       TFJobSettings)

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"

# The training operator injects TF_CONFIG into the container with this name only, and
# reads its exit code (TFJobDefaultContainerName, pkg/apis/kubeflow.org/v1/tensorflow_types.go:26).
CONTAINER_NAME = "tensorflow"

GPU_RESOURCE = "nvidia.com/gpu"

# Label the training operator puts on every replica pod of a job.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"

ISTIO_INJECT_ANNOTATION = "sidecar.istio.io/inject"

# What the executor does with the API, as (API group, resource, verb): checked by
# TFJobClient.check_access before the job, and granted by rbac_manifests.
REQUIRED_ACCESS = (
    (GROUP, PLURAL, "create"), (GROUP, PLURAL, "get"), (GROUP, PLURAL, "delete"),
    ("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list"))

# Either backend's needs: the step picks one at run time (API discovery).
ALL_REQUIRED_ACCESS = trainjob.all_access(REQUIRED_ACCESS, trainjob.REQUIRED_ACCESS)


def rbac_manifests(namespace: str, service_account: str,
                   access: Sequence[Tuple[str, str, str]] = ALL_REQUIRED_ACCESS,
                   s3_secret: Optional[str] = object_store.KFP_MINIO_SECRET
                   ) -> List[Dict[str, Any]]:
  """The Role and RoleBinding that let `service_account` run TFJobs or TrainJobs in
  `namespace`: exactly `access` (both backends' REQUIRED_ACCESS). Standalone KFP runs
  steps as ``pipeline-runner`` in its own namespace (``kubeflow``); a Kubeflow profile as
  ``default-editor`` in the profile's. `s3_secret`: the object store's credentials secret
  that the step reads on an s3:// or minio:// root (None on gs://)."""
  rules: Dict[Tuple[str, str], List[str]] = {}
  for group, resource, verb in access:
    rules.setdefault((group, resource), []).append(verb)
  name = "tfx-parallel-tfjob"
  role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
          "metadata": {"name": name, "namespace": namespace},
          "rules": [{"apiGroups": [group], "resources": [resource], "verbs": verbs}
                    for (group, resource), verbs in rules.items()]}
  if s3_secret:  # An s3:// or minio:// root: the step reads the store's credentials
    # (kube/object_store.py) to hand them to the replicas by secretKeyRef; only that secret.
    role["rules"].append({"apiGroups": [""], "resources": ["secrets"],
                          "resourceNames": [s3_secret], "verbs": ["get"]})
  binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": name, "namespace": namespace},
             "subjects": [{"kind": "ServiceAccount", "name": service_account,
                           "namespace": namespace}],
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": name}}
  return [role, binding]

# DNS-1035 label: the TFJob webhook's NameIsDNS1035Label (pkg/webhooks/tensorflow/
# tfjob_webhook.go:74, kubeflow/trainer v1.9.4).
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


@dataclasses.dataclass(frozen=True)
class TFJobSpec:
  """What one TFJob runs and where; :func:`manifest` turns it into the resource.

  Attributes:
    name: TFJob name (DNS-1035 label, <= 63 characters).
    namespace: Kubernetes namespace.
    image: container image of every replica.
    command: the replica container's command (argv).
    worker_replicas: Worker replicas (>= 1).
    chief_replicas: 0, or 1 for a separate Chief replica.
    gpus_per_replica: nvidia.com/gpu limit of each replica (0 = none).
    resources: extra container resources, {"requests": {...}, "limits": {...}}.
    node_selector: node labels the replica pods must match.
    tolerations: Kubernetes tolerations (dicts in the API's camelCase).
    env: environment of the replica container (TF_CONFIG is left to the operator).
    owner: (name, uid) of the pod that owns the TFJob (the KFP pod), or None.
    active_deadline_seconds: runPolicy.activeDeadlineSeconds, or None.
    ttl_seconds_after_finished: runPolicy.ttlSecondsAfterFinished, or None.
  """
  name: str
  namespace: str
  image: str
  command: Tuple[str, ...]
  worker_replicas: int = 1
  chief_replicas: int = 0
  gpus_per_replica: int = 0
  resources: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
  node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
  tolerations: Tuple[Mapping[str, Any], ...] = ()
  env: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # str, or valueFrom dict
  owner: Optional[Tuple[str, str]] = None
  active_deadline_seconds: Optional[int] = None
  ttl_seconds_after_finished: Optional[int] = None

  def validate(self) -> "TFJobSpec":
    if not (len(self.name) <= 63 and _DNS1035.match(self.name)):
      raise ValueError(f"TFJob name must be a DNS-1035 label (a lower-case letter, then "
                       f"[-a-z0-9], <= 63 characters; the operator's webhook checks "
                       f"this). Received: name={self.name!r}")
    if not self.image or not self.command:
      raise ValueError(f"TFJob needs an image and a command. Received: image={self.image!r}, "
                       f"command={list(self.command)!r}")
    if self.worker_replicas < 1 or self.chief_replicas not in (0, 1):
      raise ValueError(f"TFJob needs >= 1 worker and 0 or 1 chief. Received: "
                       f"worker_replicas={self.worker_replicas}, "
                       f"chief_replicas={self.chief_replicas}")
    if self.gpus_per_replica < 0:
      raise ValueError(f"gpus_per_replica must be >= 0. Received: {self.gpus_per_replica}")
    for key in ("active_deadline_seconds", "ttl_seconds_after_finished"):
      value = getattr(self, key)
      if value is not None and (not isinstance(value, int) or value < 1):
        raise ValueError(f"{key} must be a positive integer. Received: {value!r}")
    return self


def _replica(spec: TFJobSpec, replicas: int) -> Dict[str, Any]:
  resources = {kind: dict(values) for kind, values in spec.resources.items()}
  if spec.gpus_per_replica:
    resources.setdefault("limits", {})[GPU_RESOURCE] = str(spec.gpus_per_replica)
  container = {"name": CONTAINER_NAME, "image": spec.image, "command": list(spec.command),
               "env": [object_store.env_var(k, v) for k, v in sorted(spec.env.items())]}
  if resources:
    container["resources"] = resources
  pod = {"containers": [container]}
  if spec.node_selector:
    pod["nodeSelector"] = dict(spec.node_selector)
  if spec.tolerations:
    pod["tolerations"] = [dict(t) for t in spec.tolerations]
  # ExitCode: 128-255 (signals: OOM-kill, preemption; and PEER_LOST_EXIT_CODE) restarts
  # the pod, 1-127 (a training or config error) fails the job. See the module docstring.
  return {"replicas": replicas, "restartPolicy": "ExitCode",
          "template": {"metadata": {"annotations": {ISTIO_INJECT_ANNOTATION: "false"}},
                       "spec": pod}}


def manifest(spec: TFJobSpec) -> Dict[str, Any]:
  """The kubeflow.org/v1 TFJob resource (a JSON dict) for `spec`. Pure."""
  spec.validate()
  replica_specs = {"Worker": _replica(spec, spec.worker_replicas)}
  if spec.chief_replicas:
    replica_specs["Chief"] = _replica(spec, spec.chief_replicas)
  metadata = {"name": spec.name, "namespace": spec.namespace,
              "labels": {"app.kubernetes.io/part-of": "tfx-parallel"}}
  if spec.owner:
    # Kubernetes' garbage collector deletes the TFJob (and so its pods) with the pod.
    metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod",
                                    "name": spec.owner[0], "uid": spec.owner[1]}]
  # cleanPodPolicy None keeps finished pods so that their logs can be read; deleting
  # the TFJob removes them. No backoffLimit: see the module docstring.
  run_policy: Dict[str, Any] = {"cleanPodPolicy": "None"}
  if spec.active_deadline_seconds is not None:
    run_policy["activeDeadlineSeconds"] = spec.active_deadline_seconds
  if spec.ttl_seconds_after_finished is not None:
    run_policy["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
  return {
      "apiVersion": f"{GROUP}/{VERSION}",
      "kind": KIND,
      "metadata": metadata,
      "spec": {"runPolicy": run_policy, "tfReplicaSpecs": replica_specs},
  }


def replica_count(tfjob: Mapping[str, Any]) -> int:
  specs = (tfjob.get("spec") or {}).get("tfReplicaSpecs") or {}
  return sum(int(spec.get("replicas", 1)) for spec in specs.values())


def job_name(checkpoint_dir: str) -> str:
  """The DNS-1035 name of the one TFJob that may train into `checkpoint_dir`.

  Deterministic, so that a KFP retry of the step (same run, same task, same output
  URIs, so the same checkpoint directory) finds the job of the attempt before it
  instead of starting a second one on the same checkpoints: see :func:`_submit`."""
  digest = hashlib.sha256(checkpoint_dir.encode()).hexdigest()[:16]
  return f"tfx-parallel-train-{digest}"


def replica_command(job_uri: str) -> Tuple[str, ...]:
  return ("python", "-m", "tfx_parallel.components.distributed_trainer.replica",
          "--job", job_uri)


def spec_for(settings: TFJobSettings, name: str, job_uri: str) -> TFJobSpec:
  return TFJobSpec(name=name, namespace=settings.namespace, image=settings.image,
                   command=replica_command(job_uri),
                   worker_replicas=settings.worker_replicas,
                   chief_replicas=settings.chief_replicas,
                   gpus_per_replica=settings.gpus_per_replica,
                   resources=settings.resources, node_selector=settings.node_selector,
                   tolerations=settings.tolerations,
                   env={"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                        ENV_HEARTBEAT: job_uri + ".alive",
                        ENV_ORPHAN: repr(float(settings.orphan_seconds))},
                   owner=settings.owner,
                   active_deadline_seconds=max(1, int(settings.timeout_seconds)),
                   ttl_seconds_after_finished=settings.ttl_seconds)
