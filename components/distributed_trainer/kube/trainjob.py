"""Multi-node training on Kubeflow Trainer v2 (trainer.kubeflow.org): a TensorFlow runtime,
the TrainJob that uses it, and the TF_CONFIG each replica derives from JobSet.

Kubeflow 1.11 installs Trainer v2.1.0 and no TFJob; Trainer v2 (v2.0-v2.3) ships runtimes
for torch, deepspeed, mlx, jax and xgboost and none for TensorFlow (kubeflow/trainer#2443).
This module is that runtime. Pure: manifests and the environment in, dicts and strings out;
the client is client.py's ``TrainJobClient``, which imports this module (never the
other way round).

How a TrainJob becomes pods (kubeflow/trainer v2.1.0, kubernetes-sigs/jobset v0.10.1 which
trainer v2.1.0's go.mod pins, kubernetes 1.3x):

* The TrainJob names a runtime (``spec.runtimeRef``); the trainer controller copies the
  runtime's JobSet template into a JobSet named like the TrainJob
  (``jobsetv1alpha2ac.JobSet(trainJob.Name, ...)``, pkg/runtime/framework/plugins/jobset/
  jobset.go:284) with an ownerReference to it (jobset.go:298-304).
* The replicated Job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``
  (pkg/constants/constants.go:25,50) gets ``replicas: 1`` (plugins/jobset/builder.go:123),
  the TrainJob's image, command and args on the container named ``node``
  (builder.go:126-137, constants.go:53), ``resourcesPerNode`` and ``env`` (builder.go:
  145-163), and ``parallelism = completions = numNodes`` (jobset.go:261-265; the PlainML
  plugin sets the count from ``trainer.numNodes`` when the runtime has no torch or mpi
  policy, plugins/plainml/plainml.go:45-56).
* JobSet's webhook defaults ``completionMode: Indexed``, ``network.enableDNSHostnames:
  true`` and ``publishNotReadyAddresses: true`` (jobset pkg/webhooks/jobset_webhook.go:
  120-139). The controller names each Job ``<jobset>-<replicatedJob>-<jobIndex>``
  (pkg/util/placement/placement.go:14-15), sets the pods' subdomain to
  ``network.subdomain``, default the JobSet's name (pkg/controllers/jobset_controller.go:
  708-712, 835-844), creates that headless Service selecting
  ``jobset.sigs.k8s.io/jobset-name`` (jobset_controller.go:616-646), and labels every pod
  with ``jobset.sigs.k8s.io/jobset-name``, ``.../replicatedjob-name``, ``.../job-index``
  and ``.../restart-attempt`` (jobset_controller.go:765-782; api/jobset/v1alpha2/
  jobset_types.go:23-35; pkg/constants/constants.go:29).
* The Job controller gives the pod of completion index i the hostname ``<job>-<i>``
  (kubernetes pkg/controller/job/job_controller.go, ``template.Spec.Hostname =
  fmt.Sprintf("%s-%d", job.Name, completionIndex)``) and the env ``JOB_COMPLETION_INDEX``
  (pkg/controller/job/indexed_job_utils.go, ``addCompletionIndexEnvVariable``).

So replica i of TrainJob T is reachable at ``T-node-0-i.T`` (Trainer's own endpoint
formula: plugins/jobset/jobset.go:227, and the torch plugin's PET_MASTER_ADDR,
plugins/torch/torch.go:154). :func:`tf_config_from_jobset` builds MultiWorkerMirroredStrategy's
TF_CONFIG from that, read from the variables the runtime sets from those labels (the
downward API) plus ``JOB_COMPLETION_INDEX`` and the node count the TrainJob passes.

Failures (the runtime's template, so the same meaning as the TFJob's ``restartPolicy:
ExitCode``): pods ``restartPolicy: Never`` and the Job ``backoffLimit: 0``; a Job
``podFailurePolicy`` fails the Job with reason ``PodFailurePolicy`` on exit codes 1-127
(a training or config error), and the JobSet ``failurePolicy`` rule for that reason is
``FailJobSet`` (jobset pkg/controllers/failure_policy.go:209-216). Any other failure
(137 OOM-killed, a signal, :data:`run.failures.PEER_LOST_EXIT_CODE`) fails the Job with
``BackoffLimitExceeded`` and takes JobSet's default action, ``RestartJobSet``
(failure_policy.go:41), which recreates every Job (a new ``restart-attempt``) up to
``maxRestarts``, then fails with ``ReachedMaxRestarts`` (failure_policy.go:219-227). The
TrainJob's ``Complete``/``Failed`` conditions are the JobSet's ``Completed``/``Failed``
ones, reason and message copied (plugins/jobset/jobset.go:316-323).
"""
import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.distributed_trainer.kube import object_store

