"""Checkpoints outlive a layout: a mesh 2x2 run stopped after its step-8 checkpoint (what a
kill after that checkpoint leaves) resumes as mirrored x2 and as single, from step 8 on
the same batches, and ends where an uninterrupted single-device run ends (1e-5). The
console names the layout the checkpoint came from. SGD with momentum 0.9, so the
optimizer's state (one slot per variable) must carry across too."""
import os
import re
import shutil

import numpy as np
import pytest

import trainer_util as tu

CONFIG = dict(batch_size=32, learning_rate=0.05, optimizer="momentum", log_every=4,
              checkpoint_every=8, steps_per_execution=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("resume_layouts")
  root = str(tmp / "ex")
  keys, _, rows = tu.write_examples(root, rows=512, eval_rows=64, num_features=4)

  def job(name, steps, **layout):
    return tu.job_dict(str(tmp / name), root, keys, rows, steps=steps, **CONFIG, **layout)

  # The mesh run: 12 steps, so its last checkpoint is step 8's (none at the end).
  mesh = job("mesh", 12, layout="mesh", mesh=[2, 2])
  tu.run_jobs_in_one_process([mesh], str(tmp / "mesh"))
  saved = os.path.join(str(tmp), "saved_ckpt")
  shutil.copytree(mesh["checkpoint_dir"], saved)

  def resumed(name, **layout):
    j = job(name, 16, **layout)
    shutil.copytree(saved, j["checkpoint_dir"])
    return j

  straight, single = job("straight", 16, layout="single"), resumed("single", layout="single")
  out = {"single_stdout": tu.run_jobs_in_one_process([straight, single], str(tmp / "s"))}
  mirrored = resumed("mirrored", layout="mirrored", devices=2)
  out["mirrored_stdout"] = tu.run_jobs_in_one_process([mirrored], str(tmp / "m"))
  out["ckpts"] = sorted(os.listdir(saved))
  for name, j in (("mesh", mesh), ("straight", straight), ("single", single),
                  ("mirrored", mirrored)):
    out[name] = tu.read_history(j)
  return out


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["single", "mirrored"])
def test_a_mesh_checkpoint_resumes_on_another_layout_to_the_same_weights(runs, layout):
  assert [c for c in runs["ckpts"] if c.startswith("ckpt-")] == ["ckpt-0000000008.npz"]
  assert runs["mesh"]["mesh_shape"] == [2, 2]
  got, want = runs[layout], runs["straight"]
  assert got["layout"] == layout and got["resumed_from_step"] == 8
  assert got["steps_run"] == 8 and got["total_steps"] == 16
  # The run record continues the mesh run's: records at 4 and 8 came with the checkpoint.
  assert [r["step"] for r in got["records"]] == [4, 8, 12, 16]
  for key in ("kernel", "bias"):
    np.testing.assert_allclose(np.array(got["weights"][key]), np.array(want["weights"][key]),
                               rtol=1e-5, atol=1e-5, err_msg=f"{layout} {key}")
  # And the stop did matter: the mesh run's own weights (step 12) are not the final ones.
  assert not np.allclose(np.array(runs["mesh"]["weights"]["kernel"]),
                         np.array(want["weights"]["kernel"]), atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("layout,now", [("single", "single"), ("mirrored", "mirrored x2")])
def test_the_console_names_the_layout_the_checkpoint_came_from(runs, layout, now):
  out = runs[f"{layout}_stdout"]
  assert re.search(rf"resuming from \S+ckpt-0000000008\.npz at step 8 \(saved by layout "
                   rf"mesh 2x2; now {now}\)", out), out[-3000:]
