"""Real training runs through the GPU branch of the device plan, with N = 1..8 logical
CPU devices standing in for N GPUs (TFXP_STANDIN_GPUS, the test-only plugin
tests/hooks_site/standin.py; production code has no such hook): every
layout's default (the CLI's, no --devices / --mesh) and `make run`'s default complete.

Cost (CI budget): one process per N trains mirrored, then mesh (and single first at
N = 1 and N = 8 only: its plan is one device whatever N, ~10 s of CPU a run; the fast
test checks its plan for every N). TensorFlow's start-up and the first run's
tf.function tracing dominate; later runs in the process reuse them. The logical
devices are fixed when TensorFlow initialises, so each N needs its own process; DTensor
runs last in it (after the tf.distribute runs). multi_worker (three more processes)
trains at N = 3 (one stand-in GPU per worker, one unused); its per-worker share is
checked for every N without training (N = 1: both workers on the CPU, as
tests/test_trainer_training.py trains them). `make run` with its defaults runs once, end
to end, at N = 3.

What the stand-in stands in for, and where real TensorFlow does it (TensorFlow 2.16.2,
paths under site-packages/tensorflow/ unless said otherwise):

* GPU names and numbering. The stand-in ``devices.visible_gpus`` names N stand-ins
  ``/physical_device:GPU:0..N-1``. TensorFlow builds the same names in C++,
  ``tensorflow/core/common_runtime/gpu/gpu_device.cc`` ``BaseGPUDeviceFactory::
  ListPhysicalDevices`` (``StrCat("/physical_device:GPU:", platform_device_id)``), over
  ``CacheDeviceIds``'s ``iota(0, VisibleDeviceCount())``: the GPUs CUDA makes visible,
  numbered from 0. python/eager/context.py:1578-1580 wraps each name in a PhysicalDevice.
* ``CUDA_VISIBLE_DEVICES`` picks among the N and the picked ones are numbered from 0 again
  (``standin.standin_gpus``, then ``visible_gpus``): the same iota over
  ``VisibleDeviceCount()`` above; the selection itself is CUDA's.
* N GPUs become N logical CPU devices: ``tf.config.set_logical_device_configuration``
  (python/framework/config.py:847), fixed once TensorFlow initialises
  (python/eager/context.py:1840-1842, "Virtual devices cannot be modified after being
  initialized"): hence one process per N. Real GPUs are hidden first with
  ``tf.config.set_visible_devices([], "GPU")`` (python/framework/config.py:536).
* The collectives (``GPU_COLLECTIVE`` below is what the GPUs would use; the stand-in runs
  the CPU one). mirrored: ``select_cross_device_ops`` picks ``NcclAllReduce`` when every
  device is a GPU (python/distribute/cross_device_ops.py:1394-1395) and
  ``ReductionToOneDevice`` when one is not (1389-1392), or when the GPUs are logical GPUs
  of fewer physical ones (1368-1373). mesh: DTensor uses NCCL on GPUs when
  ``DTENSOR_GPU_USE_NCCL_COMMUNICATION`` is set (dtensor/python/config.py:212-214), and only
  with one logical GPU per physical GPU (dtensor/python/accelerator_util.py:212-221).
  multi_worker: without GPUs, MultiWorkerMirroredStrategy gives each worker one CPU device
  (python/distribute/collective_all_reduce_strategy.py:370-382), so its replicas are the
  workers; with G GPUs, G devices per worker.
"""
import json
import math
import os
import re
import subprocess
import sys

import pytest

import trainer_util as tu
from tfx_parallel.components.common import config_util
from tfx_parallel.components.distributed_trainer.plan import devices
from tfx_parallel.components.distributed_trainer.run import launcher
from tfx_parallel.pipeline import cli
from tfx_parallel.pipeline import config as config_lib
from hooks_site import standin

STANDIN = standin.STANDIN_GPUS_ENV
STEPS = 20
_REAL_PLAN = devices.plan  # The plan production makes (standin.install wraps it).
# The plans a reader can check by hand (global batch 64, the CLI's default).
# mirrored, --devices 0 = every GPU: the most replicas <= N dividing 64.
MIRRORED = {1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 4, 8: 8}
# mesh without --mesh: a model axis of 2 (1x1 on one GPU), the widest batch axis b with
# 2b <= N dividing 64.
MESH = {1: (1, 1), 2: (1, 2), 3: (1, 2), 4: (2, 2), 5: (2, 2), 6: (2, 2), 7: (2, 2),
        8: (4, 2)}