GROUP, VERSION, PLURAL, KIND = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"
RUNTIME_PLURAL, RUNTIME_KIND = "trainingruntimes", "TrainingRuntime"
# The runtime this project ships, one per namespace (see runtime_manifest).
RUNTIME_NAME = "tfx-parallel-tensorflow"
# The Trainer v2 release Kubeflow 1.11 installs (kubeflow/manifests v1.11.0), and how to
# install it alone.
TRAINER_VERSION = "v2.1.0"
TRAINER_INSTALL = ('kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/'
                   f'overlays/manager?ref={TRAINER_VERSION}"')
# The trainer container and replicated Job: constants.Node (pkg/constants/constants.go:53),
# the names Trainer's builder and webhooks look for.
CONTAINER_NAME = REPLICATED_JOB = "node"
ANCESTOR_LABEL, ANCESTOR_TRAINER = "trainer.kubeflow.org/trainjob-ancestor-step", "trainer"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"  # As on the shipped runtimes.
# JobSet's labels on every pod (jobset api/jobset/v1alpha2/jobset_types.go:23-35,
# pkg/constants/constants.go:29).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
# The Job controller's annotation and env for an Indexed Job's pod (kubernetes
# pkg/controller/job/indexed_job_utils.go; batch.JobCompletionIndexAnnotation).
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
ENV_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"
# What the runtime template sets on the container (from JobSet's labels through the
# downward API) and the TrainJob adds (the node count, which no label carries).
ENV_JOBSET_NAME = "TFX_PARALLEL_JOBSET_NAME"
ENV_REPLICATED_JOB = "TFX_PARALLEL_JOBSET_REPLICATED_JOB"
ENV_JOB_INDEX = "TFX_PARALLEL_JOBSET_JOB_INDEX"
ENV_NUM_NODES = "TFX_PARALLEL_NUM_NODES"
ENV_PORT = "TFX_PARALLEL_TF_PORT"
# The gRPC port of each TensorFlow server: the TFJob's default (TFJobDefaultPort,
# training-operator pkg/apis/kubeflow.org/v1/tensorflow_types.go), so that both backends
# open the same port.
TF_PORT = 2222
# Exit codes that fail the TrainJob at once, as TFJob's ExitCode policy treats 1-127
# (IsRetryableExitCode is exitCode >= 128, training-operator pkg/util/train/train_util.go:24).
PERMANENT_EXIT_CODES = tuple(range(1, 128))
# The Job condition reasons a podFailurePolicy FailJob rule and activeDeadlineSeconds give
# (batch.JobReasonPodFailurePolicy, batch.JobReasonDeadlineExceeded): both fail the JobSet.
POD_FAILURE_POLICY_REASON = "PodFailurePolicy"
DEADLINE_EXCEEDED_REASON = "DeadlineExceeded"
# The Job's activeDeadlineSeconds by default, as the TFJob's (TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS):
# the last bound on a job whose executor was killed (the TrainJob has no deadline of its own).
ACTIVE_DEADLINE_SECONDS = 86400
ISTIO_INJECT_ANNOTATION = "sidecar.istio.io/inject"
# The JobSet failure-policy rule's name. JobSet's webhook refuses any name that does not
# match ``^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`` (no '-'; kubernetes-sigs/jobset v0.10.1
# pkg/webhooks/jobset_webhook.go:315,340-343, v0.11.1 :364,389, v0.12.0 :418,465), and the
# CRD does not check it: the runtime and the TrainJob are accepted and only the Trainer
# controller's JobSet apply is refused.
FAILURE_RULE_NAME = "PermanentFailure"
# Where a TrainJob puts the replicas' node selector and tolerations: the field differs per
# Trainer release (pkg/apis/trainer/v1alpha1/trainjob_types.go), and the API server drops
# a field its release's CRD does not have (structural pruning) without an error:
#   v2.0.x  spec.podSpecOverrides      (v2.0.0 :115, PodSpecOverride :235-268)
#   v2.1.x  spec.podTemplateOverrides  (v2.1.0 :127, PodTemplateOverride :267-339)
#   v2.2.x+ spec.runtimePatches        (v2.2.0 :124, v2.3.0 :124, RuntimePatch :290-320)
# client.TrainJobClient.placement_field discovers which one the cluster keeps (a
# server-side dry run); trainer.image/command/env/numNodes/resourcesPerNode exist in all four.
POD_SPEC_OVERRIDES, POD_TEMPLATE_OVERRIDES, RUNTIME_PATCHES = (
    "podSpecOverrides", "podTemplateOverrides", "runtimePatches")
