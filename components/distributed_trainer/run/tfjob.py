"""Multi-node training as a Kubeflow TFJob (kubeflow.org/v1), for `multi_worker` only.

A KFP task is a single pod. To train on several nodes, the DistributedTrainer executor
(running in that pod) submits a TFJob whose replicas run the training entry point of
the same image, waits for it and returns its logs. The Kubeflow training operator
injects TF_CONFIG into each replica; `MultiWorkerMirroredStrategy` reads it. A TFJob of
one replica in total gets no TF_CONFIG (the operator treats it as not distributed:
``isDistributed``, training-operator v1.9.0 pkg/controller.v1/tensorflow/util.go:74);
that replica trains alone.

Opt-in only: the executor uses this when the trainer layout is ``multi_worker`` AND
``TFX_PARALLEL_TFJOB_IMAGE`` is set in its environment (in the compiled pipeline:
``components.DistributedTrainer.env``, see kubeflow/gpu.yaml). Otherwise the local
launcher runs, unchanged. Settings, all read and checked once by
:func:`settings_from_env` (an unknown ``TFX_PARALLEL_TFJOB_*`` name is an error):

    TFX_PARALLEL_TFJOB_IMAGE          image of the replicas (required to opt in)
    TFX_PARALLEL_TFJOB_WORKERS        Worker replicas (default: trainer `workers`)
    TFX_PARALLEL_TFJOB_CHIEF          1 adds a Chief replica (default 0: worker 0 is chief)
    TFX_PARALLEL_TFJOB_GPUS           nvidia.com/gpu limit per replica (default 0)
    TFX_PARALLEL_TFJOB_NODE_SELECTOR  JSON object of node labels (default {})
    TFX_PARALLEL_TFJOB_TOLERATIONS    JSON list of Kubernetes tolerations (default [])
    TFX_PARALLEL_TFJOB_RESOURCES      JSON {"requests": {...}, "limits": {...}} (default {})
    TFX_PARALLEL_TFJOB_NAMESPACE      default: the pod's own namespace, else "default"
    TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS  default 86400; also the TFJob's activeDeadlineSeconds
    TFX_PARALLEL_TFJOB_MAX_RESTARTS   job restarts allowed after retryable failures (3)
    TFX_PARALLEL_TFJOB_PENDING_GRACE_SECONDS  how long a pod may be stuck (image pull,
                                      container config) or uncreated (FailedCreatePod)
                                      before the step fails (300)
    TFX_PARALLEL_TFJOB_UNSCHEDULABLE_GRACE_SECONDS  how long a pod may be Unschedulable
                                      (1200: a cluster autoscaler's node provisioning)
    TFX_PARALLEL_TFJOB_TTL_SECONDS    ttlSecondsAfterFinished (600)
    TFX_PARALLEL_TFJOB_ORPHAN_SECONDS how long replicas train without the executor's
                                      heartbeat before they stop (600)

What happens on failure (training-operator v1.9.0, cited per rule):

* ``restartPolicy: ExitCode``: the operator deletes and recreates a Failed pod whose
  ``tensorflow`` container exited with 128-255, and fails the job on 1-127
  (pkg/apis/kubeflow.org/v1/common_types.go:183-188; ``IsRetryableExitCode`` is
  ``exitCode >= 128``, pkg/util/train/train_util.go:24; applied in
  pkg/controller.v1/common/pod.go:350-375). So a replica OOM-killed (137), preempted or
  evicted restarts; a Python error (exit 1, e.g. a config or user-code error) stops the
  job at once; and a surviving worker that lost a peer exits with
  :data:`PEER_LOST_EXIT_CODE` (>= 128) so that it restarts too. Every replica then
  restores the last checkpoint.
* ``runPolicy.backoffLimit`` is not set: with ExitCode, v1.9 counts container restarts
  of Running pods only (``PastBackoffLimit``, pkg/core/job.go:95-133), while ExitCode
  pods are deleted and recreated, so the limit never trips (kubeflow/trainer#2045).
  The executor counts the restarts itself (new pod UIDs per replica) and deletes the
  job past ``TFX_PARALLEL_TFJOB_MAX_RESTARTS``, naming the last failure it saw.
* No orphans: the TFJob has an ownerReference to the KFP pod when ``KFP_POD_NAME`` and
  ``KFP_POD_UID`` are set (the KFP v2 driver sets them through the downward API) and
  the job is in the pod's namespace; SIGTERM deletes it. KFP keeps a finished step's
  pod until the workflow's TTL (a day), so for an executor killed outright (SIGKILL,
  OOM, node loss) the bound is the heartbeat: the executor writes ``<job file>.alive``
  every HEARTBEAT_SECONDS and each replica stops (exit ORPHANED_EXIT_CODE, which fails
  the job) once it has not changed for ``TFX_PARALLEL_TFJOB_ORPHAN_SECONDS`` (600);
  ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished`` stay as the last bounds.
  The job's name is the checkpoint directory's digest, so a KFP retry of the step
  adopts the job of the attempt before (running or succeeded) or replaces a failed
  one: never two jobs on one checkpoint directory.
* Istio: the replica pods carry ``sidecar.istio.io/inject: "false"`` (as the operator's
  own SDK does, sdk/python/kubeflow/training/utils/utils.py:259): with a sidecar a pod
  never reaches ``Succeeded`` and the operator's success test needs that phase
  (``IsWorker0Completed``, pkg/controller.v1/tensorflow/tfjob_controller.go:608-628).
  Logs are read from the ``tensorflow`` container (the API server answers 400 without
  ``container=`` on a pod with two containers: ``validateContainer`` in kubernetes
  pkg/registry/core/pod/strategy.go).

The job file is written next to the checkpoints under the pipeline root, which the
replicas must reach (gs://, s3:// or minio:// as s3://, or a shared volume mounted at the
same path; checked, and the replicas' S3 env made, by object_store.py). The
replicas run ``python -m tfx_parallel.components.distributed_trainer.run.tfjob --job URI``,
which copies the job file to local disk (train.py reads a local file) and runs
``train.main``.
"""
import argparse
import contextlib
import dataclasses
import difflib
import hashlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.common import tfenv
from tfx_parallel.components.distributed_trainer.run import object_store
from tfx_parallel.components.distributed_trainer.run import trainjob

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"
# The training operator injects TF_CONFIG into the container with this name only, and
# reads its exit code (TFJobDefaultContainerName, pkg/apis/kubeflow.org/v1/tensorflow_types.go:26).
CONTAINER_NAME = "tensorflow"
GPU_RESOURCE = "nvidia.com/gpu"
# Label the training operator puts on every replica pod of a job.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
ISTIO_INJECT_ANNOTATION = "sidecar.istio.io/inject"
ENV_PREFIX = "TFX_PARALLEL_TFJOB_"
ENV_IMAGE = ENV_PREFIX + "IMAGE"
# Set by the KFP v2 driver on every executor container through the downward API
# (kubeflow/pipelines backend/src/v2/component/constants.go: EnvPodName, EnvPodUID).
ENV_KFP_POD_NAME, ENV_KFP_POD_UID, ENV_KFP_NAMESPACE = (
    "KFP_POD_NAME", "KFP_POD_UID", "KFP_NAMESPACE")
