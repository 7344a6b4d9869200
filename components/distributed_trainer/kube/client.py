"""The Kubernetes API calls for TFJobs (:class:`TFJobClient`) and Kubeflow Trainer v2's
TrainJobs (:class:`TrainJobClient`), and nothing else: API discovery, the pre-flight
SelfSubjectAccessReview, create/get/delete, pods, events, logs, and the polling ``wait``.

The ``kubernetes`` package is imported inside the calls: it is needed only when a job is
submitted, and the local runs that import the executor do not pay for it."""
import json
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from tfx_parallel.components.distributed_trainer.kube import trainjob
from tfx_parallel.components.distributed_trainer.kube.manifest import (
    CONTAINER_NAME, GROUP, JOB_NAME_LABEL, KIND, PLURAL, REQUIRED_ACCESS, VERSION, replica_count)
from tfx_parallel.components.distributed_trainer.kube.settings import (
    ENV_IMAGE, ENV_PREFIX, UNSCHEDULABLE_GRACE_SECONDS, default_api_client)
from tfx_parallel.components.distributed_trainer.kube.watch import (
    FAILED, RESTARTING, SUCCEEDED, TIMEOUT, PodWatch, TFJobResult, condition_message, job_state)

# Consecutive failed polls (API server 5xx/429, connection errors) tolerated in a wait.
MAX_POLL_ERRORS = 5

# Multi-node training runs as a TFJob (the Kubeflow training operator v1, whose last line
# is release-1.9: v1.9.4) or as a TrainJob of Kubeflow Trainer v2 (Kubeflow 1.11 installs
# v2.1.0 and no TFJob) with this project's TensorFlow runtime (kube/trainjob.py).
TRAINER_V2_GROUP_VERSION = f"{trainjob.GROUP}/{trainjob.VERSION}"

BACKEND_TFJOB, BACKEND_TRAINER_V2 = "TFJob", "TrainJob"

TRAINING_OPERATOR_VERSION = "v1.9.4"

