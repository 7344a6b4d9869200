"""The mesh layout's training run (train.py with mesh_engine.MeshEngine): a job through MeshTrainer in its own
process, with history records, per-epoch eval loss, measured bytes and the export."""
import os

import pytest

import trainer_util as tu


@pytest.mark.slow
def test_mesh_job_learns_the_seed_problem_and_records_its_run(tmp_path):
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=1024, eval_rows=128)
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="mesh", mesh=[2, 1], epochs=4,
                    batch_size=32, learning_rate=0.1, optimizer="adam", log_every=16)
  history = tu.run_job(job, str(tmp_path))
  assert (history["layout"], history["mesh_shape"], history["replicas"]) == ("mesh", [2, 1], 2)
  assert len(history["devices"]) == 2
  assert (history["device_type"], history["collective"]) == ("CPU", "dtensor_cpu")
  total = 4 * (1024 // 32)
  assert history["total_steps"] == history["steps_run"] == total
  assert [r["step"] for r in history["records"]] == list(range(16, total + 1, 16))
  assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3, 4]
  assert history["epochs"][-1]["eval_loss"] < history["epochs"][0]["eval_loss"]
  tu.assert_final_loss_is_eval_sized(history)  # The mean per-example loss, as single's.
  w, b = history["weights"]["kernel"], history["weights"]["bias"]
  assert abs(w[0][0] - 1.0) < 0.05 and abs(w[1][0] - 2.0) < 0.05 and abs(b[0] - 3.0) < 0.05
  # Replicated on both devices: params + grads + 2 Adam slots of (2x1 kernel, bias) + step,
  # + two copies of the kernel (8 B) in transit at an update or a boundary.
  assert history["state_bytes_per_device"] == 4 * 3 * 4 + 8 + 2 * 8
  assert (history["input_cache"]["mode"], history["input_cache"]["rows"]) == ("memory", 1024)
  assert os.path.exists(os.path.join(job["model_dir"], "saved_model.pb"))
  assert any(f.startswith("events.out.tfevents") for f in os.listdir(job["model_run_dir"]))
  # The record says what ran on the mesh (run_record.py): the built optimizer, its rate.
  assert history["optimizer"] == history["optimizer_config"]["class"] == "Adam"
  assert history["optimizer_config"]["learning_rate"] == pytest.approx(0.1)
  assert [r["learning_rate"] for r in history["records"]] == pytest.approx([0.1] * 8)
  assert history["loss"]["class"] == "MeanSquaredError" and not history["diverged"]
  # The rules applied and what each variable resolved to (one entry per dimension).
  # Model axis 1: the default rules split nothing (sharding.default_plan), and every
  # variable resolves to replicated, one entry per dimension.
  assert history["layout_rules"] == {}
  assert history["variable_shardings"] == {"linear/kernel": [None, None], "linear/bias": [None]}


@pytest.mark.slow
def test_mesh_job_resumes_from_its_checkpoint_on_the_same_batches(tmp_path):
  """16 steps with a checkpoint at 8, then a rerun to 24 steps resumes at 8: the same
  weights as 24 steps without a stop (Adam's state and step counter restored)."""
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=512, eval_rows=64)
  cfg = dict(layout="mesh", mesh=[2, 1], batch_size=32, learning_rate=0.05, optimizer="adam",
             log_every=4)

  def job(name, steps, every):
    return tu.job_dict(str(tmp_path / name), root, keys, rows, steps=steps,
                       checkpoint_every=every, **cfg)

  straight = tu.run_job(job("straight", 24, 0), str(tmp_path / "straight"))
  first = job("first", 16, 8)
  tu.run_job(first, str(tmp_path / "first"))
  second = dict(job("second", 24, 8), checkpoint_dir=first["checkpoint_dir"])
  resumed = tu.run_job(second, str(tmp_path / "second"))
  assert resumed["resumed_from_step"] == 8 and resumed["steps_run"] == 16
  assert [r["step"] for r in resumed["records"]] == [4, 8, 12, 16, 20, 24]
  for got, want in ((resumed["weights"]["kernel"], straight["weights"]["kernel"]),
                    ([resumed["weights"]["bias"]], [straight["weights"]["bias"]])):
    for a, b in zip(got, want):
      assert a == pytest.approx(b, abs=1e-5)


@pytest.mark.slow
def test_a_plain_sgd_mesh_checkpoint_resumes_strictly_on_single_to_the_same_weights(tmp_path):
  """Plain SGD runs as MeshSGD on the mesh (stock SGD's variables, its own update), and
  its checkpoint (the DVariables, saved sharded) holds what the user's SGD holds on any
  layout, so the strict restore on single matches every variable: resumed at 4, the weights of an
  uninterrupted single run."""
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=256, eval_rows=32)
  cfg = dict(batch_size=32, learning_rate=0.1, optimizer="sgd", log_every=4)
  mesh = tu.job_dict(str(tmp_path / "mesh"), root, keys, rows, layout="mesh", mesh=[1, 2],
                     steps=8, checkpoint_every=4, **cfg)
  tu.run_job(mesh, str(tmp_path / "mesh"))
  straight = tu.job_dict(str(tmp_path / "straight"), root, keys, rows, layout="single",
                         steps=12, checkpoint_every=0, **cfg)
  resumed = dict(tu.job_dict(str(tmp_path / "resumed"), root, keys, rows, layout="single",
                             steps=12, checkpoint_every=0, **cfg),
                 checkpoint_dir=mesh["checkpoint_dir"])
  out = tu.run_jobs_in_one_process([straight, resumed], str(tmp_path / "single"))
  assert "resuming from " in out and "at step 4 (saved by layout mesh 1x2; now single)" in out
  got, want = tu.read_history(resumed), tu.read_history(straight)
  assert got["resumed_from_step"] == 4 and got["optimizer"] == "SGD"
  for a, b in zip(got["weights"]["kernel"] + [got["weights"]["bias"]],
                  want["weights"]["kernel"] + [want["weights"]["bias"]]):
    assert a == pytest.approx(b, abs=1e-5)