_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SUCCEEDED, FAILED, TIMEOUT = "Succeeded", "Failed", "Timeout"
RESTARTING = "Restarting"

# Exit code of a worker that stopped because a peer was lost (train.py returns it).
# Under restartPolicy ExitCode, 128-255 restarts the pod and 1-127 fails the job
# (IsRetryableExitCode: exitCode >= 128, pkg/util/train/train_util.go:24), so a lost
# peer restarts the whole job from its checkpoint. 200 is no signal's 128+n.
PEER_LOST_EXIT_CODE = 200
# Consecutive failed polls (API server 5xx/429, connection errors) tolerated in a wait.
MAX_POLL_ERRORS = 5
# Container waiting reasons that mean the pod will not start by itself soon.
STUCK_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                 "CreateContainerConfigError", "CreateContainerError", "CrashLoopBackOff")
# One failure seen under reasons that alternate: the kubelet answers a failed pull with
# ErrImagePull and then, while the pull backs off (10 s doubling to MaxImageBackOff =
# 300 s: imageBackOffPeriod and MaxImageBackOff in kubernetes pkg/kubelet/kubelet.go,
# doubled by flowcontrol.Backoff.Next), with ImagePullBackOff (EnsureImageExists,
# pkg/kubelet/images/image_manager.go, commit 00a3928). A crashing container alternates
# CrashLoopBackOff with its own terminated state the same way. The grace period is
# timed from the first reason of a group, across the alternation.
_REASON_GROUPS = {"ErrImagePull": "image pull", "ImagePullBackOff": "image pull",
                  "InvalidImageName": "image pull"}
# The operator's event when the API server refuses a replica pod (a ResourceQuota, an
# admission webhook): FailedCreatePodReason, recorded on the TFJob with "Error creating:
# <err>" (kubeflow/training-operator v1.9.0 pkg/controller.v1/control/pod_control.go:153).
# No pod appears and no condition changes, so it is read from the events.
FAILED_CREATE_POD = "FailedCreatePod"
# The Job controller's event for the same (FailedCreatePodReason = "FailedCreate",
# kubernetes pkg/controller/controller_utils.go), on a TrainJob's Jobs.
FAILED_CREATE = "FailedCreate"
# Cluster autoscaler's --max-node-provision-time default (15 min: kubernetes/autoscaler
# cluster-autoscaler/config/flags/flags.go; main.go before 1.30) plus 5 min for the new node to join and pull the image:
# an Unschedulable pod on a cluster that scales GPU nodes up from zero is normal for
# that long, so its grace is longer than the one for pods that cannot start.
UNSCHEDULABLE_GRACE_SECONDS = 1200.0
# How often the executor proves it is alive to its replicas, and how long they wait
# for a proof before stopping (TFX_PARALLEL_TFJOB_ORPHAN_SECONDS): an executor killed
# with SIGKILL (OOM, node loss) cannot delete its TFJob, and KFP keeps the step's pod,
# so the ownerReference frees nothing, until the workflow's TTL (a day by default).
HEARTBEAT_SECONDS = 60.0
ORPHAN_SECONDS = 600.0
# The replicas' own variables (not TFX_PARALLEL_TFJOB_*: those are the executor's settings).
ENV_HEARTBEAT, ENV_ORPHAN = "TFX_PARALLEL_HEARTBEAT_URI", "TFX_PARALLEL_ORPHAN_SECONDS"
# Exit code of a replica whose executor stopped proving it is alive: 1-127, so that the
# operator fails the job instead of restarting the pod (restartPolicy ExitCode).
ORPHANED_EXIT_CODE = 3
# Multi-node training runs as a TFJob (the Kubeflow training operator v1, whose last line
# is release-1.9: v1.9.4) or as a TrainJob of Kubeflow Trainer v2 (Kubeflow 1.11 installs
# v2.1.0 and no TFJob) with this project's TensorFlow runtime (run/trainjob.py).
TRAINER_V2_GROUP_VERSION = f"{trainjob.GROUP}/{trainjob.VERSION}"
BACKEND_TFJOB, BACKEND_TRAINER_V2 = "TFJob", "TrainJob"
TRAINING_OPERATOR_VERSION = "v1.9.4"
TRAINING_OPERATOR_INSTALL = (
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/'
    f'standalone?ref={TRAINING_OPERATOR_VERSION}"')
# What the executor does with the API, as (API group, resource, verb): checked by
# TFJobClient.check_access before the job, and granted by rbac_manifests.
REQUIRED_ACCESS = (
    (GROUP, PLURAL, "create"), (GROUP, PLURAL, "get"), (GROUP, PLURAL, "delete"),
    ("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list"))


# Either backend's needs: the step picks one at run time (API discovery).
ALL_REQUIRED_ACCESS = trainjob.all_access(REQUIRED_ACCESS, trainjob.REQUIRED_ACCESS)


def rbac_manifests(namespace: str, service_account: str,
                   access: Sequence[Tuple[str, str, str]] = ALL_REQUIRED_ACCESS
                   ) -> List[Dict[str, Any]]:
  """The Role and RoleBinding that let `service_account` run TFJobs or TrainJobs in
  `namespace`: exactly `access` (both backends' REQUIRED_ACCESS). Standalone KFP runs
  steps as ``pipeline-runner`` in its own namespace (``kubeflow``); a Kubeflow profile as
  ``default-editor`` in the profile's."""
  rules: Dict[Tuple[str, str], List[str]] = {}
  for group, resource, verb in access:
    rules.setdefault((group, resource), []).append(verb)
  name = "tfx-parallel-tfjob"
  role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
          "metadata": {"name": name, "namespace": namespace},
          "rules": [{"apiGroups": [group], "resources": [resource], "verbs": verbs}
                    for (group, resource), verbs in rules.items()]}
  binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": name, "namespace": namespace},
             "subjects": [{"kind": "ServiceAccount", "name": service_account,
                           "namespace": namespace}],
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": name}}
  return [role, binding]


# DNS-1035 label: the TFJob webhook's NameIsDNS1035Label (pkg/webhooks/tensorflow/
# tfjob_webhook.go:75).
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


def job_state(tfjob: Mapping[str, Any]) -> Tuple[Optional[str], str]:
  """(SUCCEEDED | FAILED | None while running, message) from the TFJob's conditions."""
  for condition in (tfjob.get("status") or {}).get("conditions") or []:
    if condition.get("type") in (SUCCEEDED, FAILED) and condition.get("status") == "True":
      return condition["type"], condition.get("message", "")
  return None, ""


def _condition_message(tfjob: Mapping[str, Any], kind: str) -> str:
  for condition in (tfjob.get("status") or {}).get("conditions") or []:
    if condition.get("type") == kind and condition.get("status") == "True":
      return condition.get("message", "")
  return ""


