"""A machine whose nvidia-smi lists GPUs that TensorFlow cannot see (issue #29).

A stand-in ``nvidia-smi`` is put first on PATH: it answers ``-L`` with two GPUs, in the
format of the real tool (``GPU <index>: <name> (UUID: GPU-<uuid>)``, one line per GPU,
as gpu_env.nvidia_smi_gpus parses it). This machine has no NVIDIA driver, so TensorFlow
2.16.2 finds no GPU and logs why (dso_loader: "Could not load dynamic library
'libcudart.so.12'; dlerror: ..."). Then:

* benchmarks/gpu_check.py exits non-zero, naming that load error, before any training;
* ``tfx-parallel run`` prints one warning on the console with the same facts, and trains
  on the CPU;
* ``tfx-parallel run --require-gpu`` fails before ExampleGen has run.
"""
import os
import subprocess
import sys

import pytest

from tfx_parallel.components.distributed_trainer.plan import gpu_env
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.pipeline import config as config_lib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_CHECK = os.path.join(REPO, "benchmarks", "gpu_check.py")
LOAD_ERROR = "Could not load dynamic library 'libcudart.so.12'; dlerror: libcudart.so.12"
WARNING = "tfx-parallel: warning: nvidia-smi lists 2 GPU(s) but TensorFlow sees none"
STANDIN_SMI = """#!/bin/sh
if [ "$1" = "-L" ]; then
  echo "GPU 0: NVIDIA L4 (UUID: GPU-6f1a0b5e-0000-4c3e-9d1a-000000000000)"
  echo "GPU 1: NVIDIA L4 (UUID: GPU-6f1a0b5e-0000-4c3e-9d1a-000000000001)"
else
  echo "NVIDIA-SMI 550.54.15  Driver Version: 550.54.15  CUDA Version: 12.4 (stand-in)"
fi
"""
pytestmark = pytest.mark.skipif(
    bool(gpu_env.nvidia_smi_gpus()), reason="a real nvidia-smi lists GPUs here")


@pytest.fixture
def smi_env(tmp_path):
  """The environment with the stand-in nvidia-smi first on PATH."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  (bin_dir / "nvidia-smi").write_text(STANDIN_SMI)
  (bin_dir / "nvidia-smi").chmod(0o755)
  env = {k: v for k, v in os.environ.items()
         if k not in ("TFXP_STANDIN_GPUS", gpu_env.CHECKED_ENV)}
  env["PATH"] = f"{bin_dir}:{env['PATH']}"
  return env


def test_the_probe_names_the_library_only_at_vlog_level_1():
  """dso_loader.cc logs the dlerror with VLOG(1): at level 0 no library is named."""
  assert gpu_env.DSO_LOADER_VLOG_LEVEL == "1"
  count, messages = gpu_env.probe()
  assert count == 0
  assert any(LOAD_ERROR in m for m in gpu_env.load_errors(messages)), messages
  quiet = subprocess.run([sys.executable, "-c", gpu_env._PROBE], capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0",
                                  TF_CPP_MAX_VLOG_LEVEL="0"), timeout=300)
  assert "GPUS=0" in quiet.stdout and not gpu_env.load_errors(gpu_env.cuda_lines(quiet.stderr))


def test_preflight_warns_once_for_auto_and_stops_require_gpu(smi_env, monkeypatch, capsys):
  monkeypatch.setenv("PATH", smi_env["PATH"])
  environ = dict(smi_env)
  assert gpu_env.preflight(TrainerConfig(), environ=environ) is True
  err = capsys.readouterr().err
  assert err.startswith(WARNING) and LOAD_ERROR in err, err
  assert environ[gpu_env.CHECKED_ENV] == "1"
  assert gpu_env.preflight(TrainerConfig(require_gpu=True), environ=dict(smi_env)) is False
  err = capsys.readouterr().err
  assert err.startswith("tfx-parallel: require_gpu: the run sees no GPU") and LOAD_ERROR in err
  assert gpu_env.preflight(TrainerConfig(device="cpu", require_gpu=False),
                           environ=dict(smi_env)) is True
  assert capsys.readouterr().err == ""
  # A remote (TFJob) trainer: the caller says so; this machine's GPUs are not probed.
  environ = dict(smi_env)
  assert gpu_env.preflight(TrainerConfig(require_gpu=True), environ=environ, remote=True) is True
  assert capsys.readouterr().err == "" and gpu_env.CHECKED_ENV not in environ


@pytest.mark.slow
def test_gpu_check_fails_naming_the_load_error(smi_env, tmp_path):
  proc = subprocess.run([sys.executable, GPU_CHECK, "--small", "--work", str(tmp_path / "w")],
                        cwd=REPO, env=smi_env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
  assert "gpu_check: FAILED: nvidia-smi lists 2 GPU(s) but TensorFlow sees none" in proc.stderr
  assert LOAD_ERROR in proc.stderr, proc.stderr[-3000:]
  assert not (tmp_path / "w" / "runs").exists()  # Nothing trained.


@pytest.mark.slow
def test_gpu_check_without_gpus_runs_the_cpu_path_and_says_no_gpu_was_used(tmp_path):
  out = tmp_path / "gpu_check.md"
  proc = subprocess.run([sys.executable, GPU_CHECK, "--small", "--sections", "environment",
                         "--work", str(tmp_path / "w"), "--output", str(out)],
                        cwd=REPO, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  report = out.read_text()
  assert report.startswith("# GPU check (CPU, 0 GPU(s);")
  assert "**No GPU was used.** nvidia-smi is not installed and TensorFlow sees no GPU" in report
  assert "## Environment" in report and "first kernel, cold process" in report


def _cli(home, env, *flags):
  return subprocess.run([sys.executable, "-m", "tfx_parallel.pipeline.cli", "run", "--home",
                         str(home), "--rows", "300", "--epochs", "1", *flags],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def _store(home):
  from ml_metadata import metadata_store  # pylint: disable=g-import-not-at-top
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  path = os.path.join(str(home), config_lib.METADATA_FILE)
  if not os.path.exists(path):
    return None
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = path
  cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
  return metadata_store.MetadataStore(cfg)


@pytest.mark.slow
def test_require_gpu_run_fails_before_example_gen(smi_env, tmp_path):
  proc = _cli(tmp_path, smi_env, "--require-gpu")
  assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
  assert "tfx-parallel: require_gpu: the run sees no GPU" in proc.stderr
  assert LOAD_ERROR in proc.stderr and "nvidia-smi -L: 2 GPU(s)" in proc.stderr
  store = _store(tmp_path)
  assert store is None or store.get_executions() == []  # No component ran.


@pytest.mark.slow
def test_default_run_warns_once_on_the_console_and_trains_on_the_cpu(smi_env, tmp_path):
  proc = _cli(tmp_path, smi_env)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  console = proc.stdout + proc.stderr
  assert console.count(WARNING) == 1, console[-4000:]  # Not again from the trainer.
  assert LOAD_ERROR in proc.stderr
  (history,) = [a for a in _store(tmp_path).get_artifacts()
                if "collective" in a.custom_properties]
  assert history.custom_properties["device_type"].string_value == "CPU"
