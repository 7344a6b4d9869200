"""Reliability: real faults (SIGKILL of a worker, divergence, NaN data), no mocks."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import trainer_util as tu
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.distributed_trainer.run import checkpoint, launcher
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.run.train import Job, PEER_FAILED_EXIT_CODE
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import local_runner, summary

# A surviving worker must exit within this many seconds of its peer's death.
PEER_FAILURE_BOUND_SECONDS = 120


@pytest.mark.slow
def test_worker_death_fails_the_peer_cleanly_and_rerun_resumes(tmp_path):
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=4096)
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="multi_worker", steps=1500,
                    epochs=1, checkpoint_every=50, log_every=50, batch_size=64,
                    learning_rate=0.05, optimizer="adam")
  path = str(tmp_path / "job.json")
  with open(path, "w") as f:
    json.dump(job, f)
  ports = launcher._free_ports(2)  # pylint: disable=protected-access
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  procs = []
  for i in range(2):
    env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                 "task": {"type": "worker", "index": i}}))
    procs.append(subprocess.Popen(
        [sys.executable, "-m", "tfx_parallel.components.distributed_trainer.run.train",
         "--job", path], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  # Kill worker 1 once the chief has checkpointed step >= 200 (read from the checkpoint
  # files, not from the progress lines, whose format is the trainer's to choose).
  output = []
  reader = threading.Thread(target=lambda: output.extend(procs[0].stdout), daemon=True)
  reader.start()
  killed_at = None
  try:
    deadline = time.time() + 600
    while killed_at is None and procs[0].poll() is None and time.time() < deadline:
      steps = checkpoint.steps(job["checkpoint_dir"])
      if steps and max(steps) >= 200:
        procs[1].send_signal(signal.SIGKILL)
        killed_at = time.time()
      time.sleep(0.05)
    assert killed_at is not None, (
        "worker 0 never checkpointed step 200 (exit code "
        f"{procs[0].poll()}):\n" + "".join(output)[-3000:])
    try:  # A hang guard (the peer must not wait forever), not a speed assertion.
      procs[0].wait(timeout=PEER_FAILURE_BOUND_SECONDS)
    except subprocess.TimeoutExpired:
      pytest.fail(f"worker 0 still runs {PEER_FAILURE_BOUND_SECONDS} s after its peer "
                  "was killed:\n" + "".join(output)[-3000:])
    reader.join(timeout=30)
    out = "".join(output)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
  assert procs[0].returncode == PEER_FAILED_EXIT_CODE, out[-2000:]
  assert "a peer training process failed" in out and "rerun to resume" in out
  # Rerun (fresh ports) resumes from the chief's last checkpoint and finishes.
  launcher.launch(Job(**job), "multi_worker", 2)
  with open(os.path.join(job["history_dir"], "history.json")) as f:
    history = json.load(f)
  assert history["resumed_from_step"] >= 150
  assert history["records"][-1]["step"] == 1500


def _store(path):
  return summary.open_store(path)


def _metrics(path):
  found = summary.latest_run(_store(path), "rel")
  return found["ConvergenceMetrics"], found["ModelBlessing"], found["TrainingHistory"]


@pytest.mark.slow
def test_divergent_learning_rate_is_recorded_diverged_not_blessed_and_stops_early(tmp_path):
  config = config_lib.PipelineConfig(
      pipeline_name="rel", example_gen=ExampleGenConfig(rows=4000),
      trainer=TrainerConfig(layout="single", optimizer="sgd", learning_rate=50.0, epochs=20),
      evaluator=EvaluatorConfig(require_converged=False))
  path = local_runner.run(config, str(tmp_path))
  metrics, blessing, history = _metrics(path)
  assert metrics["convergence_state"] == "diverged"
  assert metrics["blessed"] == 0 and blessing["blessed"] == 0
  assert history["diverged"] == 1
  assert history["steps_run"] < 20 * (3200 // 64)  # stopped early, budget not burnt


@pytest.mark.slow
def test_inf_in_data_is_recorded_diverged_and_not_blessed(tmp_path):
  csv = tmp_path / "data.csv"
  rng = np.random.default_rng(0)
  lines = ["a,b,y"]
  for i in range(2000):
    a, b = rng.uniform(-1, 1, 2)
    y = "inf" if i % 50 == 7 else f"{a + 2 * b + 3:.5f}"  # inf in both splits
    lines.append(f"{a:.5f},{b:.5f},{y}")
  csv.write_text("\n".join(lines) + "\n")
  config = config_lib.PipelineConfig(
      pipeline_name="rel", example_gen=ExampleGenConfig(source=str(csv), label="y"),
      trainer=TrainerConfig(layout="single", epochs=3, learning_rate=0.05, optimizer="adam"))
  path = local_runner.run(config, str(tmp_path))
  metrics, blessing, history = _metrics(path)
  assert metrics["convergence_state"] == "diverged"
  assert blessing["blessed"] == 0
  store = _store(path)
  for e in store.get_executions():
    assert e.last_known_state in (metadata_store_pb2.Execution.COMPLETE,
                                  metadata_store_pb2.Execution.CACHED)