@dataclasses.dataclass(frozen=True)
class TFJobResult:
  """How a TFJob ended: SUCCEEDED, FAILED or TIMEOUT, with each replica pod's log."""
  state: str
  message: str
  logs: Dict[str, str]
  restarts: int = 0

  @property
  def succeeded(self) -> bool:
    return self.state == SUCCEEDED


def describe_exit(code: int, reason: str = "") -> str:
  """'exited with code 137 (OOMKilled)'-style text for a container's terminated state."""
  if reason and reason not in ("Error", "Completed"):
    why = reason
  elif code == PEER_LOST_EXIT_CODE:
    why = "lost a peer; retryable"
  elif 128 < code < 128 + 65:
    try:
      sig = signal.Signals(code - 128).name
    except ValueError:
      sig = f"signal {code - 128}"
    why = f"{sig}{', e.g. OOM-killed' if sig == 'SIGKILL' else ''}; retryable"
  elif code >= 128:
    why = "retryable"
  else:
    why = "permanent under restartPolicy ExitCode"
  return f"exited with code {code} ({why})"


# The operator's event for each terminated `tensorflow` container it reconciles
# (pkg/controller.v1/common/pod.go:346, reason exitedWithCodeReason, pod.go:50). It is
# the one record of a failed pod that survives: under ExitCode the operator deletes the
# pod in the same reconcile (pod.go:350-366), usually before a poll can see it.
EXITED_WITH_CODE = "ExitedWithCode"
_EXITED = re.compile(r"^Pod: (?P<namespace>[^.]+)\.(?P<pod>\S+) exited with code (?P<code>\d+)$")
# After 10 distinct messages of one reason about one object in 600 s, client-go's
# EventAggregator records the rest as one event whose message is this prefix and the
# latest message (EventAggregatorByReasonMessageFunc, defaultAggregateMaxEvents,
# staging/src/k8s.io/client-go/tools/record/events_cache.go, commit 00080d4).
COMBINED_PREFIX = "(combined from similar events): "


def _uncombined(message: str) -> str:
  return message[len(COMBINED_PREFIX):] if message.startswith(COMBINED_PREFIX) else message


class PodWatch:
  """What the executor has seen of a job's pods across polls, and when to give up.

  Pure: feed it the pods (the API's JSON, camelCase) and the time with :meth:`observe`,
  the job's events with :meth:`observe_events` and :meth:`cause`. Restarts are counted
  as the most incarnations (pod UIDs) any one replica has had, minus one: a lost peer
  restarts every replica once, which is one job restart.

  A pod is stuck from the first poll that shows it waiting for a reason in
  :data:`STUCK_REASONS` (or Unschedulable) until it starts, terminates or is replaced:
  reasons of one group (an image pull's ErrImagePull / ImagePullBackOff) share one
  timer, so the kubelet's alternation does not restart it. Unschedulable pods get
  ``unschedulable_grace_seconds`` (a cluster autoscaler may be adding a node).
  """

  def __init__(self, max_restarts: int, grace_seconds: float,
               unschedulable_grace_seconds: Optional[float] = None,
               container: str = CONTAINER_NAME,
               replica_of: Optional[Callable[[Mapping[str, Any]], str]] = None):
    self.max_restarts = max_restarts
    self.container = container  # The training container ("node" on Trainer v2).
    # Which replica a pod is (restarts are counted per replica): its name for a TFJob,
    # whose operator recreates a pod under the same name; JobSet pods get new names.
    self._replica_of = replica_of or (lambda pod: (pod.get("metadata") or {}).get("name", "?"))
    self.grace_seconds = grace_seconds
    self.unschedulable_grace_seconds = (grace_seconds if unschedulable_grace_seconds is None
                                        else unschedulable_grace_seconds)
    self._uids: Dict[str, List[str]] = {}
    # (pod, uid, reason group) -> (first seen, latest reason, latest message)
    self._stuck: Dict[Tuple[str, str, str], Tuple[float, str, str]] = {}
    self._create_failed: Dict[str, Tuple[float, str]] = {}  # message -> (first seen, text)
    self._reasons: Dict[Tuple[str, int], str] = {}  # (pod, exit code) -> kubelet reason
    self._seen: List[Tuple[str, int]] = []  # Failed exits seen on pods, in order.

  @property
  def restarts(self) -> int:
    return max((len(uids) - 1 for uids in self._uids.values()), default=0)

  def observe(self, pods: Sequence[Mapping[str, Any]], now: float) -> Optional[str]:
    """A message when a pod has been stuck past its grace period, else None."""
    stuck_now: Dict[Tuple[str, str, str], Tuple[str, str]] = {}
    waiting_pods = set()  # (pod, uid) still waiting to start: their timers go on.
    for pod in pods:
      meta, status = pod.get("metadata") or {}, pod.get("status") or {}
      name, uid = meta.get("name", "?"), meta.get("uid", "")
      seen = self._uids.setdefault(self._replica_of(pod), [])
      if uid and uid not in seen:
        seen.append(uid)
      for container in status.get("containerStatuses") or []:
        if container.get("name") != self.container:
          continue
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode", 0) != 0:
          key = (name, int(terminated["exitCode"]))
          self._reasons[key] = terminated.get("reason", "")
          if key not in self._seen:
            self._seen.append(key)
        if waiting:
          waiting_pods.add((name, uid))
          reason = waiting.get("reason", "")
          if reason in STUCK_REASONS:
            group = _REASON_GROUPS.get(reason, reason)
            stuck_now[(name, uid, group)] = (reason, waiting.get("message", ""))
      for condition in status.get("conditions") or []:
        if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"):
          waiting_pods.add((name, uid))
          stuck_now[(name, uid, "Unschedulable")] = ("Unschedulable",
                                                     condition.get("message", ""))
    # A timer ends when its pod starts, terminates or is gone; a pod still waiting keeps
    # it through a poll that shows another reason of its group, or none.
    self._stuck = {k: v for k, v in self._stuck.items() if k[:2] in waiting_pods}
    for key, (reason, message) in stuck_now.items():
      since = self._stuck.get(key, (now,))[0]
      self._stuck[key] = (since, reason, message)
    for (name, _, group), (since, reason, message) in sorted(self._stuck.items()):
      grace = self.unschedulable_grace_seconds if group == "Unschedulable" \
          else self.grace_seconds
      if now - since >= grace:
        return (f"pod {name} is stuck: {reason}: {message} (for {now - since:g} s, "
                f"more than the {grace:g} s grace period)")
    return None

  def observe_events(self, events: Sequence[Mapping[str, Any]], now: float,
                     pods_missing: bool) -> Optional[str]:
    """A message when the operator has failed to create a replica pod
    (:data:`FAILED_CREATE_POD`) for longer than the grace period while a replica has no
    pod, else None. Timed from the first poll that shows the event."""
    if not pods_missing:
      self._create_failed.clear()
      return None
    for event in events:
      if event.get("reason") in (FAILED_CREATE_POD, FAILED_CREATE):
        message = f'{event["reason"]}: ' + _uncombined(event.get("message") or "")
        self._create_failed.setdefault(message, (now, message))
    for since, message in sorted(self._create_failed.values()):
      if now - since >= self.grace_seconds:
        who = ("the Job controller" if message.startswith(FAILED_CREATE + ":")
               else "the training operator")
        return (f"{who} cannot create a replica pod: {message} (for {now - since:g} s, more than the {self.grace_seconds:g} s "
                f"grace period; a ResourceQuota or an admission webhook refuses it)")
    return None

  @property
  def over_limit(self) -> bool:
    return self.restarts > self.max_restarts

  def cause(self, events: Sequence[Mapping[str, Any]] = ()) -> str:
    """The last failure: the latest non-zero exit of a replica that did not merely lose
    a peer (else the latest exit), from the operator's events, else from the pods."""
    exits = []
    for event in events:
      match = _EXITED.match(_uncombined(event.get("message") or ""))
      if event.get("reason") == EXITED_WITH_CODE and match and int(match["code"]) != 0:
        when = event.get("lastTimestamp") or event.get("eventTime") or ""
        exits.append((when, match["pod"], int(match["code"])))
    found = [(pod, code) for _, pod, code in sorted(exits)] or list(self._seen)
    if not found:
      return ""
    own = [f for f in found if f[1] != PEER_LOST_EXIT_CODE]
    pod, code = (own or found)[-1]
    return (f"pod {pod}: container {self.container} "
            + describe_exit(code, self._reasons.get((pod, code), "")))

  def budget_message(self, cause: str, restarting_message: str = "") -> str:
    return (f"restarted {self.restarts} times, more than the limit of {self.max_restarts} "
            f"({ENV_PREFIX}MAX_RESTARTS); last failure: "
            f"{cause or restarting_message or 'not recorded'}")