# single trains at these N only (module docstring: CI budget).
SINGLE_AT = (1, 8)
# What real GPUs would all-reduce with (the stand-in's log: gpu_collective).
GPU_COLLECTIVE = {"single": "none", "mirrored": "nccl_all_reduce", "mesh": "dtensor_gpu_nccl",
                  "multi_worker": "nccl"}


def cli_trainer_config(monkeypatch, n: int, layout: str, *flags) -> dict:
  """The trainer config `tfx-parallel run --layout LAYOUT` makes with N stand-in GPUs
  (defaults only), trained for a few steps."""
  monkeypatch.setenv(STANDIN, str(n))
  standin.install(monkeypatch.setattr)
  monkeypatch.delenv(devices.WORKER_GPUS_ENV, raising=False)
  args = cli.build_parser().parse_args(["run", "--layout", layout, *flags])
  config = json.loads(config_util.to_json(cli.config_from_args(args).validate().trainer))
  return dict(config, steps=STEPS)


def job_of(tmp: str, examples, config: dict) -> dict:
  root, keys, rows = examples
  job = tu.job_dict(tmp, root, keys, rows)
  return dict(job, config=config)


def read_history(job: dict) -> dict:
  with open(os.path.join(job["history_dir"], "history.json")) as f:
    return json.load(f)


def check_trained(history: dict):
  losses = [r["loss"] for r in history["records"]]
  assert history["steps_run"] == STEPS and losses, history["records"]
  assert all(math.isfinite(v) for v in losses), losses
  assert losses[-1] < 0.8 * losses[0], losses  # 20 steps at the CLI's learning rate


def cpus(history: dict):
  """The devices read from where the variables live, as CPU:i."""
  return [d.split("/device:")[-1] for d in history["devices"]]


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("examples"))
  keys, _, rows = tu.write_examples(root, rows=512, num_features=2, shards=2, eval_rows=128)
  return root, keys, rows


@pytest.mark.parametrize("visible,ids", [
    (None, ["0", "1", "2", "3"]), ("2,1", ["2", "1"]), ("0,2,-1,1", ["0", "2"]),
    ("0,7,1", ["0"]), ("", []), ("-1", [])])
def test_standin_gpus_read_cuda_visible_devices_as_cuda_does(visible, ids):
  """CUDA (not TensorFlow: gpu_device.cc only numbers what CUDA shows) ends the list at
  the first invalid index; its guide's own examples are "2,1" and "0,2,-1,1"."""
  environ = {STANDIN: "4"}
  if visible is not None:
    environ[devices.WORKER_GPUS_ENV] = visible
  assert standin.standin_gpus(environ) == ids


