"""A fake Kubernetes API server with the Kubeflow training operator and a kubelet
behind it, for tests/test_kubeflow_tfjob.py. Real HTTP on 127.0.0.1; clients use the
real `kubernetes` package.

Each rule follows the real source, cited where it is implemented:
  [pod.go]     kubeflow/training-operator v1.9.0 pkg/controller.v1/common/pod.go
  [tfjob]      ... pkg/controller.v1/tensorflow/tfjob_controller.go
  [util.go]    ... pkg/controller.v1/tensorflow/util.go
  [status.go]  ... pkg/util/status.go
  [train_util] ... pkg/util/train/train_util.go
  [core/pod]   ... pkg/core/pod.go
  [strategy]   kubernetes pkg/registry/core/pod/strategy.go (validateContainer)
  [kubelet]    kubernetes pkg/kubelet/kubelet_pods.go (validateContainerLogStatus)
  [images]     kubernetes pkg/kubelet/images/image_manager.go (EnsureImageExists), commit
               00a3928; back-off imageBackOffPeriod = 10 s doubling (flowcontrol.Backoff.Next)
               to MaxImageBackOff = 300 s, pkg/kubelet/kubelet.go
  [pod_control] kubeflow/training-operator v1.9.0 pkg/controller.v1/control/pod_control.go:153
               (FailedCreatePodReason, "Error creating: %v")
  [events]     kubernetes staging/src/k8s.io/client-go/tools/record/events_cache.go, commit
               00080d4: EventCorrelator = aggregation (10 distinct messages per source,
               object, type and reason in 600 s, then "(combined from similar events): ")
               and a spam filter (burst 25 per source and object, refill 1 per 300 s)
  [event-ttl]  kube-apiserver --event-ttl default 1h (cmd/kube-apiserver/app/options)
Kubeflow Trainer v2 (TrainJob -> JobSet -> Indexed Jobs -> pods):
  [tj-webhook] kubeflow/trainer v2.1.0 pkg/runtime/core/trainingruntime.go:252-262
               (ValidateObjects: the TrainingRuntime must exist, else 422 on spec.runtimeRef);
               the TrainingRuntime and TrainJob webhooks' rules per release, dry runs
               included (see trainjob_webhook_errors); [tj-default] runtimePatches[].time
  [tj-build]   ... pkg/runtime/framework/plugins/jobset/jobset.go:237-307 (the JobSet, named
               like the TrainJob, owned by it; parallelism = completions = numNodes) and
               builder.go:113-170 (replicas 1; image, command, args, resourcesPerNode, env
               on container "node" of the Job labelled trainjob-ancestor-step: trainer);
               pkg/runtime/core/trainingruntime.go:190-236 (podTemplateOverrides merged)
  [tj-status]  ... plugins/jobset/jobset.go:309-338 (Complete/Failed copied from the
               JobSet's Completed/Failed, reason and message)
  [js-webhook] kubernetes-sigs/jobset v0.10.1 pkg/webhooks/jobset_webhook.go:112-139
               (successPolicy All, completionMode Indexed, restartPolicy OnFailure,
               enableDNSHostnames and publishNotReadyAddresses true)
  [js-ctrl]    ... pkg/controllers/jobset_controller.go:287-300 (Jobs of an older
               restart-attempt are deleted), 694-729 (constructJob: name, subdomain),
               765-797 (labels and annotations), 835-844 (subdomain = JobSet name)
  [js-fail]    ... pkg/controllers/failure_policy.go:45-78 (first matching rule, else
               RestartJobSet), 209-241 (FailJobSet; RestartJobSet up to maxRestarts, then
               ReachedMaxRestarts), 337-339 (" (first failed job: <job>)"); messages in
               pkg/constants/constants.go:41-52,87-92
  [job-ctrl]   kubernetes pkg/controller/job/job_controller.go (Indexed pods: hostname
               <job>-<index>, generateName <job>-<index>-, completion-index annotation and
               label; backoffLimit -> BackoffLimitExceeded "Job has reached the specified
               backoff limit"; activeDeadlineSeconds -> DeadlineExceeded "Job was active
               longer than specified deadline"; active pods deleted when the Job fails),
               indexed_job_utils.go (JOB_COMPLETION_INDEX from the annotation),
               pod_failure_policy.go ("Container %s for pod %s/%s failed with exit code %v
               matching %v rule at index %d", reason PodFailurePolicy),
               pkg/controller/controller_utils.go (FailedCreate "Error creating: %v")
  [prune]      kubernetes apiextensions-apiserver pkg/apiserver/schema/pruning/algorithm.go
               (unknown fields dropped against the CRD's structural schema, on every write)
  [tfjob-crd]  kubeflow/trainer v1.9.4 manifests/base/crds/kubeflow.org_tfjobs.yaml (the
               TFJob CRD's structural schema: spec :46-149, runPolicy :52-128, replica specs
               :134-149, template.metadata :156-177, template.spec :178 = core/v1 PodSpec)
  [job.go]     kubeflow/trainer v1.9.4 pkg/controller.v1/common/job.go: ReconcileJobs
               :98-141 (a finished job: CleanUpResources), :208-247 (past
               activeDeadlineSeconds: "Job %s has failed because it was active longer than
               specified deadline", event and condition reason TFJobFailed), :420-453
               (CleanupJob: the job is deleted ttlSecondsAfterFinished after
               completionTime); DeletePodsAndServices :43-70 (cleanPodPolicy None keeps
               pods of a finished job, Running deletes Running and Pending ones); pkg/core/
               job.go:82-91 (PastActiveDeadline from status.startTime, set on the first
               reconcile, tfjob_controller.go:394-396); tensorflow_defaults.go:52-53
               (cleanPodPolicy defaults to None)
  [3420]       kubeflow/trainer#3420 (v1.9.4): past the deadline the Failed condition is set
               BEFORE DeletePodsAndServices, so cleanPodPolicy None keeps the pods; v1.9.0 to
               v1.9.3 deleted them first (job.go:216-245 at v1.9.3), whatever the policy
  [gc]         kubernetes pkg/controller/garbagecollector/garbagecollector.go
               (attemptToDeleteItem: a dependent whose owners are all absent is deleted,
               background propagation; a namespaced owner is looked up in the dependent's
               own namespace, so one elsewhere counts as absent); the operator's pods are
               owned by their TFJob, the TFJob by the KFP pod when the executor says so
  [tj-crd]     the TrainJob CRD's x-kubernetes-validations on metadata.name, read from
               tests/crds/trainjobs-<release>.yaml (kubeflow/trainer v2.1.0
               pkg/apis/trainer/v1alpha1/trainjob_types.go:37-38; none at v2.0.0, whose
               TrainJob webhook checks the name instead: [tj-webhook])
  [tj-ctrl]    kubeflow/trainer v2.1.0 pkg/controller/trainjob_controller.go:111-129: a
               failed JobSet apply records a Warning event TrainJobResourcesCreationFailed
               "TrainJob resources reconciliation failed: %.950v" on the TrainJob, sets no
               condition and retries (v2.0.0 :132-136, v2.2.0 :129-133, v2.3.0 :114-118);
               a controller not running (trainer_controller_running, jobset_controller_
               running, operator_running False) acts on nothing
  [tj-override] podSpecOverrides (v2.0), podTemplateOverrides (v2.1), runtimePatches
               (v2.2, v2.3) merged into the trainer Job's pod spec (see pod_overrides)
  [js-validate] JobSet's validating webhook vjobset.kb.io (see jobset_webhook_errors)
  [dry-run]    kubernetes apiserver: a create with ?dryRun=All is admitted (webhooks,
               pruning) and answered but not stored
  [rbac]       kubernetes pkg/apis/rbac/v1/evaluation_helpers.go (RuleAllows and the
               *Matches helpers; see rule_allows)
  [sigterm]    kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go (killContainer:
               SIGTERM, SIGKILL after terminationGracePeriodSeconds, default 30)
  [downward]   kubernetes pkg/kubelet/kubelet_pods.go (podFieldSelectorRuntimeValue:
               metadata.labels['k'] / metadata.annotations['k'] in env valueFrom.fieldRef)

The operator reconciles once per GET of the TFJob (the executor polls with GET), after
the kubelet has moved every pod one step, so that a test is deterministic. What each
replica's container does is scripted per incarnation (the operator recreates a pod on
a retryable exit): `Exit(code, reason)` runs one step then terminates; `Stuck(reason,
message)` waits forever (image pull); `Unschedulable(message)` is never scheduled.
When the namespace has Istio injection (the default here, as in multi-user Kubeflow),
a pod without `sidecar.istio.io/inject: "false"` gets a second container,
`istio-proxy`, that keeps running, so the pod stays in phase Running.
"""
import copy
import datetime
import dataclasses
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional
from urllib.parse import parse_qs, urlparse

CONTAINER = "tensorflow"  # TFJobDefaultContainerName, tensorflow_types.go:26
ISTIO_PROXY = "istio-proxy"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
NO_EXIT_CODE = 0xbeef  # "magic number" when the container has not terminated [pod.go:340]

TRAINER_V2 = "trainer.kubeflow.org/v1alpha1"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # [js-ctrl]
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOB_NAME_LABEL_BATCH = "batch.kubernetes.io/job-name"  # [job-ctrl]
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"  # [tj-build]

# [prune] The API server drops every field a CRD's structural schema does not name
# (kubernetes staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning/
# algorithm.go). The schemas are the real CRDs of each release, vendored in tests/crds/
# (each file's header names the repository, tag and path; trimmed by tests/crds/trim_crd.py:
# an embedded core/v1 type is pruned against the `kubernetes` client's model of it).
CRD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "crds")
# Trainer release -> the JobSet release its go.mod pins (kubeflow/trainer go.mod at each tag:
# sigs.k8s.io/jobset v0.8.2, v0.10.1, v0.11.1, v0.12.0). The JobSet each installs
# (manifests/third-party/jobset/kustomization.yaml) is the same, except v2.2.0's v0.11.0,
# whose CRD, API and webhook equal v0.11.1's (git diff v0.11.0 v0.11.1 -- config/components/
# crd api pkg/webhooks is empty).
TRAINER_RELEASES = {"v2.0.0": "v0.8.2", "v2.1.0": "v0.10.1", "v2.2.0": "v0.11.1",
                    "v2.3.0": "v0.12.0"}
TFJOB_RELEASE = "v1.9.4"  # kubeflow/trainer v1.9.4 manifests/base/crds/kubeflow.org_tfjobs.yaml
_CRDS: Dict[str, dict] = {}


def crd_schema(plural: str, release: str) -> dict:
  """The openAPIV3Schema of tests/crds/<plural>-<release>.yaml (cached)."""
  key = f"{plural}-{release}"
  if key not in _CRDS:
    import yaml  # pylint: disable=g-import-not-at-top
    with open(os.path.join(CRD_DIR, key + ".yaml")) as f:
      crd = yaml.safe_load(f)
    (version,) = [v for v in crd["spec"]["versions"] if v["storage"]]
    _CRDS[key] = version["schema"]["openAPIV3Schema"]
  return _CRDS[key]


