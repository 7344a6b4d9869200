"""devices.py: the device plan and the collective choice, with the devices injected."""
import dataclasses
import re

import pytest

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env
from tfx_parallel.components.distributed_trainer.run import launcher
from hooks_site import standin


def _plan(layout, gpus, devices_=0, mesh=(1, 1), device="auto", batch=64, logical=0):
  return devices.plan(layout, devices_, mesh, device, gpus, batch, logical)


@pytest.mark.parametrize("layout,devices_,mesh,cpus", [
    ("single", 0, (1, 1), 0), ("mirrored", 0, (1, 1), 2), ("mirrored", 4, (1, 1), 4),
    ("mesh", 0, (2, 2), 4), ("mesh", 0, (1, 2), 2), ("multi_worker", 0, (1, 1), 0)])
def test_without_gpus_the_cpu_is_split_as_before(layout, devices_, mesh, cpus):
  p = _plan(layout, 0, devices_, mesh)
  assert (p.device_type, p.cpu_devices, p.hide_gpus, p.reason) == ("CPU", cpus, False, "")
  if layout == "mesh":
    assert p.mesh == mesh
  if layout == "mirrored":
    assert p.devices == cpus


def test_device_cpu_forces_the_cpu_and_hides_the_gpus():
  p = _plan("mesh", 8, mesh=(2, 2), device="cpu")
  assert (p.device_type, p.cpu_devices, p.hide_gpus, p.mesh) == ("CPU", 4, True, (2, 2))
  assert p.collective == "dtensor_cpu"
  assert _plan("mirrored", 0, device="cpu").hide_gpus is False


def test_device_gpu_without_a_gpu_names_the_key():
  with pytest.raises(ConfigError, match=r"^device: is 'gpu' but TensorFlow sees no GPU"):
    _plan("single", 0, device="gpu")
  with pytest.raises(ConfigError, match=r"^device: must be one of .*Received: 'tpu'"):
    _plan("single", 1, device="tpu")


@pytest.mark.parametrize("gpus,want", [(1, 1), (2, 2), (3, 2), (4, 4), (8, 8)])
def test_mirrored_devices_zero_means_every_gpu_that_divides_the_batch(gpus, want):
  p = _plan("mirrored", gpus, 0)
  assert (p.device_type, p.devices, p.cpu_devices) == ("GPU", want, 0)
  assert ("3 GPU(s)" in p.reason) == (gpus == 3)


@pytest.mark.parametrize("gpus,want", [(1, 1), (2, 2), (8, 2)])
def test_mirrored_two_shrinks_to_the_gpus_present(gpus, want, capsys):
  p = _plan("mirrored", gpus, 2)
  assert p.devices == want
  assert (p.reason != "") == (gpus < 2), p.reason
  if gpus == 1:
    assert p.reason == "mirrored over 2 devices does not fit 1 GPU(s): mirrored over 1"


@pytest.mark.parametrize("gpus,mesh,want", [
    (1, (2, 2), (1, 1)), (2, (2, 2), (1, 2)), (3, (2, 2), (1, 2)), (4, (2, 2), (2, 2)),
    (8, (2, 2), (2, 2)), (6, (4, 2), (2, 2)), (4, (1, 4), (1, 4)), (2, (1, 4), (1, 2)),
    (3, (3, 1), (3, 1)), (2, (3, 1), (1, 1)), (5, (2, 4), (1, 4))])
def test_mesh_shrinks_to_the_largest_that_fits(gpus, mesh, want):
  p = _plan("mesh", gpus, mesh=mesh)
  assert p.mesh == want
  assert p.devices_used <= gpus
  if want != mesh:
    assert f"mesh {mesh[0]}x{mesh[1]} needs {mesh[0] * mesh[1]} devices, {gpus} GPU(s)" \
        in p.reason and f"mesh {want[0]}x{want[1]}" in p.reason
  else:
    assert p.reason == ""


