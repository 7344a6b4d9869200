"""What one replica of a TFJob or TrainJob needs from Kubernetes: the watchdog that stops
it once the executor's heartbeat is stale, its SIGTERM handler, and its TF_CONFIG on a
TrainJob (derived from JobSet). The replica's entry point, ``python -m
tfx_parallel.components.distributed_trainer.replica --job URI``, sits at the top beside
the executor (distributed_trainer/replica.py), so that this package imports nothing above it.
A replica's exit status is its failure's class (failures.exit_code): >= 128 when the job
should restart it (a resumable error, SIGTERM), 1-127 when it should fail at once
(config, user code, a stale heartbeat)."""
import os
import sys
import threading
import time
from typing import Callable, Mapping, Optional

from tfx_parallel.components.distributed_trainer.kube import trainjob
from tfx_parallel.components.distributed_trainer.kube.settings import (ENV_HEARTBEAT, ENV_ORPHAN,
                                                                       HEARTBEAT_SECONDS,
                                                                       ORPHAN_SECONDS)
from tfx_parallel.components.distributed_trainer import failures
from tfx_parallel.components.distributed_trainer.failures import ORPHANED_EXIT_CODE


class Watchdog:
  """The replica's side: whether the executor's heartbeat has changed in the last
  `stale_seconds` of readable store, timed on this replica's own clock (no clock skew
  across nodes).

  A store outage is not a killed executor: while the heartbeat cannot be read (any
  error but the store's "not found", which counts as no beat), the watchdog never stops
  the replica (it says once that the store is out, and once that it
  is back); the executor's own writes failed as well, so after the outage the window
  starts again from the first read. A job whose store stays out is bounded by its
  deadline (TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS), not by this."""

  def __init__(self, read: Callable[[], str], stale_seconds: float,
               clock: Callable[[], float] = time.monotonic,
               say: Callable[[str], None] = lambda line: print(line, file=sys.stderr,
                                                               flush=True)):
    self._read, self.stale_seconds, self._clock, self._say = read, stale_seconds, clock, say
    self._value: Optional[str] = None
    self._since = clock()
    self._outage_since: Optional[float] = None

  def check(self) -> Optional[str]:
    """None while the executor is alive or the store is out, else the message to stop
    with."""
    now = self._clock()
    try:
      value = self._read()
    except Exception as e:  # pylint: disable=broad-except  # Any other store error: an outage.
      if not _not_found(e):
        if self._outage_since is None:
          self._outage_since = now
          self._say(f"[trainer] WARNING: cannot read the executor's heartbeat "
                    f"({type(e).__name__}: {str(e)[:300]}): the store is unreachable. "
                    f"Training goes on; the orphan limit ({ENV_ORPHAN}="
                    f"{self.stale_seconds:g}) counts again from when the store answers.")
        return None
      # The store answered that the heartbeat is not there (deleted with the run's
      # files, or never written): no beat, so the window runs on.
      value = self._value
    if self._outage_since is not None:
      self._say(f"[trainer] The store answers again after {now - self._outage_since:g} s; "
                f"the executor's heartbeat is watched again.")
      self._outage_since = None
      self._value, self._since = value, now
      return None
    if value != self._value:
      self._value, self._since = value, now
      return None
    if now - self._since >= self.stale_seconds:
      return (f"[trainer] ERROR: the executor that submitted this job has not written "
              f"its heartbeat for {now - self._since:g} s while the store answered (more "
              f"than {ENV_ORPHAN}={self.stale_seconds:g}): it was killed (OOM, node loss) "
              f"without deleting the job. Stopping this replica so that its GPUs are freed.")
    return None


def _not_found(error: BaseException) -> bool:
  """Whether `error` is the store's answer that the file does not exist (TensorFlow's
  NotFoundError, FileNotFoundError), not a failure to reach the store."""
  return isinstance(error, FileNotFoundError) or any(
      cls.__name__ == "NotFoundError" and cls.__module__.startswith("tensorflow")
      for cls in type(error).__mro__)


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


def read_text(uri: str) -> str:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (after tfenv.prepare())
  with tf.io.gfile.GFile(uri) as f:
    return f.read()


def stop_replica(message: str) -> None:
  """Ends this replica at once: the training threads would hold up a normal exit."""
  print(message, file=sys.stderr, flush=True)
  os._exit(ORPHANED_EXIT_CODE)  # pylint: disable=protected-access


def stop_on_sigterm(signum, frame) -> None:  # pylint: disable=unused-argument
  """SIGTERM (the kubelet's, on preemption, a node drain or a JobSet restart): ends the
  replica at once with failures.PREEMPTED_EXIT_CODE (>= 128), so that the job restarts
  it, and says so; the last checkpoint is where it resumes."""
  print(f"[trainer] ERROR: received SIGTERM (preempted, drained or restarted): stopping "
        f"this replica with exit code {failures.PREEMPTED_EXIT_CODE} "
        f"({failures.EXIT_CODE_MEANINGS[failures.PREEMPTED_EXIT_CODE]}); it resumes from "
        f"the last checkpoint.", file=sys.stderr, flush=True)
  os._exit(failures.PREEMPTED_EXIT_CODE)  # pylint: disable=protected-access


def replica_tf_config(environ: Mapping[str, str]) -> Optional[str]:
  """The TF_CONFIG a replica must set itself: None under a TFJob (the operator set it) or
  alone; on a TrainJob, the one derived from JobSet (trainjob.tf_config_from_jobset)."""
  if "TF_CONFIG" in environ:
    return None
  return trainjob.tf_config_from_jobset(environ)