def prune_crd(value, schema, root=True):
  """[prune] against a CRD's structural schema: properties keep only the fields they
  name, additionalProperties is a map, items a list; x-kubernetes-preserve-unknown-fields
  keeps a subtree (x-fake-model: pruned against that `kubernetes` client model). At the
  root apiVersion, kind and metadata are kept (metadata is ObjectMeta, always)."""
  if "x-fake-model" in schema:
    return _prune_model(value, schema["x-fake-model"])
  if schema.get("x-kubernetes-preserve-unknown-fields"):
    return copy.deepcopy(value)
  if isinstance(value, list):
    return [prune_crd(v, schema.get("items") or {}, False) for v in value]
  if not isinstance(value, dict):
    return value
  props = schema.get("properties")
  if props is None:
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
      return {k: prune_crd(v, extra, False) for k, v in value.items()}
    return {} if schema.get("type") == "object" else copy.deepcopy(value)
  keep = {"apiVersion", "kind", "metadata"} if root else set()
  return {k: (copy.deepcopy(v) if k in keep else prune_crd(v, props[k], False))
          for k, v in value.items() if k in props or k in keep}


# Kept for the hand-written shape some tests pass (None: whole; [x]; {"*": x}; "model:X").
def prune(value, schema):
  """[prune]: a copy of `value` without the fields `schema` does not name. A schema is
  None (kept whole), [item], {"*": value} (a map), a dict of fields, or "model:<Name>"
  (a `kubernetes` client model, walked through its attribute_map and openapi_types)."""
  if schema is None:
    return copy.deepcopy(value)
  if isinstance(schema, str):
    return _prune_model(value, schema[len("model:"):])
  if isinstance(schema, list):
    return [prune(v, schema[0]) for v in value] if isinstance(value, list) else value
  if not isinstance(value, dict):
    return value
  if "*" in schema:
    return {k: prune(v, schema["*"]) for k, v in value.items()}
  return {k: prune(v, schema[k]) for k, v in value.items() if k in schema}


def _prune_model(value, model):
  from kubernetes import client  # pylint: disable=g-import-not-at-top
  if model.startswith("list["):
    return [_prune_model(v, model[5:-1]) for v in value] if isinstance(value, list) else value
  if model.startswith("dict("):
    inner = model[5:-1].split(", ", 1)[1]
    return ({k: _prune_model(v, inner) for k, v in value.items()} if isinstance(value, dict)
            else value)
  cls = getattr(client, model, None)
  if cls is None or not isinstance(value, dict):  # str, int, object, ...: a leaf.
    return copy.deepcopy(value)
  by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
  return {k: _prune_model(v, cls.openapi_types[by_json[k]]) for k, v in value.items()
          if k in by_json}


# [js-validate] JobSet's validating webhook "vjobset.kb.io" (kubernetes-sigs/jobset
# pkg/webhooks/jobset_webhook.go: ValidateCreate v0.10.1 :157-272, validateFailurePolicy
# :322-369; the same rules at v0.8.2 :306,331, v0.11.1 :364,389 and v0.12.0 :418,465).
# Vendored: the failure-policy rule name format and lengths (v0.10.1 :313-316), the
# reasons a rule may name (validOnJobFailureReasons, :70-76), and the DNS-1035 checks of
# the generated Job and pod names (:221-241; placement.GenJobName/GenPodName,
# pkg/util/placement/placement.go:14-22, plus the 5-character generateName suffix).
JOBSET_RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
JOBSET_RULE_NAME_LENGTH = (1, 128)
JOBSET_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                          "MaxFailedIndexesExceeded", "PodFailurePolicy")
# k8s.io/apimachinery pkg/util/validation/validation.go: IsDNS1035Label (dns1035LabelFmt,
# DNS1035LabelMaxLength = 63); the TFJob webhook's name check (kubeflow/trainer v1.9.4
# pkg/webhooks/tensorflow/tfjob_webhook.go:74, NameIsDNS1035Label) and the TrainJob CRD's
# metadata.name rules (kubeflow/trainer v2.1.0 trainjob_types.go:37-38, v2.2.0 and v2.3.0
# :36-37; v2.0.0 has none: tests/crds/trainjobs-v2.0.0.yaml).
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns1035_errors(value):
  errors = []
  if len(value) > 63:
    errors.append("must be no more than 63 characters")
  if not DNS1035.match(value):
    errors.append("a DNS-1035 label must consist of lower case alphanumeric characters or "
                  "'-', start with an alphabetic character, and end with an alphanumeric "
                  "character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
                  "'[a-z]([-a-z0-9]*[a-z0-9])?')")
  return errors


def trainjob_name_errors(name, release):
  """[tj-crd] The TrainJob CRD's x-kubernetes-validations on metadata.name, read from the
  vendored CRD of `release` (rules 'matches(...)' and 'size(...) <= 63')."""
  rules = crd_schema("trainjobs", release).get("x-kubernetes-validations") or []
  errors = []
  for rule in rules:
    found = re.match(r"self\.metadata\.name\.matches\('(.*)'\)$", rule["rule"])
    if found and not re.match(found.group(1), name):
      errors.append(rule["message"])
    found = re.match(r"size\(self\.metadata\.name\) <= (\d+)$", rule["rule"])
    if found and len(name) > int(found.group(1)):
      errors.append(rule["message"])
  return "; ".join(errors)


# [tj-webhook] Trainer's own admission webhooks (all sideEffects=None, so the API server
# calls them on a ?dryRun=All create too: kubeflow/trainer v2.0.0 pkg/webhooks/
# trainjob_webhook.go:46, v2.3.0 :36,94).
# * TrainingRuntime (trainingruntime_webhook.go validateReplicatedJobs, v2.1.0-v2.3.0; v2.3.0
#   :66-105): a replicated Job labelled trainjob-ancestor-step=trainer has replicas 1 and a
#   container named "node" (expectedContainerNames, v2.3.0 :40-44); v2.0.0 checks only the
#   replicas.
# * TrainJob: v2.0.0 checks the name is a DNS-1035 label (trainjob_webhook.go:57-60; from
#   v2.1.0 the CRD does, see [tj-crd]); then the runtime's ValidateObjects, whose JobSet plugin
#   checks the placement field against the runtime's replicated Jobs: a target Job must exist
#   (pkg/runtime/framework/plugins/jobset/jobset.go v2.0.0:134-138 podSpecOverrides,
#   v2.1.0:125-130 podTemplateOverrides, v2.2.0:134-139 and v2.3.0:181-186 runtimePatches), a
#   container it names must exist in that Job (v2.3.0 :193-202), and a runtimePatch's manager
#   must be a domain-prefixed path (validation.IsDomainPrefixedPath: v2.2.0 :129, v2.3.0 :176;
#   k8s.io/apimachinery pkg/util/validation/validation.go).
# [tj-default] From v2.2.0 the mutating webhook stamps each runtimePatch's `time` on create
# (trainjob_webhook.go v2.2.0 and v2.3.0 :64-70).
TRAINER_CONTAINER = "node"  # constants.Node (pkg/constants/constants.go)
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")


def domain_prefixed_path_errors(value):
  """k8s.io/apimachinery IsDomainPrefixedPath: "<DNS-1123 subdomain>/<HTTP path>"."""
  host, _, path = value.partition("/")
  if not host or not path:
    return [f'Invalid value: "{value}": must be a domain-prefixed path (such as "acme.io/foo")']
  errors = []
  if len(host) > 253 or not _DNS1123_SUBDOMAIN.match(host):
    errors.append(f'Invalid value: "{host}": a lowercase RFC 1123 subdomain must consist of lower '
                  "case alphanumeric characters, '-' or '.', and must start and end with an "
                  "alphanumeric character")
  if not _HTTP_PATH.match(path):
    errors.append(f'Invalid value: "{path}": Invalid path')
  return errors