PLACEMENT_FIELDS = (RUNTIME_PATCHES, POD_TEMPLATE_OVERRIDES, POD_SPEC_OVERRIDES)
# The Trainer release each field stands for, newest first (for messages and the CLI).
RELEASE_FIELDS = {"v2.3": RUNTIME_PATCHES, "v2.2": RUNTIME_PATCHES,
                  "v2.1": POD_TEMPLATE_OVERRIDES, "v2.0": POD_SPEC_OVERRIDES}
# The Trainer controller's event when it cannot create the JobSet (a webhook refuses it,
# the JobSet CRD is missing): it retries and sets no condition (kubeflow/trainer v2.1.0
# pkg/controller/trainjob_controller.go:119-129).
RESOURCES_CREATION_FAILED = "TrainJobResourcesCreationFailed"
# runtimePatches are keyed by manager (listMapKey, v2.3.0 trainjob_types.go:119-121,301).
PATCH_MANAGER = "tfx-parallel.github.io/executor"
# What the executor does with the API on this backend, as (API group, resource, verb);
# the namespaced runtime is read before the TrainJob is created. Kubeflow's
# kubeflow-trainer-edit ClusterRole grants all of it to a profile's default-editor
# (kubeflow/trainer v2.1.0 manifests/overlays/kubeflow-platform/kubeflow-trainer-roles.yaml).
REQUIRED_ACCESS = (
    (GROUP, PLURAL, "create"), (GROUP, PLURAL, "get"), (GROUP, PLURAL, "delete"),
    (GROUP, RUNTIME_PLURAL, "get"),
    ("", "pods", "list"), ("", "pods/log", "get"), ("", "events", "list"))


def _label_env(name: str, label: str) -> Dict[str, Any]:
  return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}


def runtime_manifest(namespace: str, max_restarts: int = 3,
                     active_deadline_seconds: int = ACTIVE_DEADLINE_SECONDS,
                     name: str = RUNTIME_NAME) -> Dict[str, Any]:
  """The namespaced ``TrainingRuntime`` for TensorFlow on JobSet. Pure.

  Namespaced rather than a ClusterTrainingRuntime: the step's service account can then
  check that it is installed (``get trainingruntimes`` in its namespace; a RoleBinding
  cannot grant a cluster-scoped read), and each profile can choose its own
  `max_restarts` (JobSet's ``failurePolicy.maxRestarts``: the TrainJob cannot set it)
  and `active_deadline_seconds` (each attempt's Job ``activeDeadlineSeconds``; past it the
  Job fails with DeadlineExceeded, which fails the JobSet without a restart)."""
  if not isinstance(max_restarts, int) or max_restarts < 0:
    raise ValueError(f"max_restarts must be an integer >= 0. Received: {max_restarts!r}")
  if not isinstance(active_deadline_seconds, int) or active_deadline_seconds < 1:
    raise ValueError(f"active_deadline_seconds must be an integer >= 1. Received: "
                     f"{active_deadline_seconds!r}")
  container = {
      "name": CONTAINER_NAME,
      # Replaced by the TrainJob's trainer.image (builder.go:129-131).
      "image": "ghcr.io/tfx-parallel/trainer:set-by-the-trainjob",
      "ports": [{"name": "tf", "containerPort": TF_PORT}],
      "env": [_label_env(ENV_JOBSET_NAME, JOBSET_NAME_LABEL),
              _label_env(ENV_REPLICATED_JOB, REPLICATED_JOB_LABEL),
              _label_env(ENV_JOB_INDEX, JOB_INDEX_LABEL),
              {"name": ENV_PORT, "value": str(TF_PORT)}],
  }
  job_spec = {
      "backoffLimit": 0,
      "activeDeadlineSeconds": active_deadline_seconds,
      # FailJob on a training or config error; anything else is BackoffLimitExceeded,
      # which the JobSet restarts (module docstring). onExitCodes needs restartPolicy Never.
      "podFailurePolicy": {"rules": [{
          "action": "FailJob",
          "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In",
                          "values": list(PERMANENT_EXIT_CODES)}}]},
      "template": {
          # With an Istio sidecar a pod never ends, so the Job never completes.
          "metadata": {"annotations": {ISTIO_INJECT_ANNOTATION: "false"}},
          "spec": {"restartPolicy": "Never", "containers": [container]}},
  }
  return {
      "apiVersion": f"{GROUP}/{VERSION}",
      "kind": RUNTIME_KIND,
      "metadata": {"name": name, "namespace": namespace,
                   "labels": {FRAMEWORK_LABEL: "tensorflow",
                              "app.kubernetes.io/part-of": "tfx-parallel"}},
      "spec": {
          # No torch/mpi policy: the PlainML plugin sets the node count (plainml.go:45-56).
          "mlPolicy": {"numNodes": 1},
          "template": {"spec": {
              "failurePolicy": {
                  "maxRestarts": max_restarts,
                  "rules": [{"name": FAILURE_RULE_NAME, "action": "FailJobSet",
                             "onJobFailureReasons": [POD_FAILURE_POLICY_REASON,
                                                     DEADLINE_EXCEEDED_REASON]}]},
              "replicatedJobs": [{
                  "name": REPLICATED_JOB,
                  "template": {"metadata": {"labels": {ANCESTOR_LABEL: ANCESTOR_TRAINER}},
                               "spec": job_spec}}],
          }},
      },
  }