def test_the_executor_fits_the_mesh_once_and_the_training_process_keeps_it(capsys):
  """executor.fit_mesh: the parent fits the mesh to the GPUs present (the module's
  checks then see the mesh that trains); the training process's own plan of that mesh
  changes nothing and says nothing."""
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config = TrainerConfig(layout="mesh", mesh=(2, 2), batch_size=64).validate()
  fitted = executor.fit_mesh(config, ["GPU:0", "GPU:1"])
  assert fitted.mesh == (1, 2)
  assert "[trainer] devices: mesh 2x2 needs 4 devices, 2 GPU(s) present: mesh 1x2" in \
      capsys.readouterr().out
  again = _plan("mesh", 2, mesh=fitted.mesh)
  assert again.mesh == (1, 2) and again.reason == ""
  assert executor.fit_mesh(config, []) is config  # Logical CPUs: the mesh as asked.
  assert executor.fit_mesh(dataclasses.replace(config, layout="single"), ["GPU:0"]).mesh \
      == (2, 2)


def test_one_gpu_split_into_logical_gpus_stands_in_for_several():
  p = _plan("mesh", 1, mesh=(2, 2), logical=4)
  assert (p.mesh, p.collective, p.reason) == ((2, 2), "dtensor_gpu", "")
  p = _plan("mirrored", 1, 0, logical=4)
  assert (p.devices, p.collective) == (4, "reduce_to_gpu0")


@pytest.mark.parametrize("layout,kind,shared,want", [
    ("single", "GPU", 1, "none"), ("single", "CPU", 1, "none"),
    ("mirrored", "GPU", 1, "nccl_all_reduce"), ("mirrored", "GPU", 4, "reduce_to_gpu0"),
    ("mirrored", "CPU", 1, "reduce_to_cpu"),
    ("multi_worker", "GPU", 1, "nccl"), ("multi_worker", "CPU", 1, "ring"),
    ("mesh", "GPU", 1, "dtensor_gpu_nccl"), ("mesh", "GPU", 2, "dtensor_gpu"),
    ("mesh", "CPU", 1, "dtensor_cpu")])
def test_collective_choice(layout, kind, shared, want):
  assert devices.collectives(layout, kind, shared) == want
  assert want in devices.COLLECTIVES


def test_plan_record_names_the_collective():
  record = _plan("mirrored", 4, 0).as_record()
  assert record["collective"] == "nccl_all_reduce"
  assert "NcclAllReduce()" in record["collective_detail"]
  assert record["device_type"] == "GPU"


@pytest.mark.parametrize("workers,ids,want,reason", [
    (2, ["0", "1"], ["0", "1"], ""),
    (2, ["0", "1", "2", "3"], ["0,1", "2,3"], ""),
    (2, ["0", "1", "2"], ["0", "1"], "1 GPU(s) unused"),
    (2, ["0"], ["", ""], "the workers run on the CPU"),
    (2, [], [None, None], "")])
def test_each_local_worker_gets_its_own_gpus(workers, ids, want, reason):
  got, why = devices.worker_gpus(workers, ids)
  assert got == want
  assert reason in why and (why == "") == (reason == "")