TRAINING_OPERATOR_INSTALL = (
    'kubectl apply --server-side -k "github.com/kubeflow/trainer.git/manifests/overlays/'
    f'standalone?ref={TRAINING_OPERATOR_VERSION}"')


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
    from kubernetes import client  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
    if api_client is None:
      api_client = default_api_client()
    self._api = api_client
    self._custom = client.CustomObjectsApi(api_client)
    self._core = client.CoreV1Api(api_client)

  def serves(self, group_version: str, plural: str) -> bool:
    """API discovery: does the API server serve `plural` in `group_version` (the CRD is
    installed)? GET /apis/<group>/<version> answers 404 when nothing serves it."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
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
    from kubernetes import client  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
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
          f"Kubeflow profile): see docs/multi-node.md, RBAC.")

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
    return replica_count(job)

  replica_of = None  # PodWatch's default: the pod's name.

  def events(self, name: str, namespace: str) -> List[Dict[str, Any]]:
    """The events about the TFJob (the operator's ExitedWithCode, Restarting, ...);
    [] when they cannot be read (e.g. no RBAC for events): they only name a cause."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
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
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
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

  # Who acts on the job, and how to see whether it runs (kubeflow/trainer v1.9.4
  # manifests/base/deployment.yaml:4: Deployment training-operator;
  # manifests/overlays/standalone/kustomization.yaml:3: namespace kubeflow).
  CONTROLLER = "the training operator"
  CONTROLLER_CHECK = "kubectl -n kubeflow get deployment training-operator"

  def started(self, job: Mapping[str, Any]) -> bool:
    """Has the operator acted on the TFJob? Its first reconcile sets the Created condition
    (kubeflow/trainer v1.9.4 pkg/controller.v1/tensorflow/tfjob_controller.go:651-662)."""
    return any(c.get("type") == "Created" for c in (job.get("status") or {}).get("conditions")
               or [])

  def not_started_cause(self, name: str, namespace: str, job: Mapping[str, Any]) -> str:
    """Why no pod and no Created condition appeared within the grace period."""
    warnings = [e for e in self.events(name, namespace) if e.get("type") == "Warning"]
    if warnings:
      last = warnings[-1]
      return f"{last.get('reason')}: {last.get('message')}"
    return (f"no Created condition, no pod and no event: {self.CONTROLLER} is not running "
            f"(the CRD is installed without it, or it stopped; {self.CONTROLLER_CHECK})")

  def _all_succeeded(self, job: Mapping[str, Any], pods: List[Mapping[str, Any]]) -> bool:
    return len(pods) >= self.replica_count(job) and all(
        (p.get("status") or {}).get("phase") == "Succeeded" for p in pods)

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
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
    import urllib3  # pylint: disable=g-import-not-at-top  (with kubernetes)
    deadline = clock() + timeout_seconds
    watch = PodWatch(max_restarts, grace_seconds, unschedulable_grace_seconds,
                     container=self.container, replica_of=self.replica_of)
    errors = 0
    started = clock()
    done_since: Optional[float] = None  # When every replica pod was first seen Succeeded.
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
      elif state is None and not pods and not self.started(job) \
          and now - started >= grace_seconds:
        state, message = FAILED, (f"{self.KIND} {namespace}/{name}: nothing started in "
                                  f"{now - started:g} s (the {grace_seconds:g} s grace, "
                                  f"{ENV_PREFIX}PENDING_GRACE_SECONDS): "
                                  + self.not_started_cause(name, namespace, job))
      elif state is None and watch.over_limit:
        state, message = FAILED, f"{self.KIND} {namespace}/{name}: " + watch.budget_message(
            watch.cause(self.events(name, namespace)), condition_message(job, RESTARTING))
      elif state is None and self._all_succeeded(job, pods) and now - (
          done_since := now if done_since is None else done_since) >= grace_seconds:
        state, message = FAILED, (
            f"{self.KIND} {namespace}/{name}: every replica pod succeeded {now - done_since:g} "
            f"s ago and the job's status did not follow: {self.CONTROLLER} has stopped "
            f"({self.CONTROLLER_CHECK}); the checkpoints are kept, retry the step once it runs")
      elif state is None and clock() >= deadline:
        state, message = TIMEOUT, (f"{self.KIND} {namespace}/{name} did not finish in "
                                   f"{timeout_seconds:g} s")
      if not self._all_succeeded(job, pods):
        done_since = None
      if state is not None:
        return TFJobResult(state=state, message=message, logs=self.logs(name, namespace),
                           restarts=watch.restarts)
      sleep(poll_seconds)


class TrainJobClient(TFJobClient):
  """The same calls for Kubeflow Trainer v2's TrainJobs (trainer.kubeflow.org/v1alpha1)
  with this project's runtime (kube/trainjob.py). The pods are the JobSet's, which is named
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
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
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
          f"docs/multi-node.md, Several nodes).") from None

  def create(self, body: Mapping[str, Any], dry_run: bool = False) -> Dict[str, Any]:
    extra = {"dry_run": "All"} if dry_run else {}
    return self._custom.create_namespaced_custom_object(
        trainjob.GROUP, trainjob.VERSION, body["metadata"]["namespace"], trainjob.PLURAL,
        dict(body), **extra)

  def placement_field(self, spec) -> str:
    """Which of trainjob.PLACEMENT_FIELDS this cluster's Trainer release keeps, found by a
    server-side dry run (``dryRun=All``: admitted, pruned, not stored) of the TrainJob with
    the node selector and tolerations in all three; the answer keeps only the field its
    CRD has. Trainer's TrainJob webhooks declare ``sideEffects=None``, so the API server
    calls them on a dry run (kubeflow/trainer v2.1.0 pkg/webhooks/trainjob_webhook.go:44,
    v2.3.0 :36,94; the same at v2.0.0 and v2.2.0). Raises RuntimeError when it keeps none,
    or drops any of the trainer's fields (image, command, env, numNodes,
    resourcesPerNode), before anything is created, and when the dry run is refused (a
    webhook's 422, or one that does not declare sideEffects None or NoneOnDryRun).

    Unknown fields are pruned, not refused: the request sends no ``fieldValidation`` (the
    kubernetes 26.1.0 client's create_namespaced_custom_object has no such parameter), and
    the API server's default is Warn (kubernetes staging/src/k8s.io/apiserver/pkg/endpoints/
    handlers/rest.go, fieldValidation); kubectl's default is Strict, which would refuse."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
    probe = trainjob.manifest(spec, placement_field=trainjob.RUNTIME_PATCHES)
    for field in trainjob.PLACEMENT_FIELDS:
      probe["spec"].update(trainjob.placement_patch(field, spec.node_selector,
                                                    spec.tolerations))
    probe["metadata"] = dict(probe["metadata"], name=spec.name + "-dry-run")
    probe["metadata"].pop("ownerReferences", None)
    try:
      answer = self.create(probe, dry_run=True).get("spec") or {}
    except ApiException as e:
      # Trainer's webhooks are served by its controller manager (kubeflow/trainer v2.1.0
      # manifests/base/webhook/patch.yaml:1-9): unreachable, the controller is not running.
      down = (f" ({self.CONTROLLER} serves these webhooks and is not running: "
              f"{self.CONTROLLER_CHECK})" if "failed calling webhook" in _body(e) else "")
      raise RuntimeError(
          f"{trainjob.KIND} {spec.namespace}/{spec.name}: the server-side dry run that finds "
          f"this Trainer release's placement field was refused, so nothing was created: "
          f"{e.status} {e.reason}: {_body(e)}{down}") from None
    dropped = sorted(set(probe["spec"]["trainer"]) - set(answer.get("trainer") or {}))
    kept = [f for f in trainjob.PLACEMENT_FIELDS if answer.get(f)]
    wanted = bool(spec.node_selector or spec.tolerations)
    if dropped or (wanted and not kept):
      what = (f"spec.trainer.{', spec.trainer.'.join(dropped)}" if dropped else
              "the node selector and tolerations in every field Trainer v2.0-v2.3 has ("
              + ", ".join(f"{f}: {r}" for r, f in trainjob.RELEASE_FIELDS.items()) + ")")
      raise RuntimeError(
          f"This cluster's Kubeflow Trainer drops {what} from a TrainJob (server-side dry "
          f"run in namespace {spec.namespace!r}); nothing was created. Its release is not one "
          f"tfx-parallel supports (v2.0-v2.3); see docs/KUBEFLOW.md, Trainer releases.")
    return kept[0] if kept else trainjob.POD_TEMPLATE_OVERRIDES

  # Where the controllers run depends on how Trainer was installed: standalone in
  # kubeflow-system (kubeflow/trainer v2.1.0 manifests/overlays/manager/kustomization.yaml:5,
  # JobSet from manifests/third-party/jobset beside it, :13), on the Kubeflow platform
  # (Kubeflow 1.11) in kubeflow (manifests/overlays/kubeflow-platform/kustomization.yaml:3).
  # Deployments kubeflow-trainer-controller-manager (manifests/base/manager/manager.yaml:5)
  # and jobset-controller-manager; so the checks search every namespace by name.
  CONTROLLER = "the Kubeflow Trainer controller"
  CONTROLLER_CHECK = ("kubectl get deployment -A --field-selector "
                      "metadata.name=kubeflow-trainer-controller-manager")
  JOBSET_CHECK = "kubectl get deployment -A --field-selector metadata.name=jobset-controller-manager"

  def started(self, job: Mapping[str, Any]) -> bool:
    """Trainer v2 sets no Created condition; a JobSet that runs shows in
    ``status.jobsStatus`` (trainjob_types.go v2.1.0:379) or in a condition."""
    status = job.get("status") or {}
    return bool(status.get("jobsStatus") or status.get("conditions"))

  def jobset(self, name: str, namespace: str) -> Optional[Dict[str, Any]]:
    """The TrainJob's JobSet (named like it), None when absent; raises ApiException on
    any other answer (403 without ``get jobsets``)."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
    try:
      return self._custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", namespace,
                                                       "jobsets", name)
    except ApiException as e:
      if e.status == 404:
        return None
      raise

  def not_started_cause(self, name: str, namespace: str, job: Mapping[str, Any]) -> str:
    """Read from the TrainJob's events (the controller's TrainJobResourcesCreationFailed,
    kubeflow/trainer v2.1.0 pkg/controller/trainjob_controller.go:119-129, the same event
    at v2.0.0 :132-136, v2.2.0 :129-133, v2.3.0 :114-118) and whether the JobSet exists."""
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
    events = self.events(name, namespace)
    refused = [e for e in events if e.get("reason") == trainjob.RESOURCES_CREATION_FAILED]
    if refused:
      message = str(refused[-1].get("message"))
      # JobSet's webhooks are served by its controller's pods (kubernetes-sigs/jobset
      # v0.10.1 config/components/webhook/service.yaml:12,19-20): unreachable, it is down.
      down = (f" (JobSet's controller serves that webhook and is not running: "
              f"{self.JOBSET_CHECK})" if "failed calling webhook" in message
              and "jobset" in message else "")
      return (f"the Kubeflow Trainer controller cannot create the JobSet: "
              f"{trainjob.RESOURCES_CREATION_FAILED}: {message}{down}")
    warnings = [e for e in events if e.get("type") == "Warning"]
    if warnings:  # E.g. the Job controller's FailedCreate.
      return f"{warnings[-1].get('reason')}: {warnings[-1].get('message')}"
    try:
      found = self.jobset(name, namespace)
    except ApiException as e:
      return (f"no JobSet event and no condition; {self.CONTROLLER} or JobSet's controller is "
              f"not running ({self.CONTROLLER_CHECK}; {self.JOBSET_CHECK}). (Could not read "
              f"the JobSet: {e.status} {e.reason}.)")
    if found is not None:
      return (f"JobSet {namespace}/{name} exists but has no Job or pod: JobSet's controller "
              f"is not running (the CRD is installed without it, or it stopped; "
              f"{self.JOBSET_CHECK})")
    return (f"no JobSet, no event and no condition: {self.CONTROLLER} is not running (the "
            f"CRD is installed without it, or it stopped; {self.CONTROLLER_CHECK})")

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
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
    out = []
    for kind, involved in (("Job", f"{name}-{trainjob.REPLICATED_JOB}-0"), ("JobSet", name),
                           (trainjob.KIND, name)):
      try:
        found = self._core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={involved}")
      except ApiException:
        return out
      out.extend(self._api.sanitize_for_serialization(e) for e in found.items)
    return out


def _body(e) -> str:
  try:
    return json.loads(e.body).get("message", e.body)
  except (TypeError, ValueError, AttributeError):
    return str(e.body)


