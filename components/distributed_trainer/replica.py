"""The entry point of one TFJob or TrainJob replica: ``python -m
tfx_parallel.components.distributed_trainer.replica --job URI`` (kube/manifest.py
``replica_command``).

It sets the environment, copies the job file to local disk, sets TF_CONFIG on a TrainJob
(derived from JobSet), starts the watchdog that stops the replica once the executor's
heartbeat is stale (kube/replica.py), and runs ``run/train.py``'s ``main`` in the same
process. Its exit status is its failure's class (failures.exit_code): >= 128 when the job
should restart it (a resumable error, SIGTERM), 1-127 when it should fail at once
(config, user code, a stale heartbeat). Like the executor, it is a process's entry point
and sits at the top of the trainer's layers, above both kube/ (the replica's watchdog)
and run/ (the training process), so that neither of those imports the other upward."""
import argparse
import os
import signal
import tempfile
from typing import Optional, Sequence

from tfx_parallel.components.common import tfenv
from tfx_parallel.components.distributed_trainer.kube import object_store
from tfx_parallel.components.distributed_trainer.kube import replica


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description="Runs one TFJob replica's training.")
  parser.add_argument("--job", required=True, help="job JSON URI written by the executor")
  args = parser.parse_args(argv)
  tfenv.prepare()  # The TFJob replica's entry point: before TensorFlow is imported.
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top  (imports TensorFlow: after tfenv.prepare())
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  (after tfenv.prepare())
  signal.signal(signal.SIGTERM, replica.stop_on_sigterm)
  object_store.register_uri(args.job)  # s3:// needs tensorflow-io, before the first read.
  replica.start_watchdog(os.environ, replica.read_text, replica.stop_replica)
  tf_config = replica.replica_tf_config(os.environ)
  if tf_config:
    os.environ["TF_CONFIG"] = tf_config
  with tempfile.TemporaryDirectory(prefix="tfx_parallel_tfjob_") as tmp:
    local = os.path.join(tmp, "job.json")
    tf.io.gfile.copy(args.job, local)
    return train.main(["--job", local])


if __name__ == "__main__":
  object_store.run_and_exit(main)  # Not sys.exit: see run_and_exit.
