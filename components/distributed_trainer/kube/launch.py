"""The executor's side of multi-node training: :func:`run` writes the job file, submits
the TFJob or TrainJob (or adopts the one an earlier attempt left), waits for it, and
deletes it, also on SIGTERM; :class:`Heartbeat` proves to the replicas that the executor
is alive (replica.py's watchdog reads it)."""
import contextlib
import dataclasses
import json
import os
import signal
import threading
import time
from typing import Any, Callable, Iterator, Mapping, Optional

from absl import logging
from tfx.dsl.io import fileio

from tfx_parallel.components.distributed_trainer.kube import object_store
from tfx_parallel.components.distributed_trainer.kube import trainjob
from tfx_parallel.components.distributed_trainer.kube.client import (BACKEND_TRAINER_V2,
                                                                     TFJobClient, TrainJobClient)
from tfx_parallel.components.distributed_trainer.kube.manifest import (KIND, job_name, manifest,
                                                                       spec_for)
from tfx_parallel.components.distributed_trainer.kube.settings import (HEARTBEAT_SECONDS,
                                                                       TFJobSettings)
from tfx_parallel.components.distributed_trainer.kube.watch import FAILED, TFJobResult
from tfx_parallel.components.distributed_trainer.plan import devices


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
      logging.warning("Could not write the TFJob heartbeat %s: %s", self.uri, e)


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
  # Can the replicas reach the job's files? Their env (S3 settings; secrets by secretKeyRef).
  spec = dataclasses.replace(spec, env=dict(spec.env, **object_store.check_for_replicas(
      job, job_uri, settings.namespace, client.api_client, os.environ)))
  if kind == trainjob.KIND:  # The field this Trainer release keeps placement in (dry run).
    body = trainjob.manifest(spec, placement_field=client.placement_field(spec))
  else:
    body = manifest(spec)
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
  from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
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
  try:
    client.delete(name, namespace)
  except Exception as e:  # pylint: disable=broad-except
    if getattr(e, "status", None) != 404:
      logging.error("Could not delete %s %s/%s: %s", getattr(client, "KIND", KIND), namespace,
                    name, e)
