"""Checkpoints outlive a layout, after a real kill.

The training process of a mesh 2x2 run (the command the launcher starts) is SIGKILLed
while it writes its step-16 checkpoint, after the one of step 8 was committed. Rerun
with the layout changed to mirrored x2, and separately to single, the same inputs and
config name the same checkpoint directory (executor.checkpoint_dir): each rerun finds
step 8, not the torn step 16, continues on the same batches, and ends within 1e-5 of an
uninterrupted single-device run. The console names the layout the checkpoint came from.
SGD with momentum 0.9, so the optimizer's state (one slot per variable) must carry
across too. And the reverse: the single run's checkpoint resumes on a mesh 2x2.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import trainer_util as tu
from hooks_site import pause
from tfx_parallel.components.distributed_trainer import executor
from tfx_parallel.components.distributed_trainer.run import checkpoint, launcher

STEPS = 24
CONFIG = dict(batch_size=32, learning_rate=0.05, optimizer="momentum", log_every=4,
              checkpoint_every=8, steps_per_execution=1, steps=STEPS)
KILL_SECONDS = 300  # A hang guard for the mesh run to reach its step-16 checkpoint.


def _kill_while_writing(job: dict, tmp: str, step: int) -> str:
  """Starts ``job``'s training process as the launcher does, SIGKILLs it once the
  checkpoint of ``step`` is written but not committed; returns its output."""
  path = os.path.join(tmp, "job.json")
  with open(path, "w") as f:
    json.dump(job, f)
  proc = subprocess.Popen(launcher._command(path),  # pylint: disable=protected-access
                          env=dict(os.environ, **pause.env(step)),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines = []
  try:
    for line in proc.stdout:
      lines.append(line)
      if f"step {step} written, pausing" in line:
        proc.send_signal(signal.SIGKILL)
        break
  finally:
    if proc.poll() is None:
      proc.kill()
    proc.wait(timeout=KILL_SECONDS)
  assert proc.returncode == -signal.SIGKILL, "".join(lines)[-3000:]
  return "".join(lines)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("resume_layouts")
  root = str(tmp / "ex")
  keys, _, rows = tu.write_examples(root, rows=512, eval_rows=64, num_features=4)

  def job(name, **layout):
    """A job as the executor names its checkpoints: by config, without the layout."""
    config = dict(CONFIG, **layout, device="cpu")
    j = tu.job_dict(str(tmp / name), root, keys, rows, **config)
    j["checkpoint_dir"] = executor.checkpoint_dir(str(tmp / "DistributedTrainer/model/1"),
                                                  root, checkpoint.run_identity(config))
    return j

  mesh = job("mesh", layout="mesh", mesh=[2, 2])
  shared = mesh["checkpoint_dir"]
  out = {"mesh_stdout": _kill_while_writing(mesh, str(tmp), 16)}
  out["after_kill"] = sorted(f for f in os.listdir(shared) if f.startswith("ckpt"))
  out["committed"] = checkpoint.steps(shared)
  killed = str(tmp / "killed_ckpt")
  shutil.copytree(shared, killed)

  def fresh_copy():  # Each rerun finds what the kill left.
    shutil.rmtree(shared)
    shutil.copytree(killed, shared)

  straight = dict(job("straight", layout="single"), checkpoint_dir=str(tmp / "straight_ckpt"))
  single = job("single", layout="single")
  mirrored = job("mirrored", layout="mirrored", devices=2)
  out["same_dir"] = single["checkpoint_dir"] == mirrored["checkpoint_dir"] == shared
  out["single_stdout"] = tu.run_jobs_in_one_process([straight, single], str(tmp / "s"))
  fresh_copy()
  # The reverse: the uninterrupted single run's last checkpoint (step 16) on a mesh 2x2.
  reverse = dict(job("reverse", layout="mesh", mesh=[2, 2]), checkpoint_dir=str(tmp / "rev"))
  shutil.copytree(straight["checkpoint_dir"], reverse["checkpoint_dir"])
  out["mirrored_stdout"] = tu.run_jobs_in_one_process([mirrored], str(tmp / "m"))
  out["mesh_resumed_stdout"] = tu.run_jobs_in_one_process([reverse], str(tmp / "r"))
  for name, j in (("straight", straight), ("single", single), ("mirrored", mirrored),
                  ("mesh", reverse)):
    out[name] = tu.read_history(j)
  return out


@pytest.mark.slow
def test_the_kill_mid_write_leaves_the_previous_checkpoint_usable(runs):
  assert runs["committed"] == [8]
  # Step 16's tensors were written, its commit never came.
  assert "ckpt-16.index" in runs["after_kill"] and "ckpt-8.index" in runs["after_kill"]
  assert "[trainer] done" not in runs["mesh_stdout"]
  assert runs["same_dir"]  # The rerun on another layout names the same directory.


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["single", "mirrored"])
def test_a_killed_mesh_run_resumes_on_another_layout_to_the_same_weights(runs, layout):
  got, want = runs[layout], runs["straight"]
  assert got["layout"] == layout and got["resumed_from_step"] == 8
  assert got["steps_run"] == STEPS - 8 and got["total_steps"] == STEPS
  assert want["resumed_from_step"] == 0 and want["steps_run"] == STEPS
  # The run record continues the mesh run's: the records at 4 and 8 came with it.
  assert [r["step"] for r in got["records"]] == list(range(4, STEPS + 1, 4))
  for key in ("kernel", "bias"):
    np.testing.assert_allclose(np.array(got["weights"][key]), np.array(want["weights"][key]),
                               rtol=1e-5, atol=1e-5, err_msg=f"{layout} {key}")


@pytest.mark.slow
def test_a_single_device_checkpoint_resumes_on_a_mesh(runs):
  got, want = runs["mesh"], runs["straight"]
  assert got["mesh_shape"] == [2, 2] and got["resumed_from_step"] == 16
  for key in ("kernel", "bias"):
    np.testing.assert_allclose(np.array(got["weights"][key]), np.array(want["weights"][key]),
                               rtol=1e-5, atol=1e-5, err_msg=f"mesh {key}")


@pytest.mark.slow
@pytest.mark.parametrize("layout,saved,now", [("single", "mesh 2x2", "single"),
                                              ("mirrored", "mesh 2x2", "mirrored x2"),
                                              ("mesh_resumed", "single", "mesh 2x2")])
def test_the_console_names_the_layout_the_checkpoint_came_from(runs, layout, saved, now):
  out = runs[f"{layout}_stdout"]
  step = 16 if layout == "mesh_resumed" else 8
  assert re.search(rf"resuming from \S+ckpt-{step} at step {step} \(saved by layout "
                   rf"{saved}; now {now}\)", out), out[-3000:]


# The pipeline as a user runs it (tfx_parallel.pipeline.local_runner: ExampleGen, trainer,
# evaluator on LocalDagRunner with SQLite ML Metadata), in a process of its own.
_RUN_PIPELINE = (
    "import json, sys\n"
    "from tfx_parallel.components.common import tfenv\n"
    "tfenv.prepare()\n"
    "from tfx_parallel.pipeline import config as config_lib, local_runner\n"
    "local_runner.run(config_lib.PipelineConfig.from_dict(json.loads(sys.argv[1])), sys.argv[2])\n")
PIPELINE = {"pipeline_name": "relayout", "example_gen": {"rows": 1000},
            "trainer": dict(CONFIG, layout="mesh", mesh=[2, 2], device="cpu"),
            "evaluator": {"require_converged": False}}


@pytest.mark.slow
def test_a_killed_mesh_pipeline_rerun_as_mirrored_resumes_from_its_checkpoint(tmp_path):
  """The whole pipeline process group is SIGKILLed (a preempted node) while its mesh 2x2
  trainer writes the step-16 checkpoint; the same pipeline rerun with the layout set to
  mirrored x2 resumes at step 8 and records 16 steps run in ML Metadata."""
  from ml_metadata import metadata_store  # pylint: disable=g-import-not-at-top
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  home = str(tmp_path / "home")
  proc = subprocess.Popen([sys.executable, "-c", _RUN_PIPELINE, json.dumps(PIPELINE), home],
                          env=dict(os.environ, **pause.env(16)),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
  lines = []
  try:
    for line in proc.stdout:
      lines.append(line)
      if "step 16 written, pausing" in line:
        break
  finally:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=KILL_SECONDS)
  assert "step 16 written, pausing" in "".join(lines), "".join(lines)[-3000:]
  rerun = dict(PIPELINE, trainer=dict(CONFIG, layout="mirrored", devices=2, device="cpu"))
  done = subprocess.run([sys.executable, "-c", _RUN_PIPELINE, json.dumps(rerun), home],
                        capture_output=True, text=True, timeout=900)
  out = done.stdout + done.stderr
  assert done.returncode == 0, out[-3000:]
  assert re.search(r"resuming from \S+ckpt-8 at step 8 \(saved by layout mesh 2x2; now "
                   r"mirrored x2\)", out), out[-3000:]
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = os.path.join(home, "metadata.sqlite")
  histories = metadata_store.MetadataStore(cfg).get_artifacts_by_type("TrainingHistory")
  assert [(h.custom_properties["layout"].string_value, h.custom_properties["steps_run"].int_value)
          for h in histories] == [("mirrored", STEPS - 8)]
  # Finished: the executor removed the checkpoints.
  assert not [f for d in glob.glob(os.path.join(home, "**", "_checkpoints", "*"),
                                   recursive=True) for f in os.listdir(d) if f.startswith("ckpt")]