class TFJobClient:
  """The Kubernetes API calls for TFJobs, and nothing else; :class:`TrainJobClient` is
  the same for Trainer v2's TrainJobs.

  Args:
    api_client: a ``kubernetes.client.ApiClient``; default: in-cluster config, else
      the local kubeconfig.
  """
  KIND = KIND
  container = CONTAINER_NAME
  required_access = REQUIRED_ACCESS

  @property
  def api_client(self):
    return self._api

  def __init__(self, api_client=None):
    from kubernetes import client  # pylint: disable=g-import-not-at-top
    if api_client is None:
      api_client = _default_api_client()
    self._api = api_client
    self._custom = client.CustomObjectsApi(api_client)
    self._core = client.CoreV1Api(api_client)

  def serves(self, group_version: str, plural: str) -> bool:
    """API discovery: does the API server serve `plural` in `group_version` (the CRD is
    installed)? GET /apis/<group>/<version> answers 404 when nothing serves it."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
    try:
      found = self._api.call_api(f"/apis/{group_version}", "GET", response_type="object",
                                 auth_settings=["BearerToken"], _return_http_data_only=True)
    except ApiException as e:
      if e.status == 404:
        return False
      raise
    return any(r.get("name") == plural for r in (found or {}).get("resources") or [])

  def check_backend(self) -> str:
    """Which backend the cluster serves (API discovery): BACKEND_TFJOB when it serves
    kubeflow.org/v1 tfjobs (Kubeflow 1.10: training-operator v1.9.2; preferred when both
    are there), else BACKEND_TRAINER_V2 when it serves trainer.kubeflow.org/v1alpha1
    trainjobs (Kubeflow 1.11: Trainer v2.1.0, kubeflow/manifests v1.11.0
    example/kustomization.yaml). Raises RuntimeError before anything is created when
    neither is served, naming what to install."""
    if self.serves(f"{GROUP}/{VERSION}", PLURAL):
      return BACKEND_TFJOB
    if self.serves(TRAINER_V2_GROUP_VERSION, trainjob.PLURAL):
      return BACKEND_TRAINER_V2
    raise RuntimeError(
        f"This cluster serves neither TFJob ({GROUP}/{VERSION} tfjobs) nor Kubeflow "
        f"Trainer v2 ({TRAINER_V2_GROUP_VERSION} trainjobs), so multi-node training cannot "
        f"start; nothing was created. Install one: Kubeflow Trainer "
        f"{trainjob.TRAINER_VERSION} ({trainjob.TRAINER_INSTALL}; it brings JobSet v0.10.1), "
        f"then this project's TensorFlow runtime ('tfx-parallel runtime --namespace <ns> | "
        f"kubectl apply -f -'); or the training operator {TRAINING_OPERATOR_VERSION} "
        f"(Kubeflow 1.10 installs v1.9.2, which works too): {TRAINING_OPERATOR_INSTALL}. "
        f"Or train on one node: unset {ENV_IMAGE}.")

  def check_ready(self, namespace: str) -> None:
    """Anything the backend needs in `namespace` besides its API (nothing for a TFJob)."""

  def can_i(self, verb: str, group: str, resource: str, namespace: str) -> bool:
    """The API server's answer to a SelfSubjectAccessReview (authorization.k8s.io/v1)
    for this pod's service account: may it `verb` `resource` ("pods/log" names a
    subresource) in `namespace`?"""
    from kubernetes import client  # pylint: disable=g-import-not-at-top
    resource, _, subresource = resource.partition("/")
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(
            namespace=namespace, verb=verb, group=group, resource=resource,
            subresource=subresource or None)))
    answer = client.AuthorizationV1Api(self._api).create_self_subject_access_review(review)
    return bool(answer.status and answer.status.allowed)

  def check_access(self, namespace: str) -> None:
    """Raises PermissionError naming every missing verb, before anything is created."""
    missing = [f"{verb} {resource}" + (f" ({group})" if group else "")
               for group, resource, verb in self.required_access
               if not self.can_i(verb, group, resource, namespace)]
    if missing:
      raise PermissionError(
          f"The step's service account may not {', '.join(missing)} in namespace "
          f"{namespace!r}; the {self.KIND} was not created. Apply the Role and RoleBinding that "
          f"'tfx-parallel rbac --namespace {namespace} --service-account <account>' prints "
          f"(the account is pipeline-runner on standalone KFP, default-editor in a "
          f"Kubeflow profile): see docs/KUBEFLOW.md, RBAC.")

  def create(self, body: Mapping[str, Any]) -> Dict[str, Any]:
    namespace = body["metadata"]["namespace"]
    return self._custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                        dict(body))

  def get(self, name: str, namespace: str) -> Dict[str, Any]:
    return self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

  def delete(self, name: str, namespace: str) -> None:
    self._custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

  pod_label = JOB_NAME_LABEL

  def pods(self, name: str, namespace: str) -> List[Dict[str, Any]]:
    """The job's replica pods as the API's JSON (camelCase)."""
    found = self._core.list_namespaced_pod(namespace,
                                           label_selector=f"{self.pod_label}={name}")
    return [self._api.sanitize_for_serialization(pod) for pod in found.items]

  @staticmethod
  def state(job: Mapping[str, Any]) -> Tuple[Optional[str], str]:
    return job_state(job)

  @staticmethod
  def replica_count(job: Mapping[str, Any]) -> int:
    return _replica_count(job)

  replica_of = None  # PodWatch's default: the pod's name.

  def events(self, name: str, namespace: str) -> List[Dict[str, Any]]:
    """The events about the TFJob (the operator's ExitedWithCode, Restarting, ...);
    [] when they cannot be read (e.g. no RBAC for events): they only name a cause."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
    try:
      found = self._core.list_namespaced_event(
          namespace, field_selector=f"involvedObject.kind={KIND},involvedObject.name={name}")
    except ApiException:
      return []
    return [self._api.sanitize_for_serialization(e) for e in found.items]

  def logs(self, name: str, namespace: str) -> Dict[str, str]:
    """Pod name -> log of the `tensorflow` container of every replica pod. A pod whose
    log cannot be read (still starting, just recreated, gone) gets the API's answer
    instead of its log; it does not hide the others."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
    out = {}
    try:
      pods = self.pods(name, namespace)
    except ApiException as e:
      return {"(pods)": f"(could not list pods: {e.status} {e.reason}: {_body(e)})"}
    for pod in pods:
      pod_name = pod["metadata"]["name"]
      try:
        out[pod_name] = self._core.read_namespaced_pod_log(pod_name, namespace,
                                                           container=self.container)
      except ApiException as e:
        out[pod_name] = f"(no log: {e.status} {e.reason}: {_body(e)})"
    return out

  def wait(self, name: str, namespace: str, timeout_seconds: float,
           poll_seconds: float = 10.0, max_restarts: int = 3,
           grace_seconds: float = 300.0,
           unschedulable_grace_seconds: float = UNSCHEDULABLE_GRACE_SECONDS,
           clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep,
           heartbeat: Callable[[], None] = lambda: None) -> TFJobResult:
    """Polls the job's conditions and pods until Succeeded/Failed, a pod stuck past the
    grace period, too many restarts, or the timeout; never raises on the job's
    outcome. Returns the state, the message and the pods' logs."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
    import urllib3  # pylint: disable=g-import-not-at-top
    deadline = clock() + timeout_seconds
    watch = PodWatch(max_restarts, grace_seconds, unschedulable_grace_seconds,
                     container=self.container, replica_of=self.replica_of)
    errors = 0
    while True:
      heartbeat()
      try:
        job = self.get(name, namespace)
        pods = self.pods(name, namespace)
        errors = 0
      except ApiException as e:
        if e.status == 404:  # Deleted behind our back (by hand, or with its owner).
          return TFJobResult(state=FAILED, message=f"{self.KIND} {namespace}/{name} was deleted "
                             f"while the executor waited for it", logs={},
                             restarts=watch.restarts)
        if not (e.status == 429 or (e.status or 0) >= 500) or errors >= MAX_POLL_ERRORS:
          raise
        errors += 1  # A passing API server error must not cost a day of training.
        sleep(poll_seconds)
        continue
      except urllib3.exceptions.HTTPError:
        if errors >= MAX_POLL_ERRORS:
          raise
        errors += 1
        sleep(poll_seconds)
        continue
      state, message = self.state(job)
      now = clock()
      stuck = watch.observe(pods, now)
      if state is None and not stuck and len(pods) < self.replica_count(job):
        # A replica without a pod: the operator may be failing to create it, which
        # only its events say (no pod, no condition).
        stuck = watch.observe_events(self.events(name, namespace), now, pods_missing=True)
      else:
        watch.observe_events((), now, pods_missing=False)
      if state == FAILED:
        cause = watch.cause(self.events(name, namespace))
        if cause:
          message = f"{message} Last failure: {cause}"
      elif state is None and stuck:
        state, message = FAILED, f"{self.KIND} {namespace}/{name}: {stuck}"
      elif state is None and watch.over_limit:
        state, message = FAILED, f"{self.KIND} {namespace}/{name}: " + watch.budget_message(
            watch.cause(self.events(name, namespace)), _condition_message(job, RESTARTING))
      elif state is None and clock() >= deadline:
        state, message = TIMEOUT, (f"{self.KIND} {namespace}/{name} did not finish in "
                                   f"{timeout_seconds:g} s")
      if state is not None:
        return TFJobResult(state=state, message=message, logs=self.logs(name, namespace),
                           restarts=watch.restarts)
      sleep(poll_seconds)


class TrainJobClient(TFJobClient):
  """The same calls for Kubeflow Trainer v2's TrainJobs (trainer.kubeflow.org/v1alpha1)
  with this project's runtime (run/trainjob.py). The pods are the JobSet's, which is named
  like the TrainJob (kubeflow/trainer v2.1.0 plugins/jobset/jobset.go:284), selected by
  ``jobset.sigs.k8s.io/jobset-name``; a replica is counted across JobSet restarts by its
  indices, since its pods get new names (trainjob.replica_key)."""
  KIND = trainjob.KIND
  container = trainjob.CONTAINER_NAME
  required_access = trainjob.REQUIRED_ACCESS
  pod_label = trainjob.JOBSET_NAME_LABEL
  replica_of = staticmethod(trainjob.replica_key)

  @staticmethod
  def state(job: Mapping[str, Any]) -> Tuple[Optional[str], str]:
    state, message = trainjob.job_state(job)
    return {"Complete": SUCCEEDED, "Failed": FAILED}.get(state or ""), message

  @staticmethod
  def replica_count(job: Mapping[str, Any]) -> int:
    return trainjob.replica_count(job)

  def check_ready(self, namespace: str) -> None:
    """Raises RuntimeError, before anything is created, when this project's TensorFlow
    runtime is not installed in `namespace` (Trainer v2 ships none)."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
    try:
      self._custom.get_namespaced_custom_object(trainjob.GROUP, trainjob.VERSION, namespace,
                                                trainjob.RUNTIME_PLURAL, trainjob.RUNTIME_NAME)
    except ApiException as e:
      if e.status != 404:
        raise
      raise RuntimeError(
          f"This cluster serves Kubeflow Trainer v2 ({TRAINER_V2_GROUP_VERSION}), which ships "
          f"no TensorFlow runtime, and namespace {namespace!r} has no "
          f"{trainjob.RUNTIME_KIND} {trainjob.RUNTIME_NAME!r}; nothing was created. Install "
          f"it: 'tfx-parallel runtime --namespace {namespace} | kubectl apply -f -' (see "
          f"docs/KUBEFLOW.md, Several nodes).") from None

  def create(self, body: Mapping[str, Any]) -> Dict[str, Any]:
    return self._custom.create_namespaced_custom_object(
        trainjob.GROUP, trainjob.VERSION, body["metadata"]["namespace"], trainjob.PLURAL,
        dict(body))

  def get(self, name: str, namespace: str) -> Dict[str, Any]:
    return self._custom.get_namespaced_custom_object(trainjob.GROUP, trainjob.VERSION,
                                                     namespace, trainjob.PLURAL, name)

  def delete(self, name: str, namespace: str) -> None:
    # Foreground would wait for the pods; the garbage collector deletes the JobSet, its
    # Jobs and pods after the TrainJob (ownerReferences, jobset.go:298-304).
    self._custom.delete_namespaced_custom_object(trainjob.GROUP, trainjob.VERSION, namespace,
                                                 trainjob.PLURAL, name)

  def events(self, name: str, namespace: str) -> List[Dict[str, Any]]:
    """Events about the trainer Job (the Job controller's FailedCreate when the API server
    refuses a pod) and the JobSet (its restarts); [] when they cannot be read."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
    out = []
    for kind, involved in (("Job", f"{name}-{trainjob.REPLICATED_JOB}-0"), ("JobSet", name)):
      try:
        found = self._core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={involved}")
      except ApiException:
        return out
      out.extend(self._api.sanitize_for_serialization(e) for e in found.items)
    return out


def _replica_count(tfjob: Mapping[str, Any]) -> int:
  specs = (tfjob.get("spec") or {}).get("tfReplicaSpecs") or {}
  return sum(int(spec.get("replicas", 1)) for spec in specs.values())


def _body(e) -> str:
  try:
    return json.loads(e.body).get("message", e.body)
  except (TypeError, ValueError, AttributeError):
    return str(e.body)


def _default_api_client():
  from kubernetes import client, config  # pylint: disable=g-import-not-at-top
  try:
    config.load_incluster_config()
  except config.ConfigException:
    config.load_kube_config()
  return client.ApiClient()


# --- Executor side: settings from the environment, submit, wait. ----------------------

@dataclasses.dataclass(frozen=True)
class TFJobSettings:
  """The executor's TFJob settings, decoded once from TFX_PARALLEL_TFJOB_* variables."""
  image: str
  namespace: str
  worker_replicas: int
  chief_replicas: int = 0
  gpus_per_replica: int = 0
  node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
  tolerations: Tuple[Mapping[str, Any], ...] = ()
  resources: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
  timeout_seconds: float = 86400.0
  max_restarts: int = 3
  pending_grace_seconds: float = 300.0
  unschedulable_grace_seconds: float = UNSCHEDULABLE_GRACE_SECONDS
  ttl_seconds: int = 600
  orphan_seconds: float = ORPHAN_SECONDS
  owner: Optional[Tuple[str, str]] = None


# Setting suffix -> (TFJobSettings field, parser name); the one list of known names.
_SETTINGS = {
    "IMAGE": "image", "NAMESPACE": "namespace", "WORKERS": "worker_replicas",
    "CHIEF": "chief_replicas", "GPUS": "gpus_per_replica", "NODE_SELECTOR": "node_selector",
    "TOLERATIONS": "tolerations", "RESOURCES": "resources",
    "TIMEOUT_SECONDS": "timeout_seconds", "MAX_RESTARTS": "max_restarts",
    "PENDING_GRACE_SECONDS": "pending_grace_seconds",
    "UNSCHEDULABLE_GRACE_SECONDS": "unschedulable_grace_seconds", "TTL_SECONDS": "ttl_seconds",
    "ORPHAN_SECONDS": "orphan_seconds",
}


def _own_namespace(environ: Mapping[str, str]) -> str:
  if environ.get(ENV_KFP_NAMESPACE):
    return environ[ENV_KFP_NAMESPACE]
  try:
    with open(_NAMESPACE_FILE) as f:
      return f.read().strip() or "default"
  except OSError:
    return "default"


def _check_model(value: Any, model: str, where: str) -> None:
  """Checks `value` (API JSON, camelCase) against a model of the `kubernetes` client
  (generated from the Kubernetes OpenAPI spec): field names and types. Raises
  ValueError naming `where` and the field."""
  from kubernetes import client  # pylint: disable=g-import-not-at-top
  if model.startswith("list["):
    if not isinstance(value, list):
      raise ValueError(f"{where}: expected a list. Received: {value!r}")
    for i, item in enumerate(value):
      _check_model(item, model[5:-1], f"{where}[{i}]")
    return
  if model.startswith("dict("):
    inner = model[5:-1].split(", ", 1)[1]
    if not isinstance(value, dict):
      raise ValueError(f"{where}: expected a JSON object. Received: {value!r}")
    for key, item in value.items():
      _check_model(item, inner, f"{where}.{key}")
    return
  scalars = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
  if model in scalars:
    ok = isinstance(value, scalars[model]) and not (model == "int" and isinstance(value, bool))
    if not ok:
      raise ValueError(f"{where}: expected {model}. Received: {value!r} "
                       f"({type(value).__name__})")
    return
  cls = getattr(client, model)
  if not isinstance(value, dict):
    raise ValueError(f"{where}: expected a JSON object ({model}). Received: {value!r}")
  by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
  for key, item in value.items():
    if key not in by_json:
      near = difflib.get_close_matches(key, list(by_json), n=1)
      hint = f" Did you mean {near[0]!r}?" if near else ""
      raise ValueError(f"{where}: unknown field {key!r} for {model} (known: "
                       f"{sorted(by_json)}).{hint}")
    _check_model(item, cls.openapi_types[by_json[key]], f"{where}.{key}")


def _check_quantities(resources: Mapping[str, Any], where: str) -> None:
  from kubernetes.utils import parse_quantity  # pylint: disable=g-import-not-at-top
  for kind in ("requests", "limits"):
    for resource, quantity in (resources.get(kind) or {}).items():
      try:
        parse_quantity(quantity)
      except ValueError:
        raise ValueError(f"{where}.{kind}.{resource}: not a Kubernetes quantity. Received: "
                         f"{quantity!r}") from None


def settings_from_env(environ: Mapping[str, str], layout: str,
                      workers: int) -> Optional[TFJobSettings]:
  """TFJob settings when opted in (layout multi_worker and TFX_PARALLEL_TFJOB_IMAGE
  set), else None. Raises ValueError naming the variable on an unknown name or a bad
  value (types and field names of JSON settings, Kubernetes quantities)."""
  image = environ.get(ENV_IMAGE, "")
  if layout != "multi_worker" or not image:
    return None
  for name in sorted(environ):
    if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX):] not in _SETTINGS:
      known = [ENV_PREFIX + s for s in _SETTINGS]
      near = difflib.get_close_matches(name, known, n=1)
      hint = f" Did you mean {near[0]}?" if near else ""
      raise ValueError(f"{name}: unknown TFJob setting.{hint} Known: {', '.join(known)}")

  def read(suffix, parse, default):
    name = ENV_PREFIX + suffix
    if name not in environ:
      return default
    try:
      return parse(environ[name])
    except ValueError as e:
      raise ValueError(f"{name}: cannot parse {environ[name]!r}: {e}") from None

  def json_of(model):
    def parse(text):
      value = json.loads(text)
      _check_model(value, model, "value")
      return value
    return parse

  def count(minimum):
    def parse(text):
      value = int(text)
      if value < minimum:
        raise ValueError(f"must be >= {minimum}")
      return value
    return parse

  def chief(text):
    if text not in ("0", "1"):
      raise ValueError("must be 0 or 1 (the webhook allows one Chief)")
    return int(text)

  def seconds(text):
    value = float(text)
    if not value > 0:
      raise ValueError("must be > 0")
    return value

  resources = read("RESOURCES", json_of("V1ResourceRequirements"), {})
  try:
    _check_quantities(resources, "value")
  except ValueError as e:
    raise ValueError(f"{ENV_PREFIX}RESOURCES: {e}") from None
  namespace = read("NAMESPACE", str, None) or _own_namespace(environ)
  owner = None
  if environ.get(ENV_KFP_POD_NAME) and environ.get(ENV_KFP_POD_UID) \
      and namespace == _own_namespace(environ):
    # An owner in another namespace counts as absent: the garbage collector would
    # delete the TFJob at once. So only in the pod's own namespace.
    owner = (environ[ENV_KFP_POD_NAME], environ[ENV_KFP_POD_UID])
  return TFJobSettings(
      image=image,
      namespace=namespace,
      worker_replicas=read("WORKERS", count(1), workers),
      chief_replicas=read("CHIEF", chief, 0),
      gpus_per_replica=read("GPUS", count(0), 0),
      node_selector=read("NODE_SELECTOR", json_of("dict(str, str)"), {}),
      tolerations=tuple(read("TOLERATIONS", json_of("list[V1Toleration]"), [])),
      resources=resources,
      timeout_seconds=read("TIMEOUT_SECONDS", seconds, 86400.0),
      max_restarts=read("MAX_RESTARTS", count(0), 3),
      pending_grace_seconds=read("PENDING_GRACE_SECONDS", seconds, 300.0),
      unschedulable_grace_seconds=read("UNSCHEDULABLE_GRACE_SECONDS", seconds,
                                       UNSCHEDULABLE_GRACE_SECONDS),
      ttl_seconds=read("TTL_SECONDS", count(1), 600),
      orphan_seconds=read("ORPHAN_SECONDS", seconds, ORPHAN_SECONDS),
      owner=owner)