@pytest.mark.parametrize("n", range(1, 9))
def test_cli_defaults_plan_for_the_standin_gpus(monkeypatch, n):
  """No TensorFlow: the CLI's defaults and the plan each training process makes."""
  for layout in ("single", "mirrored", "mesh", "multi_worker"):
    config = cli_trainer_config(monkeypatch, n, layout)
    made = standin.stand_in(_REAL_PLAN(
        layout, config["devices"], config["mesh"], config["device"],
        len(devices.visible_gpus()), config["batch_size"]))
    plan = made.plan
    assert (made.gpus, made.gpu_collective) == (n, GPU_COLLECTIVE[layout])
    assert (plan.device_type, plan.hide_gpus) == ("CPU", True)
    assert plan.cpu_devices == (n if n > 1 else 0)
    assert plan.devices_used <= n
    if layout == "mirrored":
      assert plan.devices == MIRRORED[n]
      assert bool(plan.reason) == (MIRRORED[n] < n), plan.reason
    if layout == "mesh":
      assert tuple(config["mesh"]) == MESH[n] and plan.mesh == MESH[n] and plan.reason == ""
  # Local multi_worker: each of the 2 workers gets its own share of the N.
  envs, reason = launcher.worker_environments(2, "auto", {STANDIN: str(n)},
                                              len(devices.visible_gpus()))
  per_worker = [len(standin.standin_gpus(dict(e, **{STANDIN: str(n)}))) for e in envs]
  assert per_worker == [n // 2] * 2
  assert ("on the CPU" in reason) == (n == 1)
  assert ("1 GPU(s) unused" in reason) == (n in (3, 5, 7))


@pytest.mark.slow
@pytest.mark.parametrize("n", range(1, 9))
def test_every_local_layout_default_trains_on_n_standin_gpus(examples, tmp_path, monkeypatch,
                                                             n):
  """One process: (single,) mirrored (every GPU), then the default mesh, to completion."""
  layouts = (["single"] if n in SINGLE_AT else []) + ["mirrored", "mesh"]
  jobs = [job_of(str(tmp_path / layout), examples, cli_trainer_config(monkeypatch, n, layout))
          for layout in layouts]
  log = str(tmp_path / "standin.jsonl")
  tu.run_jobs_in_one_process(jobs, str(tmp_path), env=standin.env(n, log))
  plans = standin.read_log(log)
  assert [p["layout"] for p in plans] == layouts, plans
  for layout, job, made in zip(layouts, jobs, plans):
    history = read_history(job)
    check_trained(history)
    assert (history["layout"], history["device_type"]) == (layout, "CPU"), history
    assert (made["gpus"], made["gpu_collective"], made["collective"]) == (
        n, GPU_COLLECTIVE[layout], history["collective"]), made
    assert "standin_gpus" not in history  # The record holds no test field.
    used = {"single": 1, "mirrored": MIRRORED[n], "mesh": MESH[n][0] * MESH[n][1]}[layout]
    assert cpus(history) == [f"CPU:{i}" for i in range(used)], history["devices"]
    if layout == "mirrored":
      assert history["replicas"] == MIRRORED[n]
      assert history["collective"] == ("reduce_to_cpu")
      if MIRRORED[n] < n:
        assert history["device_plan_reason"] == (
            f"mirrored over {n} devices does not fit {n} GPU(s): mirrored over "
            f"{MIRRORED[n]} (the largest count <= {n} dividing batch_size 64)")
    if layout == "mesh":
      assert tuple(history["mesh_shape"]) == MESH[n] and history["collective"] == "dtensor_cpu"


@pytest.mark.slow
def test_multi_worker_default_trains_with_each_worker_on_its_standin_gpu(
    examples, tmp_path, monkeypatch, capfd):
  """Two local worker processes on 3 stand-in GPUs: one each, one unused (said)."""
  from tfx_parallel.components.distributed_trainer.run.train import Job
  job = job_of(str(tmp_path), examples, cli_trainer_config(monkeypatch, 3, "multi_worker"))
  log = str(tmp_path / "standin.jsonl")
  for key, value in standin.env(3, log).items():
    monkeypatch.setenv(key, value)  # The worker processes inherit it.
  launcher.launch(Job(**job), "multi_worker", job["config"]["workers"])
  assert "multi_worker: 1 GPU(s) per worker; 1 GPU(s) unused" in capfd.readouterr().out
  history = read_history(job)
  check_trained(history)
  assert (history["layout"], history["replicas"], history["device_type"]) == (
      "multi_worker", 2, "CPU")
  assert history["collective"] == "ring"
  # Each worker plans on its own share of the stand-in GPUs: one each.
  plans = standin.read_log(log)
  assert sorted((p["layout"], p["gpus"], p["gpu_collective"], p["collective"])
                for p in plans) == [("multi_worker", 1, "nccl", "ring")] * 2, plans
  assert len(history["devices"]) == 2


@pytest.mark.slow
def test_make_run_defaults_complete_on_three_standin_gpus(tmp_path):
  """`tfx-parallel run` (make run) with its defaults, smaller data and fewer steps, on 3
  stand-in GPUs: its default mesh (1x2) fits, and the training process plans on them."""
  log = str(tmp_path / "standin.jsonl")
  env = dict(os.environ, **standin.env(3, log))
  proc = subprocess.run(
      [sys.executable, "-m", "tfx_parallel.pipeline.cli", "run", "--home", str(tmp_path),
       "--rows", "500", "--epochs", "2"], capture_output=True, text=True, timeout=600, env=env)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "layout mesh 1x2" in proc.stdout, proc.stdout[-2000:]
  assert re.search(r"^layout     mesh 1x2\b", proc.stdout, re.M), proc.stdout[-2000:]
  (history,) = [a for a in _store(str(tmp_path / config_lib.METADATA_FILE)).get_artifacts()
                if "collective" in a.custom_properties]
  props = {k: v.string_value or v.int_value for k, v in history.custom_properties.items()}
  assert (props["layout"], props["mesh_shape"]) == ("mesh", "1x2")
  assert "standin_gpus" not in props  # ML Metadata holds no test field.
  # The training process planned on the 3 stand-ins (the executor's pre-check plans too).
  assert ("mesh", 3) in [(p["layout"], p["gpus"]) for p in standin.read_log(log)]
  assert (props["device_type"], props["collective"]) == ("CPU", "dtensor_cpu")
  assert props["steps_run"] > 0 and props["diverged"] == 0


def _store(path):
  from ml_metadata import metadata_store  # pylint: disable=g-import-not-at-top
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = path
  cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
  return metadata_store.MetadataStore(cfg)
