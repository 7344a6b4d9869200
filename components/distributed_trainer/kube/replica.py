"""One replica of a TFJob or TrainJob: ``python -m tfx_parallel.components.distributed_trainer.kube.replica --job URI``.

It copies the job file to local disk, sets TF_CONFIG on a TrainJob (derived from JobSet),
starts the watchdog that stops the replica once the executor's heartbeat is stale, and
runs ``run/train.py``'s ``main``."""
import argparse
import os
import sys
import tempfile
import threading
import time
from typing import Callable, Mapping, Optional, Sequence

from tfx_parallel.components.common import tfenv
from tfx_parallel.components.distributed_trainer.kube import object_store
from tfx_parallel.components.distributed_trainer.kube import trainjob
from tfx_parallel.components.distributed_trainer.kube.settings import (ENV_HEARTBEAT, ENV_ORPHAN,
                                                                       HEARTBEAT_SECONDS,
                                                                       ORPHAN_SECONDS)
from tfx_parallel.components.distributed_trainer.failures import ORPHANED_EXIT_CODE


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


def read_text(uri: str) -> str:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (after tfenv.prepare())
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
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top  (the one door up into run/, after tfenv.prepare())
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (after tfenv.prepare())
  object_store.register_uri(args.job)  # s3:// needs tensorflow-io, before the first read.
  start_watchdog(os.environ, read_text, stop_replica)
  tf_config = replica_tf_config(os.environ)
  if tf_config:
    os.environ["TF_CONFIG"] = tf_config
  with tempfile.TemporaryDirectory(prefix="tfx_parallel_tfjob_") as tmp:
    local = os.path.join(tmp, "job.json")
    tf.io.gfile.copy(args.job, local)
    return train.main(["--job", local])

if __name__ == "__main__":
  object_store.run_and_exit(main)  # Not sys.exit: see run_and_exit.