def job_name(checkpoint_dir: str) -> str:
  """The DNS-1035 name of the one TFJob that may train into `checkpoint_dir`.

  Deterministic, so that a KFP retry of the step (same run, same task, same output
  URIs, so the same checkpoint directory) finds the job of the attempt before it
  instead of starting a second one on the same checkpoints: see :func:`_submit`."""
  digest = hashlib.sha256(checkpoint_dir.encode()).hexdigest()[:16]
  return f"tfx-parallel-train-{digest}"




class Heartbeat:
  """The executor's side: writes the time to `uri` at most every HEARTBEAT_SECONDS."""

  def __init__(self, uri: str, write: Callable[[str, str], None],
               now: Callable[[], float] = time.time, clock: Callable[[], float] = time.monotonic):
    self.uri, self._write, self._now, self._clock = uri, write, now, clock
    self._last: Optional[float] = None
    self._beats = 0

  def beat(self) -> None:
    if self._last is not None and self._clock() - self._last < HEARTBEAT_SECONDS:
      return
    self._last = self._clock()
    self._beats += 1
    try:  # The count changes every beat, whatever the clocks say; the time is for people.
      self._write(self.uri, f"{self._beats} {self._now()!r}")
    except Exception as e:  # pylint: disable=broad-except
      # A store having a bad moment must not end the step; ORPHAN_SECONDS is 10 beats.
      from absl import logging  # pylint: disable=g-import-not-at-top
      logging.warning("Could not write the TFJob heartbeat %s: %s", self.uri, e)