def placement_patch(field: str, node_selector: Mapping[str, str],
                    tolerations: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
  """``{field: [...]}`` putting `node_selector` and `tolerations` on the trainer Job's pods
  in the shape of `field` (one of PLACEMENT_FIELDS), or {} when there is nothing to put."""
  pod: Dict[str, Any] = {}
  if node_selector:
    pod["nodeSelector"] = dict(node_selector)
  if tolerations:
    pod["tolerations"] = [dict(t) for t in tolerations]
  if not pod:
    return {}
  target = [{"name": REPLICATED_JOB}]
  if field == POD_SPEC_OVERRIDES:
    return {field: [dict(pod, targetJobs=target)]}
  if field == POD_TEMPLATE_OVERRIDES:
    return {field: [{"targetJobs": target, "spec": pod}]}
  if field == RUNTIME_PATCHES:
    job = {"name": REPLICATED_JOB, "template": {"spec": {"template": {"spec": pod}}}}
    return {field: [{"manager": PATCH_MANAGER, "trainingRuntimeSpec": {
        "template": {"spec": {"replicatedJobs": [job]}}}}]}
  raise ValueError(f"placement field must be one of {PLACEMENT_FIELDS}. Received: {field!r}")


def manifest(spec, runtime: str = RUNTIME_NAME,
             placement_field: str = POD_TEMPLATE_OVERRIDES) -> Dict[str, Any]:
  """The TrainJob for `spec` (a validated ``manifest.TFJobSpec``: the same settings as the
  TFJob), referring to the namespaced runtime `runtime`, with the node selector and
  tolerations in `placement_field` (the one the cluster's Trainer release has:
  PLACEMENT_FIELDS). Pure.

  Raises ValueError for what Trainer v2 cannot express: a separate Chief replica (the
  runtime has one replicated Job; worker 0 is MultiWorkerMirroredStrategy's chief)."""
  if spec.chief_replicas:
    raise ValueError("TFX_PARALLEL_TFJOB_CHIEF=1: Kubeflow Trainer v2 runs one replicated Job "
                     "of identical nodes, so there is no separate Chief (worker 0 is the chief). "
                     f"Received: chief_replicas={spec.chief_replicas}; unset it.")
  resources = {kind: dict(values) for kind, values in spec.resources.items()}
  if spec.gpus_per_replica:
    resources.setdefault("limits", {})["nvidia.com/gpu"] = str(spec.gpus_per_replica)
  env = dict(spec.env, **{ENV_NUM_NODES: str(spec.worker_replicas)})
  trainer = {"image": spec.image, "command": list(spec.command),
             "numNodes": spec.worker_replicas,
             "env": [object_store.env_var(k, v) for k, v in sorted(env.items())]}
  if resources:
    trainer["resourcesPerNode"] = resources
  body_spec: Dict[str, Any] = {
      "runtimeRef": {"name": runtime, "apiGroup": GROUP, "kind": RUNTIME_KIND},
      "trainer": trainer}
  body_spec.update(placement_patch(placement_field, spec.node_selector, spec.tolerations))
  metadata = {"name": spec.name, "namespace": spec.namespace,
              "labels": {"app.kubernetes.io/part-of": "tfx-parallel"}}
  if spec.owner:
    metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod",
                                    "name": spec.owner[0], "uid": spec.owner[1]}]
  return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": metadata,
          "spec": body_spec}


