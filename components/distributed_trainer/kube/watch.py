"""Reading what the API server returns about a job, without calling it: the job's
conditions (:func:`job_state`), and :class:`PodWatch`, which follows the replica pods
and events across polls (restarts, stuck pods, pods that cannot be created, the cause
of a failure). Pure; the polling loop is ``client.TFJobClient.wait``."""
import dataclasses
import re
import signal
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.distributed_trainer.kube.manifest import CONTAINER_NAME
from tfx_parallel.components.distributed_trainer.kube.settings import ENV_PREFIX
from tfx_parallel.components.distributed_trainer.failures import (EXIT_CODE_MEANINGS,
                                                                  PEER_LOST_EXIT_CODE)

SUCCEEDED, FAILED, TIMEOUT = "Succeeded", "Failed", "Timeout"

RESTARTING = "Restarting"

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


def job_state(tfjob: Mapping[str, Any]) -> Tuple[Optional[str], str]:
  """(SUCCEEDED | FAILED | None while running, message) from the TFJob's conditions."""
  for condition in (tfjob.get("status") or {}).get("conditions") or []:
    if condition.get("type") in (SUCCEEDED, FAILED) and condition.get("status") == "True":
      return condition["type"], condition.get("message", "")
  return None, ""


def condition_message(tfjob: Mapping[str, Any], kind: str) -> str:
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
  elif code in EXIT_CODE_MEANINGS and code != 1:
    why = EXIT_CODE_MEANINGS[code]
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

# JobSet's event when a failed Job restarts the JobSet (RestartJobSetActionReason, and the
# message with " (first failed job: <job>)", kubernetes-sigs/jobset v0.10.1
# pkg/constants/constants.go:90-92, pkg/controllers/failure_policy.go:234,336-338). It
# names the Job whose pod failed when the restart deleted that pod before a poll saw it.
RESTART_JOBSET = "RestartJobSetFailurePolicyAction"


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
    a peer (else the latest exit), from the operator's events, else from the pods, else
    JobSet's latest restart event (which names the failed Job)."""
    exits, restarts = [], []
    for event in events:
      if event.get("reason") == RESTART_JOBSET:
        when = event.get("lastTimestamp") or event.get("eventTime") or ""
        restarts.append((when, _uncombined(event.get("message") or "")))
      match = _EXITED.match(_uncombined(event.get("message") or ""))
      if event.get("reason") == EXITED_WITH_CODE and match and int(match["code"]) != 0:
        when = event.get("lastTimestamp") or event.get("eventTime") or ""
        exits.append((when, match["pod"], int(match["code"])))
    found = [(pod, code) for _, pod, code in sorted(exits)] or list(self._seen)
    if not found and restarts:
      return (f"{RESTART_JOBSET}: {sorted(restarts)[-1][1]} (the restart deleted the "
              f"failed pod before a poll saw its exit code)")
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