def test_launcher_worker_environments_respect_visible_devices_and_device_cpu():
  envs, _ = launcher.worker_environments(2, "auto", {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 4)
  assert envs == [{"CUDA_VISIBLE_DEVICES": "4,5"}, {"CUDA_VISIBLE_DEVICES": "6,7"}]
  envs, _ = launcher.worker_environments(2, "auto", {}, 2)
  assert envs == [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]
  assert launcher.worker_environments(2, "cpu", {}, 2)[0] == [{}, {}]
  assert launcher.worker_environments(2, "auto", {}, 0)[0] == [{}, {}]


def test_gpu_memory_policy_values():
  for ok in ("growth", "all", "4GiB", 2**30):
    devices.check_gpu_memory(ok)
  assert devices.memory_limit_mb("4GiB") == 4096
  assert devices.memory_limit_mb("growth") is None
  with pytest.raises(ConfigError, match=r"^gpu_memory: must be .*Received: 'lots'"):
    devices.check_gpu_memory("lots")


def test_no_gpu_message_carries_cudas_own_error():
  stderr = ("2026-12-03 W external/local_tsl/tsl/platform/default/dso_loader.cc:64] Could not "
            "load dynamic library 'libcuda.so.1'; dlerror: libcuda.so.1: cannot open shared "
            "object file\nsome other line\n")
  lines = gpu_env.cuda_lines(stderr)
  assert len(lines) == 1 and "libcuda.so.1" in lines[0]
  text = gpu_env.no_gpu_message("training process", lines, ["GPU 0: NVIDIA L4 (UUID: x)"],
                                {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib64"})
  assert text.startswith("require_gpu: the training process sees no GPU")
  assert "nvidia-smi -L: 1 GPU(s): GPU 0: NVIDIA L4" in text
  assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in text
  assert "dlerror: libcuda.so.1" in text


def test_cuda_lines_are_said_once():
  line = "2026-12-03 10:33:35.52: I tsl/cuda/cudart_stub.cc:32] Could not find cuda drivers"
  assert gpu_env.cuda_lines(f"{line}\n{line.replace('35.52', '35.53')}\n") == [line]


@pytest.mark.slow
def test_require_gpu_without_a_gpu_fails_the_training_process_at_once(tmp_path):
  """The real training process, on this GPU-less machine: it fails before reading data."""
  import json
  import subprocess
  import sys
  import trainer_util as tu
  job = tu.job_dict(str(tmp_path), str(tmp_path / "no-examples"), ["x0"], 64,
                    layout="single", device="auto", require_gpu=True)
  path = tmp_path / "job.json"
  path.write_text(json.dumps(job))
  proc = subprocess.run([sys.executable, "-m",
                         "tfx_parallel.components.distributed_trainer.run.train", "--job",
                         str(path)], capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  assert "NoGpuError: require_gpu: the training process sees no GPU" in proc.stderr, \
      proc.stderr[-3000:]
  assert "nvidia-smi -L: " in proc.stderr


def test_cli_device_flags_reach_the_trainer_config():
  from tfx_parallel.pipeline import cli
  parse = lambda *a: cli.config_from_args(cli.build_parser().parse_args(["run", *a])).trainer
  t = parse("--layout", "mirrored", "--device", "cpu", "--gpu-memory", "4GiB")
  assert (t.devices, t.device, t.gpu_memory, t.require_gpu) == (0, "cpu", "4GiB", False)
  assert parse("--layout", "mirrored", "--devices", "3").devices == 3
  # Config devices 0: the planner plans for devices.CPU_DEVICES logical CPU devices.
  assert parse("--layout", "auto", "--device-memory", "1GiB").devices == 0
  assert parse("--require-gpu").require_gpu is True


@pytest.mark.parametrize("kwargs,message", [
    (dict(device="tpu"), r"^device: must be one of \['auto', 'cpu', 'gpu'\]. Received: 'tpu'"),
    (dict(require_gpu=True, device="cpu"), r"^require_gpu: contradicts device 'cpu'"),
    (dict(gpu_memory="most"), r"^gpu_memory: must be 'growth', 'all' or a size"),
    (dict(logical_gpus=-1), r"^logical_gpus: must be >= 0. Received: logical_gpus=-1")])
def test_trainer_config_rejects_bad_device_keys(kwargs, message):
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig
  with pytest.raises(ConfigError, match=message):
    TrainerConfig(**kwargs).validate()


@pytest.mark.slow
def test_gpu_tests_fail_rather_than_skip_when_tensorflow_misses_a_listed_gpu(tmp_path):
  """tests/test_gpu.py under an nvidia-smi that lists a GPU this TensorFlow cannot see
  (this machine has none): the check fails, with the diagnosis, instead of skipping."""
  import os
  import subprocess
  import sys
  fake = tmp_path / "bin" / "nvidia-smi"
  fake.parent.mkdir()
  fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA L4 (UUID: GPU-fake)'\n")
  fake.chmod(0o755)
  env = dict(os.environ, PATH=f"{fake.parent}:{os.environ['PATH']}")
  env.pop("CUDA_VISIBLE_DEVICES", None)
  tests = os.path.dirname(os.path.abspath(__file__))
  proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         os.path.join(tests, "test_gpu.py"), "-k", "sees_every_gpu"],
                        cwd=os.path.dirname(tests), env=env, capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 1, proc.stdout[-3000:]
  assert "1 failed" in proc.stdout and "require_gpu: the test process sees no GPU" in \
      proc.stdout, proc.stdout[-3000:]


@pytest.mark.parametrize("gpus,batch,want", [
    (0, 64, (2, 2)), (1, 64, (1, 1)), (2, 64, (1, 2)), (3, 64, (1, 2)), (4, 64, (2, 2)),
    (6, 64, (2, 2)), (6, 96, (3, 2)), (8, 64, (4, 2))])
def test_default_mesh_fits_the_gpu_count(gpus, batch, want):
  assert devices.default_mesh(gpus, batch) == want
  # The trainer's fit leaves a default mesh as it is on the same GPUs.
  if gpus:
    assert _plan("mesh", gpus, mesh=want, batch=batch).mesh == want


def test_cli_default_mesh_is_2x2_without_gpus():
  from tfx_parallel.pipeline import cli
  args = cli.build_parser().parse_args(["run", "--device", "cpu"])
  assert cli.config_from_args(args).trainer.mesh == (2, 2)
  args = cli.build_parser().parse_args(["run", "--mesh", "1x3"])
  assert cli.config_from_args(args).trainer.mesh == (1, 3)


def test_standin_gpus_hook_reads_its_count_and_cuda_visible_devices():
  env = standin.STANDIN_GPUS_ENV
  assert standin.standin_gpus({}) is None and standin.standin_gpus({env: ""}) is None
  assert standin.standin_gpus({env: "3"}) == ["0", "1", "2"]
  assert standin.standin_gpus({env: "4", "CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
  assert standin.standin_gpus({env: "4", "CUDA_VISIBLE_DEVICES": ""}) == []
  assert standin.standin_gpus({env: "2", "CUDA_VISIBLE_DEVICES": "1,5"}) == ["1"]
  with pytest.raises(ValueError, match=r"^TFXP_STANDIN_GPUS \(a test hook\) must be a GPU "
                                       r"count >= 0. Received: 'two'"):
    standin.standin_gpus({env: "two"})


def test_stand_in_runs_the_gpu_plan_on_as_many_logical_cpus():
  env = {standin.STANDIN_GPUS_ENV: "3"}
  gpu = _plan("mirrored", 3, 0)
  made = standin.stand_in(gpu, env)
  p = made.plan
  assert (p.devices, p.reason) == (2, gpu.reason) and "3 GPU(s)" in p.reason
  assert (p.device_type, p.cpu_devices, p.hide_gpus, p.collective) == (
      "CPU", 3, True, "reduce_to_cpu")
  assert (made.gpus, made.gpu_collective) == (3, "nccl_all_reduce")
  assert standin.describe(made) == (
      "mirrored x2 on 2 CPU(s) standing in for 3 GPU(s) (TFXP_STANDIN_GPUS)")
  assert p.as_record()["collective"] == "reduce_to_cpu"
  mesh = standin.stand_in(_plan("mesh", 3, mesh=(2, 2)), env)
  assert (mesh.plan.mesh, mesh.plan.collective, mesh.gpu_collective) == (
      (1, 2), "dtensor_cpu", "dtensor_gpu_nccl")
  # Unset hook: None. A CPU plan (device: cpu, or no stand-in GPU visible): the
  # same, with a real GPU hidden (the hook never trains on one).
  assert standin.stand_in(gpu, {}) is None
  cpu = _plan("mirrored", 0, 2)
  assert standin.stand_in(cpu, env).plan == dataclasses.replace(cpu, hide_gpus=True)
  assert not cpu.hide_gpus


def test_production_code_knows_no_test_hook():
  """Issue #39 item 9: stand-in GPUs and checkpoint pauses live in tests/hooks_site."""
  import pathlib  # pylint: disable=g-import-not-at-top
  root = pathlib.Path(__file__).resolve().parent.parent
  found = [str(p.relative_to(root)) for folder in ("components", "pipeline", "kubeflow")
           for p in (root / folder).rglob("*.py")
           if re.search(r"TFXP_STANDIN|TFXP_TEST_|standin|stand_in", p.read_text())]
  assert found == []


def test_cli_default_mesh_fits_the_standin_gpus(monkeypatch):
  from tfx_parallel.pipeline import cli
  parse = lambda *a: cli.config_from_args(cli.build_parser().parse_args(["run", *a])).trainer
  monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
  standin.install(monkeypatch.setattr)
  for n, mesh in ((1, (1, 1)), (3, (1, 2)), (8, (4, 2))):
    monkeypatch.setenv(standin.STANDIN_GPUS_ENV, str(n))
    assert parse().mesh == mesh
    assert parse("--device", "cpu").mesh == (2, 2)