def job_state(trainjob: Mapping[str, Any]) -> Tuple[Optional[str], str]:
  """("Complete" | "Failed" | None while running, message) from the TrainJob's conditions
  (TrainJobComplete, TrainJobFailed: pkg/apis/trainer/v1alpha1/trainjob_types.go:62-65)."""
  for condition in (trainjob.get("status") or {}).get("conditions") or []:
    if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
      reason = condition.get("reason", "")
      message = condition.get("message", "")
      return condition["type"], f"{reason}: {message}" if reason else message
  return None, ""


def replica_count(trainjob: Mapping[str, Any]) -> int:
  return int(((trainjob.get("spec") or {}).get("trainer") or {}).get("numNodes") or 1)


def replica_key(pod: Mapping[str, Any]) -> str:
  """One replica across JobSet restarts (the pods' names change: generateName): its
  replicated Job, Job index and completion index."""
  meta = pod.get("metadata") or {}
  labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
  return (f"{labels.get(REPLICATED_JOB_LABEL, '?')}-{labels.get(JOB_INDEX_LABEL, '?')}-"
          f"{annotations.get(COMPLETION_INDEX_ANNOTATION, '?')}")


def hostnames(jobset: str, replicated_job: str, job_index: int, nodes: int,
              subdomain: Optional[str] = None) -> List[str]:
  """``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>`` for each pod index
  (kubeflow/trainer v2.1.0 plugins/jobset/jobset.go:227; subdomain defaults to the
  JobSet's name, jobset v0.10.1 jobset_controller.go:835-844)."""
  return [f"{jobset}-{replicated_job}-{job_index}-{i}.{subdomain or jobset}"
          for i in range(nodes)]


def tf_config_from_jobset(environ: Mapping[str, str]) -> Optional[str]:
  """TF_CONFIG for this replica, from the variables the runtime and the Job controller
  set (see the module docstring): every node's stable hostname and port as the
  ``worker`` list, and this pod's completion index as the task index. None when this is
  not a JobSet replica of this runtime, or it is the only node (as the TFJob operator
  gives one replica no TF_CONFIG). Raises ValueError naming a variable that is set but
  malformed."""
  names = (ENV_JOBSET_NAME, ENV_REPLICATED_JOB, ENV_JOB_INDEX, ENV_COMPLETION_INDEX,
           ENV_NUM_NODES)
  if not all(environ.get(name) for name in names[:2]):
    return None
  missing = [name for name in names if not environ.get(name)]
  if missing:
    raise ValueError(f"A JobSet replica of {RUNTIME_NAME} needs {', '.join(missing)} to "
                     f"build TF_CONFIG. Received: "
                     + ", ".join(f"{n}={environ.get(n)!r}" for n in names))

  def integer(name: str, minimum: int) -> int:
    try:
      value = int(environ[name])
    except ValueError:
      value = minimum - 1
    if value < minimum:
      raise ValueError(f"{name} must be an integer >= {minimum}. Received: {environ[name]!r}")
    return value
  nodes = integer(ENV_NUM_NODES, 1)
  index = integer(ENV_COMPLETION_INDEX, 0)
  port = integer(ENV_PORT, 1) if environ.get(ENV_PORT) else TF_PORT
  if index >= nodes:
    raise ValueError(f"{ENV_COMPLETION_INDEX}={index} is not below {ENV_NUM_NODES}={nodes}")
  if nodes == 1:
    return None
  hosts = hostnames(environ[ENV_JOBSET_NAME], environ[ENV_REPLICATED_JOB],
                    integer(ENV_JOB_INDEX, 0), nodes)
  return json.dumps({"cluster": {"worker": [f"{h}:{port}" for h in hosts]},
                     "task": {"type": "worker", "index": index}})


def all_access(*accesses: Sequence[Tuple[str, str, str]]) -> Tuple[Tuple[str, str, str], ...]:
  """The union of several REQUIRED_ACCESS lists, in first-seen order."""
  out: List[Tuple[str, str, str]] = []
  for access in accesses:
    out.extend(a for a in access if a not in out)
  return tuple(out)