class Watchdog:
  """The replica's side: whether the executor's heartbeat has changed in the last
  `stale_seconds`, timed on this replica's own clock (no clock skew across nodes). A
  heartbeat that cannot be read counts as unchanged."""

  def __init__(self, read: Callable[[], str], stale_seconds: float,
               clock: Callable[[], float] = time.monotonic):
    self._read, self.stale_seconds, self._clock = read, stale_seconds, clock
    self._value: Optional[str] = None
    self._since = clock()

  def check(self) -> Optional[str]:
    """None while the executor is alive, else the message to stop with."""
    try:
      value = self._read()
    except Exception:  # pylint: disable=broad-except  # Any store error: not a beat.
      value = self._value
    now = self._clock()
    if value != self._value:
      self._value, self._since = value, now
      return None
    if now - self._since >= self.stale_seconds:
      return (f"[trainer] ERROR: the executor that submitted this TFJob has not written "
              f"its heartbeat for {now - self._since:g} s (more than {ENV_ORPHAN}="
              f"{self.stale_seconds:g}): it was killed (OOM, node loss) without deleting the "
              f"job. Stopping this replica so that its GPUs are freed.")
    return None


def start_watchdog(environ: Mapping[str, str], read: Callable[[str], str],
                   stop: Callable[[str], None]) -> Optional[threading.Thread]:
  """On a replica whose job names a heartbeat, a daemon thread that calls `stop` with
  the message once the heartbeat is stale."""
  uri = environ.get(ENV_HEARTBEAT)
  if not uri:
    return None
  watchdog = Watchdog(lambda: read(uri), float(environ.get(ENV_ORPHAN, ORPHAN_SECONDS)))
  interval = min(HEARTBEAT_SECONDS, watchdog.stale_seconds / 10)

  def loop():
    while True:
      time.sleep(interval)
      message = watchdog.check()
      if message:
        stop(message)
        return
  thread = threading.Thread(target=loop, name="tfjob-watchdog", daemon=True)
  thread.start()
  return thread


