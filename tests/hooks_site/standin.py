"""Stand-in GPUs for tests: N logical CPU devices standing in for N GPUs, so the GPU
branch of the device plan (devices.plan: fit_replicas, fit_mesh, default_mesh,
``devices: 0`` = all, the launcher's share per local worker) drives real training runs
on a GPU-less machine. Test code only: production code does not know it (issue #39
item 9). It is applied by patching the trainer's device functions, in the test process
(:func:`install` with pytest's ``monkeypatch``) or in child processes (:func:`env`:
``sitecustomize.py`` beside this file, on ``PYTHONPATH``).

``TFXP_STANDIN_GPUS=N`` asks for it. What it replaces, and what real TensorFlow does
there (TensorFlow 2.16.2, tests/test_trainer_standin_devices.py has the citations):

* ``devices.visible_gpus`` and ``gpu_env.nvidia_smi_gpus``: N GPUs named as
  TensorFlow names them (``gpu_device.cc``), ``CUDA_VISIBLE_DEVICES`` picking among them
  as CUDA does; ``gpu_env.probe`` (TensorFlow's count in a fresh process) sees them too.
* ``devices.plan``: the real GPU plan, then run on as many logical CPU devices as
  stand-in GPUs are visible, with the CPU collective (:func:`stand_in`). Each plan made
  is appended as a JSON line to ``TFXP_STANDIN_LOG`` when set (``gpus`` and the
  ``gpu_collective`` real GPUs would have used), and printed.
"""
import dataclasses
import json
import os
from typing import List, Optional

from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env

STANDIN_GPUS_ENV = "TFXP_STANDIN_GPUS"
STANDIN_LOG_ENV = "TFXP_STANDIN_LOG"
SITE = os.path.dirname(os.path.abspath(__file__))


@dataclasses.dataclass(frozen=True)
class StandIn:
  """A plan made on stand-in GPUs: the CPU plan that runs, and what it stands in for."""
  plan: devices.DevicePlan
  gpus: int
  gpu_collective: str


def standin_gpus(environ=None) -> Optional[List[str]]:
  """The ids of the stand-in GPUs this process may use (``CUDA_VISIBLE_DEVICES`` picks
  among the N, as among real GPUs, and ends at the first invalid id, as CUDA does);
  None when ``TFXP_STANDIN_GPUS`` is unset or empty.

  Raises:
    ValueError: the value is not a count >= 0 (names the variable).
  """
  environ = os.environ if environ is None else environ
  value = environ.get(STANDIN_GPUS_ENV, "").strip()
  if not value:
    return None
  if not value.isdigit():
    raise ValueError(f"{STANDIN_GPUS_ENV} (a test hook) must be a GPU count >= 0. "
                     f"Received: {value!r}")
  count = int(value)
  ids = devices.parse_visible(environ.get(devices.WORKER_GPUS_ENV), count)
  valid = [i.isdigit() and int(i) < count for i in ids]
  return ids[:valid.index(False)] if False in valid else ids


def stand_in(plan: devices.DevicePlan, environ=None) -> Optional[StandIn]:
  """The GPU ``plan`` (layout, replicas and mesh fitted to the stand-in GPUs) on as many
  logical CPU devices as stand-in GPUs are visible, with the CPU collective; real GPUs,
  if any, hidden. None without ``TFXP_STANDIN_GPUS``."""
  gpus = standin_gpus(environ)
  if gpus is None:
    return None
  if plan.device_type != "GPU":  # No stand-in GPU visible, or device: cpu.
    return StandIn(dataclasses.replace(plan, hide_gpus=True), 0, "")
  count = len(gpus)
  return StandIn(dataclasses.replace(
      plan, device_type="CPU", cpu_devices=count if count > 1 else 0, hide_gpus=True,
      collective=devices.collectives(plan.layout, "CPU")), count, plan.collective)


def describe(made: StandIn) -> str:
  return f"{made.plan.describe()} standing in for {made.gpus} GPU(s) ({STANDIN_GPUS_ENV})"


def install(setattr_=setattr, environ=None) -> None:
  """Patches the device functions of this process (``setattr_``: ``monkeypatch.setattr``
  in a test, so that it is undone)."""
  environ = os.environ if environ is None else environ
  real_plan = getattr(devices.plan, "real", devices.plan)  # Installed twice: wrap once.

  def visible_gpus():
    return [f"/physical_device:GPU:{i}" for i in range(len(standin_gpus(environ) or []))]

  def nvidia_smi_gpus():
    count = int(environ.get(STANDIN_GPUS_ENV) or 0)
    return [f"GPU {i}: stand-in (UUID: GPU-standin-{i})" for i in range(count)]

  def probe(timeout: float = 120):
    del timeout
    return len(standin_gpus(environ) or []), []

  def plan(*args, **kwargs):
    real = real_plan(*args, **kwargs)
    made = stand_in(real, environ)
    if made is None:
      return real
    if made.gpus:
      print(f"[standin] devices: {describe(made)}", flush=True)
    log = environ.get(STANDIN_LOG_ENV)
    if log:
      with open(log, "a") as f:
        f.write(json.dumps({"layout": made.plan.layout, "gpus": made.gpus,
                            "gpu_collective": made.gpu_collective,
                            "collective": made.plan.collective, "pid": os.getpid()}) + "\n")
    return made.plan

  plan.real = real_plan
  setattr_(devices, "visible_gpus", visible_gpus)
  setattr_(devices, "plan", plan)
  setattr_(gpu_env, "nvidia_smi_gpus", nvidia_smi_gpus)
  setattr_(gpu_env, "probe", probe)


def env(n: int, log: Optional[str] = None, environ=None) -> dict:
  """The environment for child processes that run on ``n`` stand-in GPUs: the count,
  this folder on ``PYTHONPATH`` (its sitecustomize.py installs the stand-in), and the
  plan log."""
  environ = os.environ if environ is None else environ
  path = os.pathsep.join(p for p in (SITE, environ.get("PYTHONPATH", "")) if p)
  extra = {STANDIN_GPUS_ENV: str(n), "PYTHONPATH": path}
  if log:
    extra[STANDIN_LOG_ENV] = log
  return extra


def read_log(log: str) -> List[dict]:
  """The plans logged by every process that ran with ``env(n, log)``."""
  with open(log) as f:
    return [json.loads(line) for line in f if line.strip()]
