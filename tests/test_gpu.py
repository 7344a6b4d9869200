"""GPU code paths, on the GPUs of this machine.

They run where ``nvidia-smi -L`` lists a GPU, and there they FAIL (not skip) when
TensorFlow cannot see it (CUDA failed to load): a broken CUDA install must not look
green. Without an NVIDIA GPU they skip. Every layout asks for ``device: gpu`` (the other
trainer tests force the CPU through tests/trainer_util.py) and turns TF32 off for the
comparisons with the seed parameters.
"""
import os

import pytest

from tfx_parallel.components.common import tfenv
import trainer_util as tu
from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env

NVIDIA_GPUS = gpu_env.nvidia_smi_gpus() or []
requires_nvidia_gpu = pytest.mark.skipif(not NVIDIA_GPUS, reason="nvidia-smi lists no GPU")
GPU_CONFIG = dict(device="gpu", tf32=False, epochs=4, batch_size=64, learning_rate=0.1,
                  optimizer="adam")


def _visible_count() -> int:
  """The GPUs TensorFlow should see: nvidia-smi's, narrowed by CUDA_VISIBLE_DEVICES."""
  ids = devices.parse_visible(os.environ.get("CUDA_VISIBLE_DEVICES"), len(NVIDIA_GPUS))
  return len([i for i in ids if not i.isdigit() or int(i) < len(NVIDIA_GPUS)])


@requires_nvidia_gpu
def test_tensorflow_sees_every_gpu_nvidia_smi_lists():
  seen = len(tfenv.gpus())
  assert seen == _visible_count(), gpu_env.no_gpu_message("test process") if not seen else (
      f"TensorFlow sees {seen} GPU(s), nvidia-smi lists {NVIDIA_GPUS} "
      f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})")


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("ex"))
  keys, _, rows = tu.write_examples(root, rows=2048)
  return root, keys, rows


def _check_seed_parameters(history):
  w = history["weights"]["kernel"]
  assert abs(w[0][0] - 1.0) < 0.05 and abs(w[1][0] - 2.0) < 0.05, w
  assert abs(history["weights"]["bias"][0] - tu.TRUE_B) < 0.05, history["weights"]
  assert history["epochs"][-1]["eval_loss"] < 0.01, history["epochs"]
  assert history["records"][-1]["loss"] < history["records"][0]["loss"]
  assert (history["device_type"], history["tf32"]) == ("GPU", False)


@requires_nvidia_gpu
@pytest.mark.slow
def test_mirrored_over_all_local_gpus_recovers_seed_parameters(examples, tmp_path):
  root, keys, rows = examples
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="mirrored", devices=0,
                    **GPU_CONFIG)
  history = tu.run_job(job, str(tmp_path))
  n = len(tfenv.gpus())
  assert history["replicas"] == devices.fit_replicas(n, n, 64)
  assert len(history["devices"]) == history["replicas"]
  assert all("GPU" in d for d in history["devices"]), history["devices"]
  assert history["collective"] == "nccl_all_reduce"
  _check_seed_parameters(history)


@requires_nvidia_gpu
@pytest.mark.slow
def test_mesh_on_gpus_shards_the_model_axis_and_recovers_seed_parameters(examples, tmp_path):
  """A model axis of 2 always: [n//2, 2] on 2+ GPUs, one GPU split into 2 logical GPUs
  otherwise. The linear kernel (2 features) is split by rows over the model axis."""
  root, keys, rows = examples
  n = len(tfenv.gpus())
  mesh, logical = ([n // 2, 2], 0) if n >= 2 else ([1, 2], 2)
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="mesh", mesh=mesh,
                    logical_gpus=logical, **dict(GPU_CONFIG, batch_size=32 * mesh[0]))
  history = tu.run_job(job, str(tmp_path))
  assert list(history["mesh_shape"]) == mesh
  assert len(history["devices"]) == mesh[0] * mesh[1]
  assert all("GPU" in d for d in history["devices"]), history["devices"]
  assert history["collective"] == ("dtensor_gpu_nccl" if not logical else "dtensor_gpu")
  # Sharded: each device holds half the kernel, so less than a replicated copy of
  # params + gradients + 2 Adam slots (4 float32 per parameter) + the step counter.
  replicated = 4 * 4 * history["param_count"] + 8
  assert history["state_bytes_per_device"] < replicated, history
  _check_seed_parameters(history)


@requires_nvidia_gpu
@pytest.mark.slow
def test_single_records_the_gpu_its_variables_live_on(examples, tmp_path):
  root, keys, rows = examples
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="single", **GPU_CONFIG)
  history = tu.run_job(job, str(tmp_path))
  assert [d.split("/device:")[-1] for d in history["devices"]] == ["GPU:0"]
  _check_seed_parameters(history)


@requires_nvidia_gpu
@pytest.mark.slow
def test_the_default_mesh_fits_the_gpus_present(examples, tmp_path):
  """`make run`'s 2x2 mesh on however many GPUs there are: shrunk to fit, not a ValueError."""
  root, keys, rows = examples
  job = tu.job_dict(str(tmp_path), root, keys, rows, layout="mesh", mesh=[2, 2],
                    **dict(GPU_CONFIG, epochs=1))
  history = tu.run_job(job, str(tmp_path))
  n = len(tfenv.gpus())
  assert tuple(history["mesh_shape"]) == devices.fit_mesh((2, 2), n)
  assert (history["device_plan_reason"] == "") == (n >= 4)