def replica_command(job_uri: str) -> Tuple[str, ...]:
  return ("python", "-m", "tfx_parallel.components.distributed_trainer.run.tfjob",
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


class ExecutorTerminated(RuntimeError):
  """The executor got SIGTERM (a cancelled KFP run) while its TFJob ran."""


@contextlib.contextmanager
def _raise_on_sigterm() -> Iterator[None]:
  """SIGTERM raises ExecutorTerminated in the main thread, so that `finally` blocks
  (the TFJob's delete) run; the previous handler comes back afterwards."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return

  def handler(signum, frame):  # pylint: disable=unused-argument
    raise ExecutorTerminated(f"received signal {signum} (SIGTERM)")

  previous = signal.signal(signal.SIGTERM, handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)


def run(job, settings: TFJobSettings, client: Optional[TFJobClient] = None,
        now: Callable[[], float] = time.time, poll_seconds: float = 10.0,
        clock: Callable[[], float] = time.monotonic) -> TFJobResult:
  """Writes `job` (a train.Job) beside its checkpoints, submits the TFJob, waits, and
  deletes it, also on SIGTERM. Raises RuntimeError naming the job and the cause and
  quoting the logs on failure."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.plan import devices  # pylint: disable=g-import-not-at-top
  devices.check_multi_worker_batch(settings.worker_replicas + settings.chief_replicas,  # Chief trains too.
                                   settings.gpus_per_replica, job.config.get("batch_size"), "TFJob")
  name = job_name(job.checkpoint_dir)
  job_dir = os.path.join(os.path.dirname(os.path.dirname(job.checkpoint_dir.rstrip("/"))),
                         "_tfjobs")
  job_uri = os.path.join(job_dir, name + ".json")
  spec = spec_for(settings, name, job_uri)
  body = manifest(spec)  # Checks the spec before any I/O.
  client = client or TFJobClient()
  # Before the job file and the job: which backend is served (TFJob or Trainer v2),
  if client.check_backend() == BACKEND_TRAINER_V2:
    body = trainjob.manifest(spec)
    if not isinstance(client, TrainJobClient):
      client = TrainJobClient(client.api_client)
  kind = client.KIND
  client.check_access(settings.namespace)  # may this account use it,
  client.check_ready(settings.namespace)  # and is all it needs there (Trainer v2's runtime)?
  # [h5 object store] Can the replicas reach the job's files? Their env (secretKeyRef).
  spec = dataclasses.replace(spec, env=dict(spec.env, **object_store.check_for_replicas(
      job, job_uri, settings.namespace, client.api_client, os.environ)))
  body = trainjob.manifest(spec) if kind == trainjob.KIND else manifest(spec)
  fileio.makedirs(job_dir)
  with fileio.open(job_uri, "w") as f:
    f.write(json.dumps(dataclasses.asdict(job)))

  def write(uri, text):
    with fileio.open(uri, "w") as f:
      f.write(text)
  heartbeat = Heartbeat(job_uri + ".alive", write, now=now, clock=clock)
  heartbeat.beat()  # Before the replicas exist: they find a beat at once.
  with _raise_on_sigterm():
    try:
      how = _submit(client, body)  # Inside the try: a SIGTERM during the call still deletes.
      logging.info("%s %s %s/%s (%d workers, %d GPUs each); job file %s", how, kind,
                   settings.namespace, name, settings.worker_replicas,
                   settings.gpus_per_replica, job_uri)
      result = client.wait(name, settings.namespace, settings.timeout_seconds,
                           poll_seconds=poll_seconds, max_restarts=settings.max_restarts,
                           grace_seconds=settings.pending_grace_seconds,
                           unschedulable_grace_seconds=settings.unschedulable_grace_seconds,
                           clock=clock, heartbeat=heartbeat.beat)
    except ExecutorTerminated as e:
      raise ExecutorTerminated(f"{kind} {settings.namespace}/{name}: the executor {e}; "
                               f"the {kind} is deleted. Job file: {job_uri}") from None
    finally:
      _delete_quietly(client, name, settings.namespace)
  for pod, text in sorted(result.logs.items()):
    logging.info("%s pod %s log (last 2000 characters):\n%s", kind, pod, text[-2000:])
  if not result.succeeded:
    tails = "\n".join(f"--- {pod} ---\n{text[-1000:]}"
                      for pod, text in sorted(result.logs.items()))
    raise RuntimeError(f"{kind} {settings.namespace}/{name} ended {result.state}: "
                       f"{result.message}. Job file: {job_uri}. Pod logs:\n{tails}")
  return result


def _submit(client, body: Mapping[str, Any], sleep: Callable[[float], None] = time.sleep,
            attempts: int = 30) -> str:
  """Creates the TFJob, or finds the one an earlier attempt of this step left (its name
  is the checkpoint directory's: :func:`job_name`). One that is running or succeeded is
  adopted (waited for; its replicas keep their progress); a failed one is deleted and
  replaced. So a KFP retry never runs two jobs on one checkpoint directory. Returns
  "Submitted", "Adopted" or "Replaced"."""
  from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
  name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]

  def created() -> bool:
    """True once created; False when a job of that name still exists (409)."""
    try:
      client.create(body)
      return True
    except ApiException as e:
      if e.status != 409:
        raise
      return False
  if created():
    return "Submitted"
  state, _ = client.state(client.get(name, namespace))
  if state != FAILED:
    return "Adopted"
  _delete_quietly(client, name, namespace)
  for _ in range(attempts):  # Deletion is asynchronous (finalizers, the garbage collector).
    if created():
      return "Replaced"
    sleep(2.0)
  raise RuntimeError(f"{client.KIND} {namespace}/{name}: a failed job of an earlier attempt "
                     f"is still being deleted after {2 * attempts} s; delete it (kubectl "
                     f"delete {client.KIND.lower()} -n {namespace} {name}) and retry the step")