def _runtime_jobs(runtime):
  """{replicated Job name: its container and init container names} of a runtime."""
  out = {}
  for rjob in runtime["spec"]["template"]["spec"].get("replicatedJobs") or []:
    pod = ((rjob.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
    out[rjob["name"]] = {c.get("name") for c in (pod.get("containers") or [])
                         + (pod.get("initContainers") or [])}
  return out


def trainingruntime_webhook_errors(runtime, release):
  """[tj-webhook] validator.trainingruntime.trainer.kubeflow.org's messages, [] if admitted."""
  errors = []
  for i, rjob in enumerate(runtime["spec"]["template"]["spec"].get("replicatedJobs") or []):
    labels = ((rjob.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if labels.get(ANCESTOR_LABEL) != "trainer":
      continue
    path = f"spec.template.spec.replicatedJobs[{i}]"
    if rjob.get("replicas", 1) != 1:
      errors.append(f"{path}.replicas: Invalid value: {rjob['replicas']}: always must be 1")
    if release != "v2.0.0" and TRAINER_CONTAINER not in _runtime_jobs(runtime)[rjob["name"]]:
      errors.append(f"{path}.template.spec.template.spec.containers: Invalid value: ...: must "
                    "contain the required container for the ancestor: trainer")
  return errors


def trainjob_webhook_errors(trainjob, runtime, release):
  """[tj-webhook] validator.trainjob.trainer.kubeflow.org's messages for a TrainJob as the
  API server has it (pruned by `release`'s CRD), [] if admitted."""
  errors = []
  if release == "v2.0.0":
    errors += [f'metadata.name: Invalid value: "{trainjob["metadata"]["name"]}": {e}'
               for e in dns1035_errors(trainjob["metadata"]["name"])]
  jobs, spec = _runtime_jobs(runtime), trainjob.get("spec") or {}
  targets = []  # (field, replicated Job name, pod spec it sets)
  for o in spec.get("podSpecOverrides") or []:
    targets += [("podSpecOverrides", t.get("name"), o) for t in o.get("targetJobs") or []]
  for o in spec.get("podTemplateOverrides") or []:
    targets += [("podTemplateOverrides", t.get("name"), o.get("spec") or {})
                for t in o.get("targetJobs") or []]
  for patch in spec.get("runtimePatches") or []:
    errors += [f"spec.runtimePatches.manager: {e}"
               for e in domain_prefixed_path_errors(patch.get("manager") or "")]
    template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
    targets += [("runtimePatches", r.get("name"), (((r.get("template") or {}).get("spec") or {})
                                                   .get("template") or {}).get("spec") or {})
                for r in template.get("replicatedJobs") or []]
  for field, name, pod in targets:
    if name not in jobs:
      errors.append(f"spec.{field}: Invalid value: ...: must not have "
                    + ("replicated job" if field == "runtimePatches" else "targetJob")
                    + " that doesn't exist in the runtime job template")
      continue
    for kind in ("initContainers", "containers"):
      for c in pod.get(kind) or []:
        if c.get("name") not in jobs[name]:
          errors.append(f"spec.{field}: Invalid value: ...: must not have {kind[:-1]} that "
                        f"doesn't exist in the runtime job {name}")
  return errors


def jobset_webhook_errors(jobset, release):  # pylint: disable=unused-argument  (same rules)
  """[js-validate] The messages JobSet's webhook answers for `jobset`, [] when admitted."""
  errors = []
  name, spec = jobset["metadata"]["name"], jobset["spec"]
  for i, rjob in enumerate(spec.get("replicatedJobs") or []):
    replicas = rjob.get("replicas", 1)
    job_name = f"{name}-{rjob['name']}-{replicas - 1}"
    errors += [f"spec.replicatedJobs[{i}].name: Invalid value: \"{job_name}\": {e}"
               for e in dns1035_errors(job_name)]
    job = rjob["template"]["spec"]
    if job.get("completionMode") == "Indexed" and job.get("completions") is not None:
      pod_name = f"{name}-{rjob['name']}-{replicas - 1}-{job['completions'] - 1}-abcde"
      errors += [f"spec.replicatedJobs[{i}].name: Invalid value: \"{job_name}\": {e}"
                 for e in dns1035_errors(pod_name)]
  rules = (spec.get("failurePolicy") or {}).get("rules") or []
  for rule in rules:
    low, high = JOBSET_RULE_NAME_LENGTH
    if not low <= len(rule.get("name", "")) <= high:
      errors.append(f"invalid failure policy rule name of length {len(rule.get('name', ''))}, "
                    f"the rule name must be at least {low} characters long and at most {high} "
                    f"characters long")
    if not JOBSET_RULE_NAME.match(rule.get("name", "")):
      errors.append(f"invalid failure policy rule name '{rule.get('name', '')}', a failure "
                    "policy rule name must start with an alphabetic character, optionally "
                    "followed by a string of alphanumeric characters or '_,:', and must end "
                    "with an alphanumeric character or '_'")
    for reason in rule.get("onJobFailureReasons") or []:
      if reason not in JOBSET_FAILURE_REASONS:
        errors.append(f"invalid job failure reason '{reason}' in failure policy is not a "
                      "recognized job failure reason")
  names = [r.get("name") for r in rules]
  for dup in sorted({n for n in names if names.count(n) > 1}):
    errors.append(f"rule names are not unique, rules with indices "
                  f"{[i for i, n in enumerate(names) if n == dup]} all have the same name '{dup}'")
  return errors


def tfjob_webhook_errors(tfjob):
  """The TFJob validating webhook (kubeflow/trainer v1.9.4 pkg/webhooks/tensorflow/
  tfjob_webhook.go:72-129): a DNS-1035 name; every replica has containers, each with an
  image, one named "tensorflow"; at most one Chief or Master."""
  name, specs = tfjob["metadata"]["name"], (tfjob.get("spec") or {}).get("tfReplicaSpecs")
  errors = [f'metadata.name: Invalid value: "{name}": should match: {",".join(dns1035_errors(name))}'
            ] if dns1035_errors(name) else []
  if not specs:
    return errors + ["spec.tfReplicaSpecs: Required value: must be required"]
  for rtype, rspec in specs.items():
    path = f"spec.tfReplicaSpecs[{rtype}].template.spec.containers"
    containers = (((rspec or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    if not containers:
      errors.append(f"{path}: Required value: must be specified")
    errors += [f"{path}[{i}].image: Required value: must be required"
               for i, c in enumerate(containers) if not c.get("image")]
    if not any(c.get("name") == CONTAINER for c in containers):
      errors.append(f"{path}: Required value: must have at least one container with name "
                    f"{CONTAINER}")
  if sum(1 for r in specs if r in ("Chief", "Master")) > 1:
    errors.append("spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role")
  return errors


def pod_overrides(trainjob_spec, replicated_job):
  """[tj-override] The pod-spec fields a TrainJob sets on `replicated_job`'s pods, from
  whichever field its release's CRD kept (pruning dropped the others):
  podSpecOverrides (v2.0.0 pkg/runtime/core/trainingruntime.go:182-), podTemplateOverrides
  .spec (v2.1.0 :190-), runtimePatches...replicatedJobs[].template.spec.template.spec
  (v2.2.0 :203-, v2.3.0 :251-)."""
  out = []
  for o in trainjob_spec.get("podSpecOverrides") or []:
    if any(t["name"] == replicated_job for t in o.get("targetJobs") or []):
      out.append({k: v for k, v in o.items() if k not in ("targetJobs", "containers",
                                                          "initContainers")})
  for o in trainjob_spec.get("podTemplateOverrides") or []:
    if any(t["name"] == replicated_job for t in o.get("targetJobs") or []):
      out.append(o.get("spec") or {})
  for patch in trainjob_spec.get("runtimePatches") or []:
    template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
    for rjob in template.get("replicatedJobs") or []:
      if rjob.get("name") == replicated_job:
        pod = ((((rjob.get("template") or {}).get("spec") or {}).get("template") or {})
               .get("spec") or {})
        out.append({k: v for k, v in pod.items() if k not in ("containers", "initContainers")})
  return out


def rule_allows(rule, verb, group, resource, name):
  """[rbac] One PolicyRule against a request (kubernetes pkg/apis/rbac/v1/
  evaluation_helpers.go: VerbMatches, APIGroupMatches, ResourceMatches,
  ResourceNameMatches; "*" matches all): a rule with resourceNames allows only a request
  naming one of them, so never a list or a create."""
  def has(values, value):
    return "*" in values or value in values
  return (has(rule.get("verbs") or [], verb) and has(rule.get("apiGroups") or [], group)
          and has(rule.get("resources") or [], resource)
          and (not rule.get("resourceNames") or name in rule["resourceNames"]))


@dataclasses.dataclass(frozen=True)
class Exit:
  code: int
  reason: str = ""  # e.g. OOMKilled; else Completed (0) or Error, as the kubelet says.


@dataclasses.dataclass(frozen=True)
class Stuck:
  reason: str = "ImagePullBackOff"
  message: str = 'Back-off pulling image "registry.example.com/missing:1"'


@dataclasses.dataclass(frozen=True)
class PullFails:
  """An image that cannot be pulled: each pull fails with `message` (ErrImagePull), and
  between pulls the kubelet backs off (ImagePullBackOff) [images]."""
  message: str = ('rpc error: code = NotFound desc = failed to pull and unpack image '
                  '"registry.example.com/missing:1": not found')


@dataclasses.dataclass(frozen=True)
class CreateRefused:
  """The API server refuses the replica pod (a ResourceQuota, an admission webhook): no
  pod, only the operator's FailedCreatePod event on the TFJob [pod_control]."""
  message: str = ('pods "{pod}" is forbidden: exceeded quota: gpu-quota, requested: '
                  'requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: '
                  'requests.nvidia.com/gpu=4')


IMAGE_BACKOFF_SECONDS, MAX_IMAGE_BACKOFF_SECONDS = 10, 300  # [images]
AGGREGATE_MAX_EVENTS, AGGREGATE_INTERVAL_SECONDS = 10, 600  # [events]
SPAM_BURST, SPAM_REFILL_SECONDS = 25, 300  # [events]
EVENT_TTL_SECONDS = 3600  # [event-ttl]


@dataclasses.dataclass(frozen=True)
class Hang:
  """Starts and keeps running until its pod is deleted (a replica that trains on, or
  waits for a peer, with no executor left to stop it)."""


@dataclasses.dataclass(frozen=True)
class Unschedulable:
  message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@dataclasses.dataclass(frozen=True)
class Run:
  """Runs the container's command for real (``python`` is this interpreter), with the
  container's env (and the operator's TF_CONFIG). When `oom_kill_when()` turns true
  while it runs, the process gets SIGKILL, as from the kernel's OOM killer, and the
  kubelet reports exit code 137 with reason OOMKilled."""
  oom_kill_when: Optional[Callable[[], bool]] = None


def _free_port() -> int:
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def _retryable(code: int) -> bool:
  return code >= 128  # IsRetryableExitCode [train_util:24]


class FakeCluster:
  """API server + training operator + kubelet. `script` maps "worker-0" (replica type
  in lower case, index) to the outcomes of its successive incarnations; the last one
  repeats. Unscripted replicas exit 0."""

  def __init__(self, script: Optional[Dict[str, List]] = None, istio_injection=True,
               local_network=False, operator_version="v1.9.4", seconds_per_poll=10.0,
               trainer_version="v2.1.0"):
    self.script = dict(script or {})
    # How far the cluster's clock moves per GET of a job: 10 s, the executor's poll; a
    # test whose replicas are real processes passes its real poll period, so that
    # activeDeadlineSeconds [job.go] is timed as the processes run.
    self.seconds_per_poll = seconds_per_poll
    # [3420]: what happens to a cleanPodPolicy None job's pods at its deadline.
    self.operator_version = tuple(int(x) for x in operator_version.lstrip("v").split("."))
    # [gc] Pods that exist besides the replicas (the KFP step's): (namespace, name) -> uid.
    self.owner_pods: Dict[tuple, str] = {}
    self.local_network = local_network
    self.ports: Dict[str, int] = {}
    self.istio_injection = istio_injection
    self.requests = []  # (method, path, query, body)
    self.jobs: Dict[str, dict] = {}
    self.pods: Dict[str, dict] = {}
    self.incarnations: Dict[str, int] = {}
    self.outcomes: Dict[str, object] = {}
    self.events: List[dict] = []
    self.procs: Dict[str, subprocess.Popen] = {}
    self.oom_killed: Dict[str, bool] = {}
    self._logdir = tempfile.mkdtemp(prefix="fake_kube_")
    self.now = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    self.deleted_jobs: List[str] = []
    self.fail_next = 0  # GETs to answer with 503 before answering again.
    self.events_forbidden = False  # A Role without `list events` (standalone KFP's).
    # (verb, group, resource[/subresource]) the caller may not do: answered by
    # SelfSubjectAccessReview (authorization.k8s.io/v1; kubernetes
    # pkg/registry/authorization/selfsubjectaccessreview/rest.go) and enforced with 403.
    self.denied = set()
    # [rbac] When set, the Role rules the step's account is bound to: the access review and
    # every guarded request are evaluated against them (`denied` still refuses on top).
    self.role_rules: Optional[List[dict]] = None
    # The Trainer v2 release served (tests/crds/*-<release>.yaml) and its JobSet's.
    self.trainer_version = trainer_version
    self.jobset_version = TRAINER_RELEASES[trainer_version]
    # [tj-ctrl] A controller that is not running (CRDs installed without it, or stopped).
    self.trainer_controller_running = True
    # [tj-webhook-down] Trainer's webhooks are served by the controller manager's Service
    # (kubeflow/trainer v2.1.0 manifests/base/webhook/patch.yaml:1-9, manifests/base/manager/
    # manager.yaml:59-74) with failurePolicy Fail: when its pods are gone (scaled to 0,
    # crash-looping) while the webhook configuration stays, the API server refuses every
    # TrainJob create, dry runs included, with a 500 (k8s.io/apiserver pkg/admission/plugin/
    # webhook: "failed calling webhook"). False models that; CRDs installed without the
    # manager (no webhook configuration) is trainer_controller_running = False alone.
    self.trainer_webhook_reachable = True
    # The same for JobSet: its webhooks (mjobset.kb.io, vjobset.kb.io, failurePolicy fail:
    # kubernetes-sigs/jobset v0.10.1 pkg/webhooks/jobset_webhook.go:78,154) are served by
    # jobset-webhook-service, which selects the controller manager's pods (config/components/
    # webhook/service.yaml:12,19-20; namePrefix jobset-, config/default/kustomization.yaml:9).
    # False: the Trainer controller's JobSet apply fails with the apiserver's 500 [tj-ctrl].
    self.jobset_webhook_reachable = True
    self.operator_running = True  # The training operator (TFJob).
    self.jobset_controller_running = True
    # [sigterm] Pod name -> how its process ended when the pod was deleted: "SIGTERM" (it
    # exited within the grace period) or "SIGKILL" (it did not).
    self.terminations: Dict[str, str] = {}
    # Secrets {(namespace, name): {key: text}}: GET /api/v1/namespaces/<ns>/secrets/<name>
    # answers `data` base64-encoded; the kubelet resolves env secretKeyRef from them.
    self.secrets: Dict[tuple, Dict[str, str]] = {}
    # What API discovery answers (GET /apis/<group>/<version>): the training operator's
    # TFJob by default; Kubeflow 1.11's default install serves only Trainer v2's kinds.
    self.served = {"kubeflow.org/v1": ["tfjobs", "pytorchjobs", "mpijobs"]}
    # Kubeflow Trainer v2 and JobSet (see TRAINER_V2 below).
    self.runtimes: Dict[tuple, dict] = {}  # (namespace, name) -> TrainingRuntime
    self.trainjobs: Dict[str, dict] = {}
    self.jobsets: Dict[str, dict] = {}
    self.batch_jobs: Dict[str, dict] = {}
    self.deleted_trainjobs: List[str] = []
    self._pull_backoff: Dict[str, tuple] = {}  # pod uid -> (last pull, back-off) [images]
    self._aggregates: Dict[tuple, tuple] = {}  # [events] aggregation records
    self._spam: Dict[str, tuple] = {}  # [events] token buckets: (tokens, last refill)
    self._event_keys: Dict[tuple, dict] = {}  # eventObserve's cache: key -> event
    self.on_create = None  # Called in the server thread after a TFJob POST is stored,
    # before it is answered.
    self._uids = itertools.count(1)
    self._lock = threading.Lock()
    fake = self

    class Handler(BaseHTTPRequestHandler):

      def log_message(self, *args):
        pass

      def reply(self, code, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def handle_any(self):
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        query = parse_qs(url.query)
        fake.requests.append((self.command, url.path, query, body))
        if fake.fail_next and self.command == "GET":  # An API server having a bad moment.
          fake.fail_next -= 1
          return self.reply(*fake.status(503, "ServiceUnavailable", "etcdserver: leader changed"))
        with fake._lock:  # pylint: disable=protected-access
          code, answer, kind = fake.route(self.command, url.path.strip("/").split("/"),
                                          query, body)
        if self.command == "POST" and url.path.endswith(("/tfjobs", "/trainjobs")) \
            and fake.on_create is not None and not query.get("dryRun"):
          fake.on_create()  # Stored, not yet answered: the client waits on the reply.
        self.reply(code, answer, kind)

      do_GET = do_POST = do_DELETE = handle_any

    self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

  # --- HTTP plumbing ------------------------------------------------------------------

  def __enter__(self):
    self.thread.start()
    return self

  def __exit__(self, *exc):
    for proc in self.procs.values():
      if proc.poll() is None:
        proc.kill()
        proc.wait()
    self.server.shutdown()
    self.server.server_close()

  @property
  def host(self):
    return f"http://127.0.0.1:{self.server.server_address[1]}"

  def api_client(self):
    from kubernetes import client  # pylint: disable=g-import-not-at-top
    configuration = client.Configuration()
    configuration.host = self.host
    return client.ApiClient(configuration)

  @staticmethod
  def status(code, reason, message):
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "message": message, "reason": reason, "code": code}, "application/json"

  def route(self, method, parts, query, body):
    if method == "GET" and len(parts) == 3 and parts[0] == "apis":
      group_version = "/".join(parts[1:])
      if group_version not in self.served:
        return self.status(404, "NotFound", "the server could not find the requested resource")
      return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                   "resources": [{"name": r, "namespaced": True, "kind": r[:-1]}
                                 for r in self.served[group_version]]}, "application/json"
    if parts == ["apis", "authorization.k8s.io", "v1", "selfsubjectaccessreviews"] \
        and method == "POST":
      attrs = body["spec"]["resourceAttributes"]
      resource = attrs["resource"] + ("/" + attrs["subresource"] if attrs.get("subresource")
                                      else "")
      allowed = self.allowed(attrs["verb"], attrs.get("group", ""), resource,
                             attrs.get("name", ""))
      return 201, dict(body, status={"allowed": allowed}), "application/json"
    if parts[:3] == ["apis", "trainer.kubeflow.org", "v1alpha1"] and len(parts) >= 6 \
        and TRAINER_V2 in self.served:
      return self.route_trainer_v2(method, parts[4], parts[5],
                                   parts[6] if len(parts) > 6 else None, body,
                                   dry_run=query.get("dryRun") == ["All"])
    if parts[:3] == ["apis", "jobset.x-k8s.io", "v1alpha2"] and len(parts) == 7 \
        and parts[5] == "jobsets" and method == "GET":
      if parts[6] not in self.jobsets:
        return self.status(404, "NotFound", f'jobsets.jobset.x-k8s.io "{parts[6]}" not found')
      return 200, self.jobsets[parts[6]], "application/json"
    if parts[:3] == ["apis", "kubeflow.org", "v1"] and len(parts) >= 6 and parts[5] == "tfjobs":
      name = parts[6] if len(parts) > 6 else None
      if method == "POST":
        return self.create_job(body)
      if name not in self.jobs:
        return self.status(404, "NotFound", f'tfjobs.kubeflow.org "{name}" not found')
      if method == "GET":
        self.tick(name)
        if name not in self.jobs:  # Deleted by its TTL [job.go] in this reconcile.
          return self.status(404, "NotFound", f'tfjobs.kubeflow.org "{name}" not found')
        return 200, self.jobs[name], "application/json"
      if method == "DELETE":
        self.delete_tfjob(name)
        return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}, \
            "application/json"
    if parts[:2] == ["api", "v1"] and len(parts) >= 5 and parts[4] == "pods":
      if len(parts) == 5 and method == "GET":
        selector = (query.get("labelSelector") or [""])[0]
        key, _, value = selector.partition("=")
        items = [p for p in self.pods.values() if p["metadata"]["labels"].get(key) == value]
        return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                     "items": copy.deepcopy(items)}, "application/json"
      if len(parts) == 7 and parts[6] == "log" and method == "GET":
        return self.log(parts[5], (query.get("container") or [""])[0])
    if parts[:2] == ["api", "v1"] and len(parts) == 6 and parts[4] == "secrets" \
        and method == "GET":
      if not self.allowed("get", "", "secrets", parts[5]):
        return self.status(403, "Forbidden", f'secrets "{parts[5]}" is forbidden: User '
                           '"system:serviceaccount:kubeflow:pipeline-runner" cannot get '
                           f'resource "secrets" in API group "" in the namespace "{parts[3]}"')
      if (parts[3], parts[5]) not in self.secrets:
        return self.status(404, "NotFound", f'secrets "{parts[5]}" not found')
      import base64  # pylint: disable=g-import-not-at-top
      data = {k: base64.b64encode(v.encode()).decode()
              for k, v in self.secrets[(parts[3], parts[5])].items()}
      return 200, {"kind": "Secret", "apiVersion": "v1", "type": "Opaque", "data": data,
                   "metadata": {"name": parts[5], "namespace": parts[3]}}, "application/json"
    if parts[:2] == ["api", "v1"] and len(parts) == 5 and parts[4] == "events":
      if self.events_forbidden:
        return self.status(403, "Forbidden", 'events is forbidden: User "system:serviceaccount:'
                           'kubeflow:pipeline-runner" cannot list resource "events" in API '
                           f'group "" in the namespace "{parts[3]}"')
      horizon = self.now - datetime.timedelta(seconds=EVENT_TTL_SECONDS)
      self.events = [e for e in self.events if self.parse_time(e["lastTimestamp"]) > horizon]
      wanted = dict(term.split("=", 1) for term in
                    (query.get("fieldSelector") or [""])[0].split(",") if term)
      items = [e for e in self.events if e["metadata"]["namespace"] == parts[3] and all(
          e["involvedObject"].get(k.split(".", 1)[1]) == v for k, v in wanted.items())]
      return 200, {"kind": "EventList", "apiVersion": "v1", "metadata": {},
                   "items": copy.deepcopy(items)}, "application/json"
    return self.status(404, "NotFound", "the server could not find the requested resource")

  def allowed(self, verb, group, resource, name=""):
    """[rbac] SelfSubjectAccessReview's answer: no rule of `role_rules` allows it (when
    set), or it is in `denied`, is a refusal."""
    if (verb, group, resource) in self.denied:
      return False
    return self.role_rules is None or any(rule_allows(r, verb, group, resource, name)
                                          for r in self.role_rules)

  # --- API server: TFJobs and pod logs -----------------------------------------------

  def create_job(self, body):
    name = body["metadata"]["name"]
    refused = tfjob_webhook_errors(body)
    if refused:  # The TFJob webhook "validate-kubeflow-org-v1-tfjob" (tfjob_webhook.go).
      return self.status(422, "Invalid", 'admission webhook "validator.tfjob.training-operator.'
                         f'kubeflow.org" denied the request: {"; ".join(refused)}')
    if name in self.jobs:
      return self.status(409, "AlreadyExists", f'tfjobs.kubeflow.org "{name}" already exists')
    job = prune_crd(body, crd_schema("tfjobs", TFJOB_RELEASE))  # [prune] [tfjob-crd]
    job["spec"].setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")  # [job.go]
    job["metadata"]["uid"] = f"job-uid-{next(self._uids)}"
    # The operator's first reconcile adds Created, naming the job without its namespace
    # (onOwnerCreateFunc, kubeflow/trainer v1.9.4 pkg/controller.v1/tensorflow/
    # tfjob_controller.go:651-662).
    job["status"] = {"conditions": [], "replicaStatuses": {}}
    if self.operator_running:
      self.set_condition(job, "Created", "TFJobCreated", f"TFJob {name} is created.")
    self.jobs[name] = job
    stored = copy.deepcopy(job)
    self.collect_garbage()  # [gc] An owner that does not exist deletes the job at once.
    return 201, stored, "application/json"

  def delete_tfjob(self, name):
    """DELETE, by a client, the TTL or the garbage collector; the pods follow [gc]."""
    del self.jobs[name]
    self.deleted_jobs.append(name)
    for pod in [p for p, v in self.pods.items()
                if v["metadata"]["labels"].get(JOB_NAME_LABEL) == name]:
      self.delete_pod(pod)  # The garbage collector, via the operator's ownerRefs.

  def collect_garbage(self):
    """[gc] Deletes every TFJob and TrainJob whose owners are all absent: an owner Pod is
    looked up by name in the job's own namespace and must have the referenced uid."""
    for jobs, delete in ((self.jobs, self.delete_tfjob), (self.trainjobs, self.delete_trainjob)):
      for name, job in list(jobs.items()):
        refs = job["metadata"].get("ownerReferences") or []
        namespace = job["metadata"]["namespace"]
        if refs and all(self.owner_pods.get((namespace, r["name"])) != r["uid"] for r in refs):
          delete(name)

  def delete_owner_pod(self, namespace, name):
    """The KFP step's pod is deleted (the workflow's TTL, or by hand) [gc]."""
    del self.owner_pods[(namespace, name)]
    self.collect_garbage()

  def advance(self, seconds):
    """Time passes with no client polling: the operator's work queue still syncs each
    job (AddAfter for its deadline, tfjob_controller.go:397-401, and for its TTL,
    job.go:446) and the garbage collector runs."""
    self.now += datetime.timedelta(seconds=seconds)
    for name in list(self.jobs):
      job = self.jobs[name]
      if self.finished(job):
        self.clean_up(job)
      elif self.past_deadline(job):
        self.fail_past_deadline(job)
    self.collect_garbage()

  def log(self, pod_name, container):
    pod = self.pods.get(pod_name)
    if pod is None:
      return self.status(404, "NotFound", f'pods "{pod_name}" not found')
    names = [c["name"] for c in pod["spec"]["containers"]]
    if not container:  # validateContainer [strategy]
      if len(names) == 1:
        container = names[0]
      else:
        return self.status(400, "BadRequest",
                           f"a container name must be specified for pod {pod_name}, "
                           f"choose one of: [{' '.join(names)}]")
    elif container not in names:
      return self.status(400, "BadRequest",
                         f"container {container} is not valid for pod {pod_name}")
    state = next(s["state"] for s in pod["status"].get("containerStatuses") or [{}]
                 if s.get("name") == container) if pod["status"].get("containerStatuses") \
        else {"waiting": {"reason": "Pending"}}
    if "waiting" in state:  # validateContainerLogStatus [kubelet]
      return self.status(400, "BadRequest",
                         f'container "{container}" in pod "{pod_name}" is waiting to '
                         f'start: {state["waiting"]["reason"]}')
    lines = pod["metadata"]["annotations"].get("fake/log", "")
    if pod_name in self.procs:
      with open(self.procs[pod_name].args_log) as f:
        lines += f.read()
    return 200, lines, "text/plain"

  # --- Operator: conditions [status.go] ----------------------------------------------

  @staticmethod
  def set_condition(job, kind, reason, message):
    """setCondition + filterOutCondition [status.go:103-149]."""
    conditions = job["status"]["conditions"]
    if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions):
      return  # Do nothing once Failed.
    current = next((c for c in conditions if c["type"] == kind), None)
    if current and current["status"] == "True" and current["reason"] == reason:
      return
    kept = []
    for c in conditions:
      if {kind, c["type"]} == {"Restarting", "Running"} or c["type"] == kind:
        continue
      if kind in ("Failed", "Succeeded") and c["type"] == "Running":
        c = dict(c, status="False")
      kept.append(c)
    kept.append({"type": kind, "status": "True", "reason": reason, "message": message})
    job["status"]["conditions"] = kept

  @staticmethod
  def finished(job):
    return any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True"
               for c in job["status"]["conditions"])

  @staticmethod
  def parse_time(stamp):
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc)

  def record_event(self, job, kind, reason, message):
    """The operator's EventRecorder through client-go's EventCorrelator [events]:
    EventAggregate, then eventObserve (an identical event is counted, not repeated),
    then the spam filter, which drops the write when the object's bucket is empty."""
    stamp = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    name = job["metadata"]["name"]
    group = (name, kind, reason)  # EventAggregatorByReasonFunc: all but the message.
    messages, last = self._aggregates.get(group, (set(), None))
    if last is None or (self.now - last).total_seconds() > AGGREGATE_INTERVAL_SECONDS:
      messages = set()
    messages = messages | {message}
    self._aggregates[group] = (messages, self.now)
    key = (name, kind, reason, message)
    if len(messages) >= AGGREGATE_MAX_EVENTS:
      message = "(combined from similar events): " + message
      key = group  # The aggregate event is one record, overwritten.
    tokens, refilled = self._spam.get(name, (SPAM_BURST, self.now))
    tokens = min(SPAM_BURST, tokens + (self.now - refilled).total_seconds() / SPAM_REFILL_SECONDS)
    if tokens < 1:
      self._spam[name] = (tokens, self.now)
      return  # Filtered as spam: never reaches the API server.
    self._spam[name] = (tokens - 1, self.now)
    event = self._event_keys.get(key)
    if event is not None and any(e is event for e in self.events):  # Not expired.
      event["count"] += 1
      event["lastTimestamp"] = stamp
      event["message"] = message
      return
    self.events.append({
        "metadata": {"name": f"{job['metadata']['name']}.{len(self.events)}",
                     "namespace": job["metadata"]["namespace"]},
        "involvedObject": {"kind": "TFJob", "apiVersion": "kubeflow.org/v1",
                           "name": job["metadata"]["name"],
                           "namespace": job["metadata"]["namespace"],
                           "uid": job["metadata"]["uid"]},
        "type": kind, "reason": reason, "message": message, "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp,
        "source": {"component": "tfjob-controller"}})
    self._event_keys[key] = self.events[-1]

  # --- One step of kubelet and operator -----------------------------------------------

  def tick(self, name):
    job = self.jobs[name]
    if self.finished(job):
      self.clean_up(job)  # ReconcileJobs of a finished job: CleanUpResources [job.go].
      return
    self.now += datetime.timedelta(seconds=self.seconds_per_poll)
    for pod in self.pods.values():
      if pod["metadata"]["labels"].get(JOB_NAME_LABEL) == name:
        self.kubelet_step(pod)
    if not self.operator_running:  # [tj-ctrl] The CRD is served, nothing reconciles it.
      return
    if self.past_deadline(job):
      self.fail_past_deadline(job)
      return
    self.reconcile(job)
    stamp = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    job["status"].setdefault("startTime", stamp)  # First reconcile [job.go]
    if self.finished(job):
      job["status"].setdefault("completionTime", stamp)

  # --- Operator: deadline, cleanPodPolicy, TTL [job.go] [3420] -----------------------

  def past_deadline(self, job):
    """PastActiveDeadline (pkg/core/job.go:82-91)."""
    deadline = job["spec"]["runPolicy"].get("activeDeadlineSeconds")
    start = job["status"].get("startTime")
    return deadline is not None and start is not None and \
        (self.now - self.parse_time(start)).total_seconds() >= deadline

  def job_pods(self, job):
    return [p for p, v in self.pods.items()
            if v["metadata"]["labels"].get(JOB_NAME_LABEL) == job["metadata"]["name"]]

  def delete_pods_and_services(self, job):
    """DeletePodsAndServices [job.go:43-70]: cleanPodPolicy is ignored until the job has
    a Succeeded or Failed condition."""
    policy, finished = job["spec"]["runPolicy"]["cleanPodPolicy"], self.finished(job)
    if finished and policy == "None":
      return
    for pod in self.job_pods(job):
      if finished and policy == "Running" and \
          self.pods[pod]["status"]["phase"] not in ("Running", "Pending"):
        continue
      self.delete_pod(pod)

  def fail_past_deadline(self, job):
    """The jobExceedsLimit branch of ReconcileJobs [job.go:208-247], in v1.9.4's order
    (Failed, then DeletePodsAndServices) or, before it, the reverse [3420]."""
    message = (f"Job {job['metadata']['name']} has failed because it was active longer "
               f"than specified deadline")
    job["status"].setdefault("completionTime", self.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    if self.operator_version < (1, 9, 4):
      self.delete_pods_and_services(job)  # Not yet finished: every pod goes.
    self.record_event(job, "Normal", "TFJobFailed", message)
    self.set_condition(job, "Failed", "TFJobFailed", message)
    if self.operator_version >= (1, 9, 4):
      self.delete_pods_and_services(job)
    self.cleanup_job(job)

  def clean_up(self, job):
    """CleanUpResources [job.go:361-388] of a finished job."""
    self.delete_pods_and_services(job)
    self.cleanup_job(job)

  def cleanup_job(self, job):
    """CleanupJob [job.go:420-453]: delete the job ttlSecondsAfterFinished after its
    completionTime (its pods follow through their ownerReferences [gc])."""
    ttl = job["spec"]["runPolicy"].get("ttlSecondsAfterFinished")
    done = job["status"].get("completionTime")
    if ttl is not None and done is not None and \
        self.now > self.parse_time(done) + datetime.timedelta(seconds=ttl):
      self.delete_tfjob(job["metadata"]["name"])

  def delete_pod(self, pod_name):
    """[sigterm] The kubelet's killContainer: SIGTERM, then SIGKILL once the pod's
    terminationGracePeriodSeconds (default 30, kubernetes pkg/apis/core/v1/defaults.go;
    DefaultTerminationGracePeriodSeconds) has passed without the process ending
    (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go killContainer; the
    runtime's StopContainer(timeout)). Waited for in real time: the process is real."""
    proc = self.procs.pop(pod_name, None)
    if proc is not None and proc.poll() is None:
      grace = self.pods[pod_name]["spec"].get("terminationGracePeriodSeconds", 30)
      proc.send_signal(signal.SIGTERM)
      try:
        proc.wait(timeout=grace)
        self.terminations[pod_name] = "SIGTERM"
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        self.terminations[pod_name] = "SIGKILL"
    del self.pods[pod_name]

  def outcome(self, replica, incarnation):
    outcomes = self.script.get(replica) or [Exit(0)]
    return outcomes[min(incarnation, len(outcomes) - 1)]

  def kubelet_step(self, pod):
    status = pod["status"]
    outcome = self.outcomes[pod["metadata"]["name"]]
    if isinstance(outcome, Unschedulable):
      status["conditions"] = [{"type": "PodScheduled", "status": "False",
                               "reason": "Unschedulable", "message": outcome.message}]
      return
    if status["phase"] in ("Succeeded", "Failed"):
      return
    main = pod["spec"]["containers"][0]["name"]  # tensorflow (TFJob) or node (TrainJob)
    tf_status = next(s for s in status["containerStatuses"] if s["name"] == main)
    if isinstance(outcome, Stuck):
      tf_status["state"] = {"waiting": {"reason": outcome.reason, "message": outcome.message}}
      return
    if isinstance(outcome, PullFails):
      tf_status["state"] = {"waiting": self.pull(pod, tf_status["image"], outcome)}
      return
    if isinstance(outcome, Run):
      if not self.run_step(pod, outcome, tf_status):
        return
      outcome = Exit(tf_status["state"]["terminated"]["exitCode"],
                     tf_status["state"]["terminated"]["reason"])
    elif "waiting" in tf_status["state"]:  # ContainerCreating -> Running
      status["phase"] = "Running"
      for s in status["containerStatuses"]:
        s["state"] = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
        s["ready"] = True
      pod["metadata"]["annotations"]["fake/log"] = (
          f"[trainer] {pod['metadata']['name']} (uid {pod['metadata']['uid']}) started\n")
      return
    if isinstance(outcome, Hang):
      return  # Trains on.
    reason = outcome.reason or ("Completed" if outcome.code == 0 else "Error")
    if "running" in tf_status["state"] or "waiting" in tf_status["state"]:
      tf_status["state"] = {"terminated": {"exitCode": outcome.code, "reason": reason}}
      tf_status["ready"] = False
      pod["metadata"]["annotations"]["fake/log"] += (
          f"[trainer] {pod['metadata']['name']} exiting with {outcome.code}\n")
    if any("running" in s["state"] for s in status["containerStatuses"]):
      return  # istio-proxy still runs: the pod stays Running.
    status["phase"] = "Succeeded" if outcome.code == 0 else "Failed"

  def pull(self, pod, image, outcome):
    """One sync of EnsureImageExists for an image that cannot be pulled [images]: in
    back-off (IsInBackOffSinceUpdate: now - last pull < back-off) ImagePullBackOff, else
    a pull that fails, ErrImagePull, and Backoff.Next (10 s, then doubled to 300 s)."""
    uid = pod["metadata"]["uid"]
    last, backoff = self._pull_backoff.get(uid, (None, 0))
    if last is not None and (self.now - last).total_seconds() < backoff:
      return {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}
    backoff = IMAGE_BACKOFF_SECONDS if last is None else min(2 * backoff,
                                                             MAX_IMAGE_BACKOFF_SECONDS)
    self._pull_backoff[uid] = (self.now, backoff)
    return {"reason": "ErrImagePull", "message": outcome.message}

  def run_step(self, pod, outcome, tf_status):
    """Starts, watches or OOM-kills the real process; True once it has terminated."""
    name = pod["metadata"]["name"]
    status = pod["status"]
    if name not in self.procs:
      container = pod["spec"]["containers"][0]
      argv = list(container["command"]) + list(container.get("args") or [])
      if argv[0] == "python":
        argv[0] = sys.executable  # This venv stands for the image's python.
      env = dict(os.environ, **self.container_env(pod, container))
      if self.local_network and pod["spec"].get("subdomain"):
        env.update(self.local_hosts(pod, env))
      log = os.path.join(self._logdir, f"{name}-{pod['metadata']['uid']}.log")
      with open(log, "w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
      proc.args_log = log
      self.procs[name] = proc
      status["phase"] = "Running"
      for s in status["containerStatuses"]:
        s["state"] = {"running": {"startedAt": self.now.strftime("%Y-%m-%dT%H:%M:%SZ")}}
      return False
    proc = self.procs[name]
    if proc.poll() is None and outcome.oom_kill_when is not None and outcome.oom_kill_when():
      proc.send_signal(signal.SIGKILL)
      proc.wait()
      self.oom_killed[name] = True
    if proc.poll() is None:
      return False
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    reason = "OOMKilled" if self.oom_killed.pop(name, False) else (
        "Completed" if code == 0 else "Error")
    tf_status["state"] = {"terminated": {"exitCode": code, "reason": reason}}
    return True

  def new_pod(self, job, rtype, index):
    name = job["metadata"]["name"]
    replica = f"{rtype.lower()}-{index}"
    pod_name = f"{name}-{replica}"
    incarnation = self.incarnations.get(pod_name, 0)
    self.incarnations[pod_name] = incarnation + 1
    template = copy.deepcopy(job["spec"]["tfReplicaSpecs"][rtype]["template"])
    annotations = dict((template.get("metadata") or {}).get("annotations") or {})
    spec = template["spec"]
    spec["restartPolicy"] = "Never"  # ExitCode -> Never [core/pod:81-88]
    if self.is_distributed(job):  # TF_CONFIG only when distributed [util.go:74]
      for c in spec["containers"]:
        if c["name"] == CONTAINER:
          c.setdefault("env", []).append({"name": "TF_CONFIG",
                                          "value": self.tf_config(job, rtype, index)})
    if self.istio_injection and annotations.get("sidecar.istio.io/inject") != "false":
      spec["containers"].append({"name": ISTIO_PROXY, "image": "docker.io/istio/proxyv2"})
    outcome = self.outcome(replica, incarnation)
    self.pods[pod_name] = self.pending_pod(
        pod_name, job["metadata"]["namespace"], annotations,
        {JOB_NAME_LABEL: name, REPLICA_TYPE_LABEL: rtype.lower(), REPLICA_INDEX_LABEL: str(index)},
        spec)
    self.outcomes[pod_name] = outcome

  def pending_pod(self, pod_name, namespace, annotations, labels, spec):
    """A new pod as the API server stores it: Pending, scheduled, containers creating."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": namespace,
                     "uid": f"pod-uid-{next(self._uids)}", "annotations": annotations,
                     "labels": labels},
        "spec": spec,
        "status": {"phase": "Pending",
                   "conditions": [{"type": "PodScheduled", "status": "True"}],
                   "containerStatuses": [
                       {"name": c["name"], "ready": False, "restartCount": 0,
                        "image": c["image"], "imageID": "",
                        "state": {"waiting": {"reason": "ContainerCreating"}}}
                       for c in spec["containers"]]},
    }

  @staticmethod
  def is_distributed(job):
    return sum(r.get("replicas", 1) for r in job["spec"]["tfReplicaSpecs"].values()) != 1

  def tf_config(self, job, rtype, index):
    """genTFConfigJSONStr (tensorflow.go:112): every replica's service address. With
    `local_network` the services are 127.0.0.1 ports, fixed per job like a Service."""
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    cluster = {}
    for r, spec in job["spec"]["tfReplicaSpecs"].items():
      hosts = []
      for i in range(spec.get("replicas", 1)):
        service = f"{name}-{r.lower()}-{i}"
        if self.local_network:
          if service not in self.ports:
            self.ports[service] = _free_port()
          hosts.append(f"127.0.0.1:{self.ports[service]}")
        else:
          hosts.append(f"{service}.{ns}.svc:2222")  # TFJobDefaultPort
      cluster[r.lower()] = hosts
    return json.dumps({"cluster": cluster, "task": {"type": rtype.lower(), "index": index},
                       "environment": "cloud"})

  def reconcile(self, job):
    """ReconcilePods [pod.go:300-375] then UpdateJobStatus [tfjob:373-519]."""
    name = job["metadata"]["name"]
    statuses = {}
    for rtype, spec in job["spec"]["tfReplicaSpecs"].items():
      counts = {"active": 0, "succeeded": 0, "failed": 0}
      for index in range(spec.get("replicas", 1)):
        pod_name = f"{name}-{rtype.lower()}-{index}"
        pod = self.pods.get(pod_name)
        if pod is None:
          refused = self.outcome(f"{rtype.lower()}-{index}", self.incarnations.get(pod_name, 0))
          if isinstance(refused, CreateRefused):  # [pod_control]
            self.record_event(job, "Warning", "FailedCreatePod",
                              "Error creating: " + refused.message.format(pod=pod_name))
            continue
          self.new_pod(job, rtype, index)
          continue
        code = NO_EXIT_CODE
        for s in pod["status"].get("containerStatuses") or []:
          if s["name"] == CONTAINER and "terminated" in s["state"]:
            code = s["state"]["terminated"]["exitCode"]
            self.record_event(job, "Normal", "ExitedWithCode",  # [pod.go:346]
                              f"Pod: {pod['metadata']['namespace']}.{pod_name} exited "
                              f"with code {code}")
        phase = pod["status"]["phase"]
        if phase == "Failed":
          if spec.get("restartPolicy") == "ExitCode" and _retryable(code) or \
              spec.get("restartPolicy") in ("OnFailure", "Always"):
            self.delete_pod(pod_name)  # Recreated on the next reconcile.
            message = f"job {name} is restarting because {rtype} replica(s) failed."
            self.record_event(job, "Warning", "TFJobRestarting", message)
            self.set_condition(job, "Restarting", "TFJobRestarting", message)
          elif spec.get("restartPolicy") == "ExitCode":  # An event and the condition
            message = f'job "{name}" is failing because "{rtype}" replica(s) failed.'  # [pod.go:367-372]
            self.record_event(job, "Warning", "TFJobFailed", message)
            self.set_condition(job, "Failed", "TFJobFailed", message)
        key = {"Running": "active", "Succeeded": "succeeded", "Failed": "failed"}.get(phase)
        if key:  # updateJobReplicaStatuses counts the pod as it was seen.
          counts[key] += 1
      statuses[rtype] = counts
    job["status"]["replicaStatuses"] = {r: {k: v for k, v in c.items() if v}
                                        for r, c in statuses.items()}
    self.update_job_status(job, statuses)

  def update_job_status(self, job, statuses):
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    replicas = job["spec"]["tfReplicaSpecs"]
    restarting = next((c for c in job["status"]["conditions"] if c["type"] == "Restarting"),
                      None)
    worker0 = self.pods.get(f"{name}-worker-0")
    worker0_completed = "Worker" not in replicas or bool(
        worker0 and worker0["status"]["phase"] == "Succeeded" and any(
            s["name"] == CONTAINER and s["state"].get("terminated", {}).get("exitCode") == 0
            for s in worker0["status"]["containerStatuses"]))  # IsWorker0Completed [tfjob:608]
    has_chief = "Chief" in replicas or "Master" in replicas
    for rtype in ("Chief", "Eval", "Master", "PS", "Worker"):  # allTypes order [tfjob:419]
      if rtype not in replicas:
        continue
      counts = statuses[rtype]
      expected = replicas[rtype].get("replicas", 1) - counts["succeeded"]
      if has_chief:
        if rtype in ("Chief", "Master"):
          if counts["active"] > 0:
            self.set_condition(job, "Running", "TFJobRunning", f"TFJob {ns}/{name} is running.")
          if expected == 0:
            self.set_condition(job, "Succeeded", "TFJobSucceeded",
                               f"TFJob {ns}/{name} successfully completed.")
      elif rtype == "Worker":
        if expected == 0 or worker0_completed:
          self.set_condition(job, "Succeeded", "TFJobSucceeded",
                             f"TFJob {ns}/{name} successfully completed.")
        elif counts["active"] > 0:
          self.set_condition(job, "Running", "TFJobRunning", f"TFJob {ns}/{name} is running.")
      if counts["failed"] > 0:
        if restarting is not None:
          self.set_condition(job, "Restarting", restarting["reason"], restarting["message"])
        else:
          self.set_condition(job, "Failed", "TFJobFailed",
                             f"TFJob {ns}/{name} has failed because {counts['failed']} "
                             f"{rtype} replica(s) failed.")

  # --- Kubeflow Trainer v2: TrainJob -> JobSet -> Indexed Jobs -> pods ----------------

  def serve_trainer_v2_only(self):
    """What Kubeflow 1.11's default install serves: Trainer v2's kinds, no TFJob."""
    self.served = {TRAINER_V2: ["trainjobs", "trainingruntimes", "clustertrainingruntimes"],
                   "jobset.x-k8s.io/v1alpha2": ["jobsets"]}

  def route_trainer_v2(self, method, namespace, plural, name, body, dry_run=False):
    if plural == "trainingruntimes":
      if method == "POST":
        stored = prune_crd(body, crd_schema("trainingruntimes", self.trainer_version))
        refused = trainingruntime_webhook_errors(stored, self.trainer_version)
        if refused:  # [tj-webhook]
          return self.status(422, "Invalid", 'admission webhook "validator.trainingruntime.'
                             'trainer.kubeflow.org" denied the request: ' + "; ".join(refused))
        self.runtimes[(namespace, body["metadata"]["name"])] = stored
        return 201, stored, "application/json"
      if method == "GET" and (namespace, name) in self.runtimes:
        return 200, self.runtimes[(namespace, name)], "application/json"
      return self.status(404, "NotFound",
                         f'trainingruntimes.trainer.kubeflow.org "{name}" not found')
    if plural != "trainjobs":
      return self.status(404, "NotFound", "the server could not find the requested resource")
    if method == "POST":
      return self.create_trainjob(namespace, body, dry_run)
    if name not in self.trainjobs:
      return self.status(404, "NotFound", f'trainjobs.trainer.kubeflow.org "{name}" not found')
    if method == "GET":
      self.tick_trainjob(name)
      return 200, self.trainjobs[name], "application/json"
    if method == "DELETE":
      self.delete_trainjob(name)
      return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}, \
          "application/json"
    return self.status(405, "MethodNotAllowed", method)

  def delete_trainjob(self, name):
    del self.trainjobs[name]
    self.deleted_trainjobs.append(name)
    self.jobsets.pop(name, None)  # The garbage collector: JobSet, Jobs, pods.
    for job in [j for j, v in self.batch_jobs.items()
                if v["metadata"]["labels"].get(JOBSET_NAME_LABEL) == name]:
      self.delete_batch_job(job)

  def create_trainjob(self, namespace, body, dry_run=False):
    name = body["metadata"]["name"]
    if not self.trainer_webhook_reachable:  # [tj-webhook-down] The first webhook called.
      hook, path = (("validator", "validate") if self.trainer_version in ("v2.0.0", "v2.1.0")
                    else ("defaulter", "mutate"))
      return self.status(
          500, "InternalError", f'Internal error occurred: failed calling webhook "{hook}.'
          f'trainjob.trainer.kubeflow.org": failed to call webhook: Post "https://kubeflow-'
          f'trainer-controller-manager.kubeflow-system.svc:443/{path}-trainer-kubeflow-org-'
          f'v1alpha1-trainjob?timeout=10s": no endpoints available for service '
          f'"kubeflow-trainer-controller-manager"')
    invalid = trainjob_name_errors(name, self.trainer_version)
    if invalid:  # [tj-crd] the CRD's x-kubernetes-validations on metadata.name
      return self.status(422, "Invalid", f'TrainJob.trainer.kubeflow.org "{name}" is invalid: '
                         f'<nil>: Invalid value: "object": {invalid}')
    if name in self.trainjobs and not dry_run:
      return self.status(409, "AlreadyExists",
                         f'trainjobs.trainer.kubeflow.org "{name}" already exists')
    ref = body["spec"]["runtimeRef"]
    if ref.get("kind", "ClusterTrainingRuntime") != "TrainingRuntime" or \
        (namespace, ref["name"]) not in self.runtimes:  # [tj-webhook]
      return self.status(
          422, "Invalid", f'admission webhook "validator.trainjob.trainer.kubeflow.org" denied '
          f'the request: spec.runtimeRef: Invalid value: {json.dumps(ref)}: '
          f'trainingruntimes.trainer.kubeflow.org "{ref["name"]}" not found: specified '
          f'trainingRuntime must be created before the TrainJob is created')
    job = prune_crd(body, crd_schema("trainjobs", self.trainer_version))
    if self.trainer_version not in ("v2.0.0", "v2.1.0"):  # [tj-default]
      for patch in job["spec"].get("runtimePatches") or []:
        patch.setdefault("time", "2026-01-01T00:00:00Z")
    refused = trainjob_webhook_errors(job, self.runtimes[(namespace, ref["name"])],
                                      self.trainer_version)
    if refused:  # [tj-webhook], on a dry run too.
      return self.status(422, "Invalid", 'admission webhook "validator.trainjob.trainer.kubeflow.'
                         'org" denied the request: ' + "; ".join(refused))
    if dry_run:  # [dry-run] Admitted and pruned, not stored.
      return 201, job, "application/json"
    job["metadata"]["uid"] = f"trainjob-uid-{next(self._uids)}"
    job["status"] = {"conditions": []}
    self.trainjobs[name] = job
    stored = copy.deepcopy(job)
    self.collect_garbage()  # [gc]
    return 201, stored, "application/json"

  @staticmethod
  def true_condition(obj, kind):
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c["type"] == kind and c["status"] == "True"), None)

  def tick_trainjob(self, name):
    trainjob = self.trainjobs[name]
    if self.true_condition(trainjob, "Complete") or self.true_condition(trainjob, "Failed"):
      return
    self.now += datetime.timedelta(seconds=self.seconds_per_poll)
    for pod in list(self.pods.values()):
      if pod["metadata"]["labels"].get(JOBSET_NAME_LABEL) == name:
        self.kubelet_step(pod)
    if not self.trainer_controller_running:  # [tj-ctrl] Nothing reconciles the TrainJob.
      return
    if name not in self.jobsets:
      jobset = self.build_jobset(trainjob)
      refused = jobset_webhook_errors(jobset, self.jobset_version)  # [js-validate]
      error = ('admission webhook "vjobset.kb.io" denied the request: ' + "\n".join(refused)
               if refused else None)
      if not self.jobset_webhook_reachable:
        error = ('Internal error occurred: failed calling webhook "mjobset.kb.io": failed to '
                 'call webhook: Post "https://jobset-webhook-service.kubeflow-system.svc:443/'
                 'mutate-jobset-x-k8s-io-v1alpha2-jobset?timeout=10s": no endpoints available '
                 'for service "jobset-webhook-service"')
      if error:  # [tj-ctrl] The apply fails: an event, and a retry on the next sync.
        self.record_jobset_event(
            trainjob, "Warning", "TrainJobResourcesCreationFailed",
            "TrainJob resources reconciliation failed: " + error[:950])
        return
      self.jobsets[name] = prune_crd(jobset, crd_schema("jobsets", self.jobset_version))
    jobset = self.jobsets[name]
    if not self.jobset_controller_running:  # A JobSet nothing acts on: no Jobs, no pods.
      return
    self.reconcile_jobset(jobset)
    # [tj-status] jobsStatus from the JobSet's replicatedJobsStatus, once it has Jobs.
    jobs = [j for j in self.batch_jobs.values()
            if j["metadata"]["labels"].get(JOBSET_NAME_LABEL) == name]
    if jobs:
      trainjob["status"]["jobsStatus"] = [{"name": rjob["name"], "active": sum(
          1 for p in self.pods.values() if p["metadata"]["labels"].get(JOBSET_NAME_LABEL) == name
          and p["status"]["phase"] in ("Pending", "Running"))}
                                          for rjob in jobset["spec"]["replicatedJobs"]]
    for source, target in (("Completed", "Complete"), ("Failed", "Failed")):  # [tj-status]
      condition = self.true_condition(jobset, source)
      if condition and not self.true_condition(trainjob, target):
        trainjob["status"]["conditions"].append(dict(condition, type=target))

  def build_jobset(self, trainjob):
    """The trainer controller's JobSet [tj-build] after JobSet's webhook [js-webhook]."""
    meta = trainjob["metadata"]
    runtime = self.runtimes[(meta["namespace"], trainjob["spec"]["runtimeRef"]["name"])]
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    trainer = trainjob["spec"].get("trainer") or {}
    nodes = trainer.get("numNodes") or (runtime["spec"].get("mlPolicy") or {}).get("numNodes", 1)
    for rjob in spec["replicatedJobs"]:
      for override in pod_overrides(trainjob["spec"], rjob["name"]):  # [tj-override]
        pod_spec = rjob["template"]["spec"]["template"]["spec"]
        for key, value in override.items():
          pod_spec[key] = dict(pod_spec.get(key) or {}, **value) if isinstance(value, dict) \
              else copy.deepcopy(value)  # Strategic merge: maps merge, lists replace.
      job_spec = rjob["template"]["spec"]
      if (rjob["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR_LABEL) == \
          "trainer":
        rjob["replicas"] = 1
        job_spec["parallelism"] = job_spec["completions"] = nodes
        for container in job_spec["template"]["spec"]["containers"]:
          if container["name"] != "node":
            continue
          for key in ("image", "command", "args"):
            if trainer.get(key):
              container[key] = copy.deepcopy(trainer[key])
          if trainer.get("resourcesPerNode"):
            container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
          env = {e["name"]: e for e in container.get("env") or []}
          env.update({e["name"]: e for e in trainer.get("env") or []})
          container["env"] = list(env.values())
      job_spec.setdefault("completionMode", "Indexed")
      job_spec["template"]["spec"].setdefault("restartPolicy", "OnFailure")
      rjob.setdefault("replicas", 1)
    network = spec.setdefault("network", {})
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    spec.setdefault("successPolicy", {"operator": "All"})
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                         "uid": f"jobset-uid-{next(self._uids)}",
                         "ownerReferences": [{"apiVersion": TRAINER_V2, "kind": "TrainJob",
                                              "name": meta["name"], "uid": meta["uid"],
                                              "controller": True}]},
            "spec": spec, "status": {"conditions": [], "restarts": 0,
                                     "restartsCountTowardsMax": 0}}

  def reconcile_jobset(self, jobset):
    """JobSet's reconcile [js-ctrl], its failure policy [js-fail] and success policy All."""
    if self.true_condition(jobset, "Completed") or self.true_condition(jobset, "Failed"):
      return
    name, restarts = jobset["metadata"]["name"], jobset["status"]["restarts"]
    for job_name, job in list(self.batch_jobs.items()):
      labels = job["metadata"]["labels"]
      if labels[JOBSET_NAME_LABEL] == name and int(labels[RESTART_ATTEMPT_LABEL]) < restarts:
        self.delete_batch_job(job_name)
    subdomain = jobset["spec"]["network"].get("subdomain") or name
    current = []
    for rjob in jobset["spec"]["replicatedJobs"]:
      for index in range(rjob["replicas"]):
        job_name = f"{name}-{rjob['name']}-{index}"
        if job_name not in self.batch_jobs:
          self.batch_jobs[job_name] = self.construct_job(jobset, rjob, index, subdomain)
        current.append(self.batch_jobs[job_name])
    for job in current:
      self.reconcile_batch_job(job)
    failed = [j for j in current if self.true_condition(j, "Failed")]
    if failed:
      self.apply_failure_policy(jobset, failed)
    elif all(self.true_condition(j, "Complete") for j in current):
      self.set_jobset_condition(jobset, "Completed", "AllJobsCompleted",
                                "jobset completed successfully")

  def set_jobset_condition(self, jobset, kind, reason, message):
    jobset["status"]["conditions"].append({
        "type": kind, "status": "True", "reason": reason, "message": message,
        "lastTransitionTime": self.now.strftime("%Y-%m-%dT%H:%M:%SZ")})

  def apply_failure_policy(self, jobset, failed):
    policy = jobset["spec"].get("failurePolicy")
    if policy is None:
      return self.set_jobset_condition(jobset, "Failed", "FailedJobs",
                                       "jobset failed due to one or more job failures "
                                       f"(first failed job: {failed[0]['metadata']['name']})")
    action, job = "RestartJobSet", failed[0]  # defaultFailurePolicyRuleAction
    for rule in policy.get("rules") or []:
      matching = [j for j in failed
                  if self.true_condition(j, "Failed")["reason"] in rule.get("onJobFailureReasons", [])
                  and (not rule.get("targetReplicatedJobs") or
                       j["metadata"]["labels"][REPLICATED_JOB_LABEL] in rule["targetReplicatedJobs"])]
      if matching:
        action, job = rule["action"], matching[0]
        break
    first = job["metadata"]["name"]
    if action == "FailJobSet":
      self.set_jobset_condition(jobset, "Failed", "FailJobSetFailurePolicyAction",
                                f"applying FailJobSet failure policy action (first failed job: {first})")
    elif jobset["status"]["restartsCountTowardsMax"] >= policy.get("maxRestarts", 0):
      self.set_jobset_condition(jobset, "Failed", "ReachedMaxRestarts",
                                "jobset failed due to reaching max number of restarts "
                                f"(first failed job: {first})")
    else:  # Every Job of this attempt is deleted and recreated on the next reconcile.
      jobset["status"]["restarts"] += 1
      jobset["status"]["restartsCountTowardsMax"] += 1
      self.record_jobset_event(jobset, "Warning", "RestartJobSetFailurePolicyAction",
                               f"applying RestartJobSet failure policy action (first failed "
                               f"job: {first})")
    return None

  def record_jobset_event(self, obj, kind, reason, message):
    stamp = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    self.events.append({
        "metadata": {"name": f"{obj['metadata']['name']}.{len(self.events)}",
                     "namespace": obj["metadata"]["namespace"]},
        "involvedObject": {"kind": obj["kind"], "name": obj["metadata"]["name"],
                           "namespace": obj["metadata"]["namespace"]},
        "type": kind, "reason": reason, "message": message, "count": 1,
        "firstTimestamp": stamp, "lastTimestamp": stamp})

  def construct_job(self, jobset, rjob, index, subdomain):
    """constructJob + labelAndAnnotateObject [js-ctrl]."""
    name = jobset["metadata"]["name"]
    job_name = f"{name}-{rjob['name']}-{index}"
    labels = {JOBSET_NAME_LABEL: name, REPLICATED_JOB_LABEL: rjob["name"],
              JOB_INDEX_LABEL: str(index),
              RESTART_ATTEMPT_LABEL: str(jobset["status"]["restarts"]),
              "jobset.sigs.k8s.io/replicatedjob-replicas": str(rjob["replicas"])}
    spec = copy.deepcopy(rjob["template"]["spec"])
    template_meta = spec["template"].setdefault("metadata", {})
    template_meta["labels"] = dict(template_meta.get("labels") or {}, **labels)
    template_meta["annotations"] = dict(template_meta.get("annotations") or {}, **labels)
    if jobset["spec"]["network"].get("enableDNSHostnames"):
      spec["template"]["spec"]["subdomain"] = subdomain
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": job_name, "namespace": jobset["metadata"]["namespace"],
                         "uid": f"job-uid-{next(self._uids)}",
                         "labels": dict((rjob["template"].get("metadata") or {}).get("labels")
                                        or {}, **labels)},
            "spec": spec, "status": {"conditions": [], "failed": 0, "succeeded": 0,
                                     "startTime": self.now.strftime("%Y-%m-%dT%H:%M:%SZ")}}

  def delete_batch_job(self, job_name):
    self.batch_jobs.pop(job_name, None)
    for pod in [p for p, v in self.pods.items()
                if v["metadata"]["labels"].get(JOB_NAME_LABEL_BATCH) == job_name]:
      self.delete_pod(pod)

  def reconcile_batch_job(self, job):
    """The Job controller for an Indexed Job [job-ctrl]."""
    if self.true_condition(job, "Complete") or self.true_condition(job, "Failed"):
      return
    name, spec = job["metadata"]["name"], job["spec"]
    pods = [p for p in self.pods.values()
            if p["metadata"]["labels"].get(JOB_NAME_LABEL_BATCH) == name]
    by_index = {}
    for pod in pods:
      by_index.setdefault(int(pod["metadata"]["annotations"][COMPLETION_INDEX]), []).append(pod)
    failed = [p for p in pods if p["status"]["phase"] == "Failed"]
    job["status"]["failed"] = len(failed)
    for pod in failed:
      for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
        codes = rule.get("onExitCodes") or {}
        for s in pod["status"]["containerStatuses"]:
          code = (s["state"].get("terminated") or {}).get("exitCode")
          if code is None or code == 0 or codes.get("containerName", s["name"]) != s["name"]:
            continue
          inside = code in codes.get("values", [])
          if inside == (codes.get("operator") == "In") and rule["action"] == "FailJob":
            return self.fail_batch_job(job, pods, "PodFailurePolicy",
                                       f"Container {s['name']} for pod {pod['metadata']['namespace']}"
                                       f"/{pod['metadata']['name']} failed with exit code {code} "
                                       f"matching FailJob rule at index {i}")
    deadline = spec.get("activeDeadlineSeconds")
    started = self.parse_time(job["status"]["startTime"])
    if deadline is not None and (self.now - started).total_seconds() >= deadline:
      return self.fail_batch_job(job, pods, "DeadlineExceeded",
                                 "Job was active longer than specified deadline")
    if len(failed) > spec.get("backoffLimit", 6):
      return self.fail_batch_job(job, pods, "BackoffLimitExceeded",
                                 "Job has reached the specified backoff limit")
    succeeded = {i for i, ps in by_index.items()
                 if any(p["status"]["phase"] == "Succeeded" for p in ps)}
    job["status"]["succeeded"] = len(succeeded)
    if len(succeeded) == spec["completions"]:
      job["status"]["conditions"].append({"type": "Complete", "status": "True"})
      return None
    for index in range(spec["completions"]):
      if any(p["status"]["phase"] != "Failed" for p in by_index.get(index, [])):
        continue
      self.new_indexed_pod(job, index)
    return None

  def fail_batch_job(self, job, pods, reason, message):
    job["status"]["conditions"].append({"type": "Failed", "status": "True", "reason": reason,
                                        "message": message,
                                        "lastTransitionTime": self.now.strftime("%Y-%m-%dT%H:%M:%SZ")})
    for pod in pods:  # The Job controller deletes the still active pods.
      if pod["status"]["phase"] not in ("Succeeded", "Failed"):
        self.delete_pod(pod["metadata"]["name"])

  def new_indexed_pod(self, job, index):
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    hostname = f"{name}-{index}"
    replica = f"{labels[REPLICATED_JOB_LABEL]}-{index}"  # The script's key: "node-0".
    incarnation = self.incarnations.get(hostname, 0)
    outcome = self.outcome(replica, incarnation)
    if isinstance(outcome, CreateRefused):  # The API server refuses the pod [job-ctrl].
      pod_name = f"{hostname}-"
      self.record_jobset_event(job, "Warning", "FailedCreate",
                               "Error creating: " + outcome.message.format(pod=pod_name))
      return
    self.incarnations[hostname] = incarnation + 1
    template = copy.deepcopy(job["spec"]["template"])
    annotations = dict(template["metadata"].get("annotations") or {}, **{COMPLETION_INDEX: str(index)})
    pod_labels = dict(template["metadata"].get("labels") or {},
                      **{COMPLETION_INDEX: str(index), JOB_NAME_LABEL_BATCH: name,
                         "batch.kubernetes.io/controller-uid": job["metadata"]["uid"]})
    spec = template["spec"]
    spec["hostname"] = hostname
    for c in spec["containers"]:  # addCompletionIndexEnvVariable [job-ctrl]
      if not any(e["name"] == "JOB_COMPLETION_INDEX" for e in c.get("env") or []):
        c.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {
            "fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}})
    if self.istio_injection and annotations.get("sidecar.istio.io/inject") != "false":
      spec["containers"].append({"name": ISTIO_PROXY, "image": "docker.io/istio/proxyv2"})
    pod_name = f"{hostname}-{next(self._uids):05d}"  # generateName <job>-<index>-
    self.pods[pod_name] = self.pending_pod(pod_name, namespace, annotations, pod_labels, spec)
    self.outcomes[pod_name] = outcome

  def local_hosts(self, pod, env):
    """With `local_network`, a JobSet pod's process maps every hostname of its Job's pods
    (``<job>-<index>.<subdomain>``, [job-ctrl] [js-ctrl]) to a 127.0.0.1 port, fixed
    per hostname like a DNS record: tests/fake_kube_site/sitecustomize.py applies the
    map to the TF_CONFIG the replica derives."""
    job = self.batch_jobs[pod["metadata"]["labels"][JOB_NAME_LABEL_BATCH]]
    port = env.get("TFX_PARALLEL_TF_PORT", "2222")
    hosts = {}
    for index in range(job["spec"]["completions"]):
      host = f"{job['metadata']['name']}-{index}.{pod['spec']['subdomain']}:{port}"
      if host not in self.ports:
        self.ports[host] = _free_port()
      hosts[host] = f"127.0.0.1:{self.ports[host]}"
    site = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_kube_site")
    return {"FAKE_KUBE_HOSTS": json.dumps(hosts),
            "PYTHONPATH": os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH")]))}

  def container_env(self, pod, container):
    """The container's env as the kubelet resolves it, with the downward API's
    metadata.labels['k'] / metadata.annotations['k'] [downward], and secretKeyRef from
    `secrets` in the pod's namespace (kubernetes v1.31 pkg/kubelet/kubelet_pods.go
    makeEnvironmentVariables: a missing secret or key is an error, "couldn't find key
    %v in Secret %v/%v", and the container is not started)."""
    out = {}
    for e in container.get("env") or []:
      if "value" in e:
        out[e["name"]] = e["value"]
        continue
      if "secretKeyRef" in e["valueFrom"]:
        ref, namespace = e["valueFrom"]["secretKeyRef"], pod["metadata"]["namespace"]
        data = self.secrets.get((namespace, ref["name"]))
        if data is None or ref["key"] not in data:
          raise KeyError(f"couldn't find key {ref['key']} in Secret {namespace}/{ref['name']}")
        out[e["name"]] = data[ref["key"]]
        continue
      path = e["valueFrom"]["fieldRef"]["fieldPath"]
      field, _, key = path.partition("['")
      source = {"metadata.labels": "labels", "metadata.annotations": "annotations"}[field]
      out[e["name"]] = pod["metadata"][source].get(key.rstrip("']"), "")
    return out
