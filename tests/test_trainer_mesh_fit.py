"""The mesh layout's training run (mesh_fit.py): a job through MeshTrainer in its own
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
  total = 4 * (1024 // 32)
  assert history["total_steps"] == history["steps_run"] == total
  assert [r["step"] for r in history["records"]] == list(range(16, total + 1, 16))
  assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3, 4]
  assert history["epochs"][-1]["eval_loss"] < history["epochs"][0]["eval_loss"]
  w, b = history["weights"]["kernel"], history["weights"]["bias"]
  assert abs(w[0][0] - 1.0) < 0.05 and abs(w[1][0] - 2.0) < 0.05 and abs(b[0] - 3.0) < 0.05
  # Replicated on both devices: params + grads + 2 Adam slots of (2x1 kernel, bias) + step.
  assert history["state_bytes_per_device"] == 4 * 3 * 4 + 8
  assert os.path.exists(os.path.join(job["model_dir"], "saved_model.pb"))
