"""multi_worker fitted to workers x GPUs per worker (devices.multi_worker_replicas,
launcher.worker_environments) and a TFJob's replicas x GPUs (devices.check_multi_worker_batch,
called by kube_launch.run before submitting): every plan divides the global batch, or the run is
rejected before any worker starts, naming the numbers.

On GPUs MultiWorkerMirroredStrategy has workers x GPUs replicas and
``InputContext.get_per_replica_batch_size`` raises when the global batch does not divide
them (tensorflow/python/distribute/distribute_lib.py:902-904, TF 2.16.2).
"""
import itertools

import pytest

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.job import Job
from tfx_parallel.components.distributed_trainer.kube import launch as kube_launch
from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings
from tfx_parallel.components.distributed_trainer.plan import devices
from tfx_parallel.components.distributed_trainer.run import launcher

WORKERS, GPUS, BATCHES = (1, 2, 3, 4), (1, 2, 4, 8), (64, 1000, 1024)
GRID = list(itertools.product(WORKERS, GPUS, BATCHES))


def _counts(envs):
  return [len(e["CUDA_VISIBLE_DEVICES"].split(",")) for e in envs]


@pytest.mark.parametrize("workers,gpus,batch", GRID)
def test_local_plan_divides_the_batch_or_is_rejected_with_the_numbers(workers, gpus, batch):
  try:
    envs, reason = launcher.worker_environments(workers, "auto", {}, workers * gpus, batch)
  except ConfigError as e:
    assert batch % workers, f"{workers}x{gpus} batch {batch} fits but was rejected: {e}"
    assert e.key == "batch_size"
    for number in (f"{workers} worker(s)", f"global batch {batch}", f"gpus_per_worker={gpus}"):
      assert number in str(e), str(e)
    return
  counts = _counts(envs)
  assert len(set(counts)) == 1 and counts[0] <= gpus, envs
  assert batch % (workers * counts[0]) == 0, (workers, counts, batch)
  # The most GPUs per worker that divide: no larger count would have.
  assert all(batch % (workers * g) for g in range(counts[0] + 1, gpus + 1))
  ids = [i for e in envs for i in e["CUDA_VISIBLE_DEVICES"].split(",")]
  assert len(ids) == len(set(ids)), "two workers share a GPU"
  if counts[0] < gpus:
    assert (f"{workers} worker(s) x {gpus} GPU(s)" in reason and f"global batch {batch}" in reason
            and f"each worker trains on {counts[0]} GPU(s)" in reason), reason
  else:
    assert reason == ""


def test_issue_example_six_gpus_two_workers_batch_64_uses_two_per_worker():
  envs, reason = launcher.worker_environments(2, "auto", {}, 6, 64)
  assert envs == [{"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "3,4"}]
  assert "2 worker(s) x 3 GPU(s) = 6 replicas" in reason and "1 GPU(s) per worker" in reason


@pytest.mark.parametrize("workers,gpus,batch", GRID)
def test_tfjob_replicas_times_gpus_divide_the_batch_or_are_rejected(workers, gpus, batch):
  if batch % (workers * gpus) == 0:
    devices.check_multi_worker_batch(workers, gpus, batch, "TFJob")
    return
  with pytest.raises(ConfigError) as e:
    devices.check_multi_worker_batch(workers, gpus, batch, "TFJob")
  text = str(e.value)
  assert (f"{workers} replica(s) x {gpus} GPU(s) = {workers * gpus}" in text
          and f"global batch {batch}" in text), text
  below = batch // (workers * gpus) * workers * gpus
  above = below + workers * gpus
  assert f"batch_size {below or above} or {above}" in text


def test_tfjob_run_rejects_three_replicas_of_four_gpus_with_batch_1024_before_submitting(
    tmp_path):
  """The issue's example: 12 replicas do not divide 1024; kube_launch.run stops before it
  writes the job file or calls the API server."""
  class NoServer:  # Any call means the check came too late.
    def __getattr__(self, name):
      raise AssertionError(f"TFJob API server called ({name}) before the batch check")

  job = Job(config={"batch_size": 1024, "layout": "multi_worker"}, examples_uri="x",
            feature_keys=["a"], label_key="y", train_rows=10,
            model_dir=str(tmp_path / "m"), model_run_dir=str(tmp_path / "r"),
            history_dir=str(tmp_path / "h"),
            checkpoint_dir=str(tmp_path / "root" / "_checkpoints" / "abc"), num_shards=1)
  settings = kube_settings.TFJobSettings(image="img", namespace="ns", worker_replicas=3,
                                 gpus_per_replica=4)
  with pytest.raises(ConfigError, match=r"3 replica\(s\) x 4 GPU\(s\) = 12 .* 1024"):
    kube_launch.run(job, settings, client=NoServer())
  assert not (tmp_path / "root" / "_tfjobs").exists()


def test_local_launch_is_rejected_before_any_worker_starts(tmp_path, monkeypatch):
  started = []
  monkeypatch.setattr(launcher.subprocess, "Popen", lambda *a, **k: started.append(a))
  job = Job(config={"batch_size": 64, "layout": "multi_worker", "device": "auto",
                    "logical_gpus": 3}, examples_uri="x", feature_keys=["a"], label_key="y",
            train_rows=10, model_dir=str(tmp_path / "m"), model_run_dir=str(tmp_path / "r"),
            history_dir=str(tmp_path / "h"), checkpoint_dir=str(tmp_path / "ckpt"),
            num_shards=1)
  with pytest.raises(ConfigError, match=r"2 replica\(s\) x 3 GPU\(s\) = 6 .*global batch 64"):
    launcher.launch(job, "multi_worker", 2, gpu_count=2)
  assert started == []


def test_logical_gpus_with_multi_worker_never_choose_nccl():
  p = devices.plan("multi_worker", 0, (1, 1), "auto", gpu_count=1, batch_size=64,
                   logical_gpus=4)
  assert p.collective == "ring"
  assert devices.plan("multi_worker", 0, (1, 1), "auto", 2, 64).collective == "nccl"


@pytest.mark.parametrize("visible,want", [(None, "0"), ("3,1", "3"), ("GPU-ab12,GPU-cd", "GPU-ab12"),
                                          ("", "0")])
def test_logical_gpu_share_reads_the_first_visible_gpu_from_nvidia_smi(visible, want):
  environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
  assert devices.first_visible_gpu(environ) == want


SMI_FREE = ("0, GPU-aaaa-0000, 22000\n1, GPU-bbbb-1111, 7000\n"
            "2, GPU-cccc-2222, 15000\n3, GPU-dddd-3333, [N/A]\n")


@pytest.mark.parametrize("visible,want_mib", [
    (None, 7000), ("0,2", 15000), ("GPU-cccc-2222", 15000), ("1", 7000), ("5", None),
    ("", None)])
def test_planner_reads_free_memory_of_the_visible_gpus_from_nvidia_smi(visible, want_mib):
  """The executor's memory budget comes from nvidia-smi (no CUDA context in the executor),
  narrowed by CUDA_VISIBLE_DEVICES as TensorFlow narrows its GPUs."""
  got = devices.smi_free_bytes(SMI_FREE, visible)
  assert got == (None if want_mib is None else want_mib * 2**20)