def _delete_quietly(client, name: str, namespace: str) -> None:
  """Deletes the TFJob; a failure to delete is logged, not raised over the job's own
  outcome (ownerReference, activeDeadlineSeconds and the TTL still bound it)."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  try:
    client.delete(name, namespace)
  except Exception as e:  # pylint: disable=broad-except
    if getattr(e, "status", None) != 404:
      logging.error("Could not delete %s %s/%s: %s", getattr(client, "KIND", KIND), namespace,
                    name, e)


# --- Replica side: fetch the job file, then train. -----------------------------------

def read_text(uri: str) -> str:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(uri) as f:
    return f.read()


def stop_replica(message: str) -> None:
  """Ends this replica at once: the training threads would hold up a normal exit."""
  print(message, file=sys.stderr, flush=True)
  os._exit(ORPHANED_EXIT_CODE)  # pylint: disable=protected-access

def replica_tf_config(environ: Mapping[str, str]) -> Optional[str]:
  """The TF_CONFIG a replica must set itself: None under a TFJob (the operator set it) or
  alone; on a TrainJob, the one derived from JobSet (trainjob.tf_config_from_jobset)."""
  if "TF_CONFIG" in environ:
    return None
  return trainjob.tf_config_from_jobset(environ)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description="Runs one TFJob replica's training.")
  parser.add_argument("--job", required=True, help="job JSON URI written by the executor")
  args = parser.parse_args(argv)
  tfenv.prepare()  # The TFJob replica's entry point: before TensorFlow is imported.
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  object_store.register_uri(args.job)  # [h5 object store] s3:// needs tensorflow-io.
  start_watchdog(os.environ, read_text, stop_replica)
  tf_config = replica_tf_config(os.environ)
  if tf_config:
    os.environ["TF_CONFIG"] = tf_config
  with tempfile.TemporaryDirectory(prefix="tfx_parallel_tfjob_") as tmp:
    local = os.path.join(tmp, "job.json")
    tf.io.gfile.copy(args.job, local)
    return train.main(["--job", local])


if __name__ == "__main__":
  object_store.run_and_exit(main)  # [h5 object store] not sys.exit: see run_and_exit.
