"""Each failure class ends a real replica process (``python -m ...distributed_trainer.replica``, the
command of every TFJob and TrainJob pod) with its class's exit code (issue #48 item 3):
>= 128 for what a restart may fix, so that TFJob's ``restartPolicy: ExitCode``
(training-operator v1.9.0 pkg/util/train/train_util.go:24-26, pod.go:352-372) and the
runtime's ``podFailurePolicy`` (kube/trainjob.py: FailJob on 1-127 only) restart it;
1-127 for config and user-code errors, which fail the job at once.

DataLossError (a torn TFRecord), SIGTERM (preemption) and a config error are met
for real; an OOM is raised by tests/replica_fault_site (the replica's exit path is the
real one). A resumable error keeps its class's code only once the first step completed:
before that a rerun meets it again, so it is a config error, exit 2 (issue #49 item 2);
the OOM is raised both ways; the train files are torn once a checkpoint is committed
(the next epoch reads them).
Every class's code in the training process: tests/test_trainer_failures.py
(in-process, fast)."""
import gzip
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest

import trainer_util as tu
from tfx_parallel.components.distributed_trainer import failures
from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings
from tfx_parallel.components.distributed_trainer.kube import trainjob

HERE = os.path.dirname(os.path.abspath(__file__))
REPLICA = "tfx_parallel.components.distributed_trainer.replica"


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("examples"))
  keys, _, rows = tu.write_examples(root, rows=256, eval_rows=32)
  return root, keys, rows


def _job(tmp_path, examples, **config) -> str:
  root, keys, rows = examples
  config = dict(dict(layout="single", steps=8, epochs=1, batch_size=16, log_every=4,
                     checkpoint_every=4), **config)
  path = tmp_path / "job.json"
  path.write_text(json.dumps(tu.job_dict(str(tmp_path / "out"), root, keys, rows, **config)))
  return str(path)


def _replica(job: str, log, raise_=None, at_step=0) -> subprocess.Popen:
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_CONFIG", kube_settings.ENV_HEARTBEAT)}
  if raise_:
    env["TFX_PARALLEL_TEST_RAISE"] = raise_
    env["TFX_PARALLEL_TEST_RAISE_AT_STEP"] = str(at_step)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(HERE, "replica_fault_site")] + env.get("PYTHONPATH", "").split(os.pathsep))
  return subprocess.Popen([sys.executable, "-m", REPLICA, "--job", job], env=env,
                          stdout=log, stderr=subprocess.STDOUT)


def _copy(tmp_path, examples):
  """A copy of the Examples that this test may tear."""
  root, keys, rows = examples
  shutil.copytree(root, tmp_path / "examples")
  return str(tmp_path / "examples"), keys, rows


def _tear(root: str):
  """Replaces every train file by one cut inside its middle record (a torn upload),
  gzip-compressed again so that the reader meets the torn record itself rather than a
  torn gzip stream, whose cut may fall on a record boundary and read as a clean end."""
  train = os.path.join(root, "Split-train")
  for name in os.listdir(train):
    path = os.path.join(train, name)
    with gzip.open(path, "rb") as f:
      data = f.read()
    offsets = [0]
    while offsets[-1] < len(data):  # A TFRecord: length (8 bytes), its CRC (4), payload, CRC (4).
      offsets.append(offsets[-1] + 16 + struct.unpack("<Q", data[offsets[-1]:offsets[-1] + 8])[0])
    middle = offsets[len(offsets) // 2]
    length = struct.unpack("<Q", data[middle:middle + 8])[0]
    with open(path + ".torn", "wb") as f:
      f.write(gzip.compress(data[:middle + 12 + length // 2]))
    os.replace(path + ".torn", path)  # The next epoch opens the torn file.


def _checkpointed(tmp_path) -> bool:
  ckpt = tmp_path / "out" / "ckpt"
  return ckpt.exists() and any(ckpt.rglob("*.index"))


@pytest.mark.slow
@pytest.mark.parametrize("case,code", [
    ("OOM", failures.OOM_EXIT_CODE),
    ("OOM before the first step", failures.CONFIG_ERROR_EXIT_CODE),
    ("DataLossError", failures.DATA_LOSS_EXIT_CODE),
    ("SIGTERM", failures.PREEMPTED_EXIT_CODE),
    ("config error", failures.NOT_RESUMABLE_EXIT_CODE),
])
def test_each_failure_class_ends_a_real_replica_with_its_code(tmp_path, examples, case, code):
  raise_, at_step, config, data = None, 0, {}, examples
  if case.startswith("OOM"):
    raise_ = "tensorflow.errors:ResourceExhaustedError"
    at_step = 2 if case == "OOM" else 0  # After the first step completed, or as it starts.
  elif case == "DataLossError":
    # Streamed (a memory cache would not read the files again), torn once it trains.
    data = _copy(tmp_path, examples)
    config = {"steps": 100000, "checkpoint_every": 2, "cache": "none"}
  elif case == "SIGTERM":
    config = {"steps": 100000, "checkpoint_every": 2}
  else:
    config = {"layout": "no-such-layout"}
  log_path = tmp_path / "replica.log"
  with open(log_path, "w") as log:
    proc = _replica(_job(tmp_path, data, **config), log, raise_, at_step)
    if case in ("SIGTERM", "DataLossError"):  # Once it trains (a checkpoint is committed):
      # preempted, or its train files torn (read again the next epoch).
      deadline = time.monotonic() + 600
      while not _checkpointed(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
      assert _checkpointed(tmp_path), log_path.read_text()[-3000:]
      if case == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
      else:
        _tear(data[0])
    proc.wait(timeout=600)
  said = log_path.read_text()
  assert proc.returncode == code, said[-3000:]
  if code >= 128:  # The operators restart it.
    assert code not in trainjob.PERMANENT_EXIT_CODES
  expected = {"OOM": "[trainer] ERROR: ResourceExhaustedError: raised by tests/replica_fault_site",
              "OOM before the first step": "[trainer] ERROR: ConfigError: trainer.batch_size: "
                                           "out of memory before the first step completed "
                                           "(ResourceExhaustedError: raised by tests/replica_fault_site",
              "DataLossError": "[trainer] ERROR: DataLossError: ",
              "SIGTERM": "[trainer] ERROR: received SIGTERM",
              "config error": "no-such-layout"}[case]
  assert expected in said, said[-3000:]


def test_every_resumable_code_restarts_and_no_other_does():
  """The codes against the operators' boundary (>= 128 retryable) and the runtime's
  FailJob values."""
  resumable = {failures.PREEMPTED_EXIT_CODE, failures.OOM_EXIT_CODE, failures.STORE_EXIT_CODE,
               failures.DATA_LOSS_EXIT_CODE, failures.RESUMABLE_EXIT_CODE,
               failures.PEER_LOST_EXIT_CODE}
  permanent = {failures.NOT_RESUMABLE_EXIT_CODE, failures.ORPHANED_EXIT_CODE,
               failures.CONFIG_ERROR_EXIT_CODE}
  assert all(128 <= c <= 255 and c not in trainjob.PERMANENT_EXIT_CODES for c in resumable)
  assert all(c in trainjob.PERMANENT_EXIT_CODES for c in permanent)
  assert len(resumable | permanent) == 9 == len(failures.EXIT_CODE_MEANINGS)
  assert failures.PREEMPTED_EXIT_CODE == 128 + signal.SIGTERM
  # No other resumable code is a signal's 128+n (a kill reads as itself).
  assert all(c - 128 > 64 for c in resumable - {failures.PREEMPTED_EXIT_CODE})
