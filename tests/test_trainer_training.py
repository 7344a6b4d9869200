"""Trainer end to end on tiny data: the seed problem per layout, multi-worker with
two real processes, and SIGKILL + resume from the last checkpoint."""
import json
import logging
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import trainer_util as tu

SEED_CONFIG = dict(epochs=4, batch_size=64, learning_rate=0.1, optimizer="adam")


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("examples"))
  keys, _, rows = tu.write_examples(root, rows=2048, num_features=2, shards=2)
  return root, keys, rows


@pytest.mark.slow
@pytest.mark.parametrize("layout,extra", [("single", {}), ("mirrored", {"devices": 2})])
def test_every_layout_recovers_seed_parameters(examples, tmp_path, layout, extra):
  root, keys, rows = examples
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout=layout, **SEED_CONFIG, **extra)
  history = tu.run_job(job, str(tmp_path))
  w = np.array(history["weights"]["kernel"]).ravel()
  b = history["weights"]["bias"][0]
  assert np.abs(w - [1.0, 2.0]).max() < 0.05, w
  assert abs(b - 3.0) < 0.05, b
  assert history["layout"] == layout
  # Read from the variables' placement: the devices the run used, and its all-reduce.
  n = extra.get("devices", 1)
  assert [d.split("/device:")[-1] for d in history["devices"]] == [f"CPU:{i}" for i in range(n)]
  assert (history["device_type"], history["collective"]) == (
      "CPU", "none" if layout == "single" else "reduce_to_cpu")
  assert history["records"] and history["epochs"][-1]["eval_loss"] < 0.01
  tu.assert_final_loss_is_eval_sized(history)
  # The exported SavedModel serves serialized tf.Example.
  assert os.path.exists(os.path.join(job["model_dir"], "saved_model.pb"))
  assert os.path.exists(os.path.join(job["history_dir"], "loss.png"))


@pytest.mark.slow
def test_two_worker_processes_train_together(examples, tmp_path, capfd, caplog):
  """Two real processes on 127.0.0.1 with TF_CONFIG; only the chief exports, and only
  the chief prints: worker 1's lines go to the log."""
  from tfx_parallel.components.distributed_trainer.run import launcher
  from tfx_parallel.components.distributed_trainer.run.train import Job
  root, keys, rows = examples
  job = Job(**tu.job_dict(str(tmp_path), root, keys, rows, layout="multi_worker",
                          workers=2, **SEED_CONFIG))
  caplog.set_level(logging.INFO)
  # The launcher logs through absl, whose logger keeps the level an earlier test in this
  # process may have set (absl verbosity): INFO here, whatever ran before.
  caplog.set_level(logging.INFO, logger="absl")
  absl_logger = logging.getLogger("absl")
  absl_logger.addHandler(caplog.handler)  # Also when an earlier test stopped propagation.
  try:
    launcher.launch(job, "multi_worker", 2, "cpu")
  finally:
    absl_logger.removeHandler(caplog.handler)
  out = capfd.readouterr().out
  assert out.count("[trainer] layout multi_worker replicas 2") == 1, out
  assert out.count("[trainer] done:") == 1, out
  logged = [r.getMessage() for r in caplog.records]
  assert any(m.startswith("worker 1: [trainer] layout multi_worker replicas 2")
             for m in logged), logged[-20:]
  with open(os.path.join(job.history_dir, "history.json")) as f:
    history = json.load(f)
  assert history["layout"] == "multi_worker" and history["replicas"] == 2
  assert len(history["devices"]) == 2
  assert (history["device_type"], history["collective"]) == ("CPU", "ring")
  # Keras epochs are the run's (32 steps; 10 per execution): each epoch's evaluation at
  # its last step, where fit's executions are cut (engines/epochs.py).
  assert [e["step"] for e in history["epochs"]] == [32, 64, 96, 128], history["epochs"]
  assert [r["step"] for r in history["records"]][:4] == [10, 20, 30, 40]
  w = np.array(history["weights"]["kernel"]).ravel()
  assert np.abs(w - [1.0, 2.0]).max() < 0.05, w
  assert os.path.exists(os.path.join(job.model_dir, "saved_model.pb"))
  tu.assert_final_loss_is_eval_sized(history)


def _train_cmd(job, tmp):
  path = os.path.join(tmp, "job.json")
  with open(path, "w") as f:
    json.dump(job, f)
  return [sys.executable, "-m", "tfx_parallel.components.distributed_trainer.run.train",
          "--job", path]


@pytest.mark.slow
@pytest.mark.parametrize("cache", ["memory", "none"])  # The two input paths (cache config).
def test_sigkill_then_resume_matches_uninterrupted(examples, tmp_path, cache):
  root, keys, rows = examples
  cfg = dict(SEED_CONFIG, steps=400, checkpoint_every=20, log_every=10, epochs=1, cache=cache)
  ref = tu.run_job(tu.job_dict(str(tmp_path / "ref"), root, keys, rows, **cfg),
                   str(tmp_path / "ref"))
  job = tu.job_dict(str(tmp_path / "killed"), root, keys, rows, **cfg)
  os.makedirs(tmp_path / "killed")
  proc = subprocess.Popen(_train_cmd(job, str(tmp_path / "killed")),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  # Kill it once it has passed a checkpoint but before it finishes.
  for line in proc.stdout:
    if line.startswith("[trainer] step 1"):  # step >= 100: several checkpoints written
      step = int(line.split()[2].split("/")[0])
      if step >= 100:
        proc.send_signal(signal.SIGKILL)
        break
  proc.wait(timeout=60)
  assert proc.returncode == -signal.SIGKILL
  assert not os.path.exists(os.path.join(job["history_dir"], "history.json"))
  resumed = tu.run_job(job, str(tmp_path / "killed"))
  assert resumed["resumed_from_step"] >= 80  # the checkpoint before the kill
  np.testing.assert_allclose(np.array(resumed["weights"]["kernel"]),
                             np.array(ref["weights"]["kernel"]), atol=1e-5)
  np.testing.assert_allclose(resumed["weights"]["bias"], ref["weights"]["bias"], atol=1e-5)
  assert [r["step"] for r in resumed["records"]] == [r["step"] for r in ref["records"]]
  assert resumed["input_cache"]["mode"] == ref["input_cache"]["mode"] == cache


def test_checkpoint_dir_is_held_exclusively(tmp_path):
  from tfx_parallel.components.distributed_trainer.run import checkpoint
  directory = str(tmp_path / "ckpt")
  with checkpoint.Lock(directory):
    with pytest.raises(RuntimeError, match="in use by another training run"):
      with checkpoint.Lock(directory):
        pass
  with checkpoint.Lock(directory):  # Released: a later run may take it.
    pass
