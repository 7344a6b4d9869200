"""GPU code paths: run only where TensorFlow sees a GPU; skip cleanly elsewhere."""
import pytest

import tfx_parallel.pipeline.tfenv as tfenv
import trainer_util as tu

HAS_GPU = bool(tfenv.gpus())
requires_gpu = pytest.mark.skipif(not HAS_GPU, reason="no GPU visible to TensorFlow")


@requires_gpu
@pytest.mark.slow
def test_mirrored_over_all_local_gpus_recovers_seed_parameters(tmp_path):
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=2048)
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="mirrored", devices=0,
                    epochs=4, batch_size=64, learning_rate=0.1, optimizer="adam")
  history = tu.run_job(job, str(tmp_path))
  assert all("GPU" in d for d in history["devices"]), history["devices"]
  w = history["weights"]["kernel"]
  assert abs(w[0][0] - 1.0) < 0.05 and abs(w[1][0] - 2.0) < 0.05


@requires_gpu
@pytest.mark.skipif(not tu.MESH_AVAILABLE, reason="mesh_runtime.py not in this build")
@pytest.mark.slow
def test_mesh_on_gpus_splits_the_model_and_recovers_seed_parameters(tmp_path):
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=2048)
  n = len(tfenv.gpus())
  mesh = [n // 2, 2] if n >= 2 else [1, 1]  # A model axis of 2 when there are 2+ GPUs.
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="mesh", mesh=mesh,
                    epochs=4, batch_size=64, learning_rate=0.1, optimizer="adam")
  history = tu.run_job(job, str(tmp_path))
  assert list(history["mesh_shape"]) == mesh
  assert len(history["devices"]) == mesh[0] * mesh[1]
  assert all("GPU" in d for d in history["devices"]), history["devices"]
  w = history["weights"]["kernel"]
  assert abs(w[0][0] - 1.0) < 0.05 and abs(w[1][0] - 2.0) < 0.05, w
  assert abs(history["weights"]["bias"][0] - tu.TRUE_B) < 0.05, history["weights"]
