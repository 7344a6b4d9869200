"""Which devices a training process uses, and how its replicas talk: pure decisions.

Nothing here imports TensorFlow. The training process (train.py) asks for the devices
present (:func:`visible_gpus`, which tests replace by injecting a list) and calls:

* :func:`plan`: the requested layout (``layout``, ``devices``, ``mesh``) and config
  ``device`` ("cpu" | "gpu" | "auto") against the GPUs present -> a :class:`DevicePlan`.
  On CPU (no GPU, or ``device: cpu``) the CPU is split into as many logical devices as
  the layout needs, as before. On GPUs a request larger than the GPUs present shrinks to
  the largest one that fits (printed, with the reason); ``devices: 0`` means every GPU.
* :func:`collectives`: the one place the all-reduce is chosen (NCCL on GPUs, see
  :data:`COLLECTIVES`); the choice is recorded in history.json.
* :func:`worker_gpus`: local ``multi_worker``: each worker process gets its own GPUs
  (``CUDA_VISIBLE_DEVICES``), or none when there are fewer GPUs than workers.

:func:`configure` then applies a plan to TensorFlow before it initialises: hides the
GPUs for ``device: cpu``, sets the GPU memory policy (config ``gpu_memory``: growth by
default), splits the CPU (or one GPU, config ``logical_gpus``) into logical devices, and
initialises DTensor's accelerator system for a mesh on GPUs.
"""
import dataclasses
import os
import re
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

from tfx_parallel.components.common import keys
from tfx_parallel.components.common import tfenv
from tfx_parallel.components.common.config_util import ConfigError
# Config vocabulary, validated by TrainerConfig (config.py); re-exported for the callers.
from tfx_parallel.components.distributed_trainer.config import (  # pylint: disable=unused-import
    DEVICE_KINDS, GPU_MEMORY_POLICIES, check_gpu_memory, parse_bytes)

# Logical CPU devices of "mirrored" and "auto" without a GPU when config ``devices`` is 0.
CPU_DEVICES = 2

# Collective implementations, by name (recorded in history.json as ``collective``).
COLLECTIVES = {
    "none": "no collective (one device)",
    "nccl_all_reduce": "MirroredStrategy(cross_device_ops=NcclAllReduce())",
    "reduce_to_gpu0": "MirroredStrategy(cross_device_ops=ReductionToOneDevice('GPU:0')): "
                      "logical GPUs of one physical GPU (NCCL needs one per GPU)",
    "reduce_to_cpu": "MirroredStrategy(cross_device_ops=ReductionToOneDevice('CPU:0'))",
    "nccl": "MultiWorkerMirroredStrategy(CommunicationOptions(implementation=NCCL))",
    "ring": "MultiWorkerMirroredStrategy(CommunicationOptions(implementation=RING))",
    "dtensor_gpu_nccl": "DTensor on GPUs: initialize_accelerator_system('GPU'), "
                        "DTENSOR_GPU_USE_NCCL_COMMUNICATION=1",
    "dtensor_gpu": "DTensor on GPUs: initialize_accelerator_system('GPU'), TensorFlow "
                   "collectives (logical GPUs of one physical GPU: no NCCL)",
    "dtensor_cpu": "DTensor on logical CPU devices",
}

# Set by the launcher on each local multi_worker process: the GPUs it was given.
WORKER_GPUS_ENV = "CUDA_VISIBLE_DEVICES"



@dataclasses.dataclass(frozen=True)
class DevicePlan:
  """What one training process runs on.

  Attributes:
    device_type: "CPU" or "GPU".
    layout: the layout (unchanged from the request).
    devices: replicas of ``mirrored`` (0 for the other layouts).
    mesh: (batch, model) of ``mesh``; (1, 1) otherwise.
    cpu_devices: logical CPU devices to create (0: leave the CPU as it is).
    hide_gpus: ``device: cpu`` with GPUs present: make them invisible to TensorFlow.
    collective: a key of :data:`COLLECTIVES`.
    reason: why the plan differs from the request ("" when it is the request).
  """
  device_type: str
  layout: str
  devices: int
  mesh: Tuple[int, int]
  cpu_devices: int
  hide_gpus: bool
  collective: str
  reason: str = ""

  @property
  def devices_used(self) -> int:
    if self.layout == "mesh":
      return self.mesh[0] * self.mesh[1]
    if self.layout == "mirrored":
      return self.devices
    return 1

  def describe(self) -> str:
    what = {"mesh": f"mesh {self.mesh[0]}x{self.mesh[1]}",
            "mirrored": f"mirrored x{self.devices}"}.get(self.layout, self.layout)
    return f"{what} on {self.devices_used} {self.device_type}(s)"

  def as_record(self) -> Dict[str, str]:
    """The keys this plan adds to history.json."""
    return {keys.DEVICE_TYPE: self.device_type, keys.COLLECTIVE: self.collective,
            "collective_detail": COLLECTIVES[self.collective],
            "device_plan_reason": self.reason}


def _divisors(n: int) -> List[int]:
  return [d for d in range(1, n + 1) if n % d == 0]


def fit_replicas(requested: int, available: int, batch_size: int) -> int:
  """The most replicas <= min(requested, available) that divide the global batch."""
  top = max(1, min(requested, available))
  return max(r for r in range(1, top + 1) if batch_size % r == 0)


def fit_mesh(mesh: Tuple[int, int], available: int) -> Tuple[int, int]:
  """The largest mesh (b, m) with b dividing B and m dividing M (so every divisibility
  the config validated still holds) and b*m <= available; ties keep the wider model axis."""
  b_req, m_req = int(mesh[0]), int(mesh[1])
  if b_req * m_req <= available:
    return (b_req, m_req)
  options = [(b, m) for b in _divisors(b_req) for m in _divisors(m_req) if b * m <= available]
  return max(options, key=lambda bm: (bm[0] * bm[1], bm[1]))


def default_mesh(gpu_count: int, batch_size: int) -> Tuple[int, int]:
  """The mesh when none is asked for: 2x2 on logical CPU devices (no GPU); on G GPUs a
  model axis of 2 (1x1 on one GPU) and the widest batch axis b with 2b <= G dividing the
  global batch, so every GPU present is used when G is even."""
  if gpu_count == 0:
    return (2, 2)
  if gpu_count == 1:
    return (1, 1)
  b = max(b for b in range(1, gpu_count // 2 + 1) if batch_size % b == 0)
  return (b, 2)


def collectives(layout: str, device_type: str, logical_per_physical: int = 1) -> str:
  """The collective a layout uses on ``device_type``: NCCL on GPUs (one logical GPU per
  physical GPU; NCCL rejects two ranks on one GPU), TensorFlow's own otherwise."""
  gpu = device_type == "GPU"
  shared = logical_per_physical > 1
  if layout == "single":
    return "none"
  if layout == "mirrored":
    if not gpu:
      return "reduce_to_cpu"
    return "reduce_to_gpu0" if shared else "nccl_all_reduce"
  if layout == "multi_worker":  # Logical GPUs of one physical GPU: NCCL rejects them.
    return "nccl" if gpu and not shared else "ring"
  if layout == "mesh":
    if not gpu:
      return "dtensor_cpu"
    return "dtensor_gpu" if shared else "dtensor_gpu_nccl"
  raise ValueError(f"layout: {layout!r} has no collective. Received: layout={layout!r}")


def plan(layout: str, devices: int, mesh: Sequence[int], device: str, gpu_count: int,
         batch_size: int, logical_gpus: int = 0) -> DevicePlan:
  """The plan for the request on ``gpu_count`` visible GPUs (after CUDA_VISIBLE_DEVICES).

  ``logical_gpus`` > 0 splits the first GPU into that many logical GPUs (a check of the
  multi-device layouts on one GPU); they stand in for ``gpu_count``.

  Raises:
    ConfigError: ``device: gpu`` with no GPU visible, or an unknown ``device``.
  """
  if device not in DEVICE_KINDS:
    raise ConfigError("device", f"must be one of {list(DEVICE_KINDS)}. Received: {device!r}")
  if device == "gpu" and gpu_count == 0:
    raise ConfigError("device", "is 'gpu' but TensorFlow sees no GPU (see require_gpu for "
                      "CUDA's own error). Received: device='gpu'")
  mesh = (int(mesh[0]), int(mesh[1]))
  on_gpu = device != "cpu" and gpu_count > 0
  hide = device == "cpu" and gpu_count > 0
  if not on_gpu:  # As before: N logical CPU devices, whatever the request.
    n = {"mirrored": devices or fit_replicas(CPU_DEVICES, CPU_DEVICES, batch_size),
         "mesh": mesh[0] * mesh[1]}.get(layout, 1)
    return DevicePlan("CPU", layout, n if layout == "mirrored" else 0,
                      mesh if layout == "mesh" else (1, 1), n if n > 1 else 0, hide,
                      collectives(layout, "CPU"))
  shared = logical_gpus if logical_gpus > 1 else 1
  available = logical_gpus if logical_gpus > 1 else gpu_count
  where = (f"{available} logical GPUs on one GPU" if shared > 1 else f"{available} GPU(s)")
  reason = ""
  if layout == "mirrored":
    want = devices or available
    got = fit_replicas(want, available, batch_size)
    if got != want:
      reason = (f"mirrored over {want} devices does not fit {where}: mirrored over {got}"
                + (f" (the largest count <= {min(want, available)} dividing batch_size "
                   f"{batch_size})" if got < min(want, available) else ""))
    return DevicePlan("GPU", layout, got, (1, 1), 0, False,
                      collectives(layout, "GPU", shared), reason)
  if layout == "mesh":
    got_mesh = fit_mesh(mesh, available)
    if got_mesh != mesh:
      reason = (f"mesh {mesh[0]}x{mesh[1]} needs {mesh[0] * mesh[1]} devices, {where} "
                f"present: mesh {got_mesh[0]}x{got_mesh[1]} (the largest whose axes "
                f"divide the requested ones)")
    return DevicePlan("GPU", layout, 0, got_mesh, 0, False,
                      collectives(layout, "GPU", shared), reason)
  return DevicePlan("GPU", layout, 0, (1, 1), 0, False, collectives(layout, "GPU", shared))


def multi_worker_replicas(workers: int, gpus_per_worker: int, batch_size: int,
                          where: str = "multi_worker") -> Tuple[int, str]:
  """GPUs each of ``workers`` processes trains on, fitted so the global batch divides the
  replicas, and a reason line ("" when nothing changed).

  MultiWorkerMirroredStrategy has workers x GPUs-per-worker replicas (one per GPU, or one
  per worker on the CPU: ``gpus_per_worker`` 0), and tf.distribute's
  ``InputContext.get_per_replica_batch_size`` raises at the first ``fit`` when the global
  batch does not divide them (tensorflow/python/distribute/distribute_lib.py:902-904 in
  TF 2.16.2) -- after every worker has started. So this shrinks the GPUs per worker to the
  most that divide (the spare GPUs stay idle, said in the reason), and rejects a run in
  which even one device per worker does not divide the batch.

  Raises:
    ConfigError: ``batch_size`` is not divisible by ``workers`` (names every number).
  """
  per = max(0, int(gpus_per_worker))
  fits = [g for g in range(1, per + 1) if batch_size % (workers * g) == 0]
  if batch_size % workers != 0 or (per and not fits):
    options = sorted({workers * g for g in range(1, max(per, 1) + 1)})
    raise ConfigError("batch_size", (
        f"{where}: {workers} worker(s) x {per or 1} {'GPU(s)' if per else 'CPU device'} per "
        f"worker = {workers * max(per, 1)} replicas, and the global batch {batch_size} is "
        f"not divisible by {workers} worker(s), so no device count per worker fits. Use a "
        f"batch that is a multiple of one of {options} (e.g. "
        f"{-(-batch_size // (workers * max(per, 1))) * workers * max(per, 1)}). "
        f"Received: batch_size={batch_size}, workers={workers}, "
        f"gpus_per_worker={per}"))
  if not per:
    return 0, ""
  got = max(fits)
  if got == per:
    return per, ""
  return got, (f"{where}: {workers} worker(s) x {per} GPU(s) = {workers * per} replicas "
               f"do not divide the global batch {batch_size}: each worker trains on {got} "
               f"GPU(s) ({workers * got} replicas, {batch_size // (workers * got)} "
               f"examples each); {per - got} GPU(s) per worker stay idle")


def check_multi_worker_batch(workers: int, gpus_per_worker: int, batch_size: Optional[int],
                             where: str = "multi_worker") -> None:
  """Rejects ``workers`` x ``gpus_per_worker`` replicas (a fixed count, e.g. a TFJob's
  replicas and their GPU limit) that do not divide the global batch, naming the numbers
  (``batch_size`` None: a job without a trainer config, nothing to check).

  Raises:
    ConfigError: the replicas do not divide ``batch_size``.
  """
  replicas = workers * max(1, int(gpus_per_worker))
  if batch_size is not None and batch_size % replicas:
    below, above = batch_size // replicas * replicas, -(-batch_size // replicas) * replicas
    raise ConfigError("batch_size", (
        f"{where}: {workers} replica(s) x {max(1, int(gpus_per_worker))} GPU(s) = "
        f"{replicas} training replicas, and the global batch {batch_size} is not "
        f"divisible by {replicas}; MultiWorkerMirroredStrategy would fail at the first "
        f"step on every replica. Use batch_size {below or above} or {above}, or change the "
        f"replicas or GPUs. Received: batch_size={batch_size}, replicas={workers}, "
        f"gpus_per_replica={gpus_per_worker}"))


def worker_gpus(workers: int, gpu_ids: Sequence[str],
                batch_size: Optional[int] = None) -> Tuple[List[str], str]:
  """``CUDA_VISIBLE_DEVICES`` of each local multi_worker process, and a reason line.

  Each worker gets ``len(gpu_ids) // workers`` GPUs of its own (two processes on one
  GPU would double the replicas and share its memory). With fewer GPUs than workers
  every worker runs on the CPU ("" hides the GPUs) and the reason says so. With
  ``batch_size``, the GPUs per worker are fitted so the replicas divide it
  (:func:`multi_worker_replicas`, which raises ConfigError when nothing fits).
  """
  per = len(gpu_ids) // workers if workers else 0
  if batch_size is not None:
    fitted, why = multi_worker_replicas(workers, per, batch_size)
  else:
    fitted, why = per, ""
  if not gpu_ids:
    return [None] * workers, ""
  if per == 0:
    return [""] * workers, (f"multi_worker: {workers} workers but {len(gpu_ids)} GPU(s); "
                            f"each worker needs its own GPU, so the workers run on the CPU")
  out = [",".join(gpu_ids[i * per:i * per + fitted]) for i in range(workers)]
  spare = len(gpu_ids) - per * workers
  reasons = [why] if why else []
  if spare:
    reasons.append(f"multi_worker: {per} GPU(s) per worker; {spare} GPU(s) unused")
  return out, "; ".join(reasons)


def parse_visible(value: Optional[str], physical: int) -> List[str]:
  """The GPU ids a process may use: ``CUDA_VISIBLE_DEVICES`` (None: all ``physical``).

  As CUDA reads it, the list ends at the first invalid entry: "0,2,-1,1" makes GPUs 0 and
  2 visible, not 1 (CUDA C++ Programming Guide, "CUDA Environment Variables")."""
  if value is None:
    return [str(i) for i in range(physical)]
  ids = [v.strip() for v in value.split(",") if v.strip()]
  invalid = [i for i, v in enumerate(ids) if v.startswith("-")]
  return ids[:invalid[0]] if invalid else ids


_SIZE = re.compile(r"^\s*\d")


def memory_limit_mb(value) -> Optional[int]:
  """The hard per-GPU limit in MiB of a size ``gpu_memory``; None for growth / all."""
  if value in GPU_MEMORY_POLICIES:
    return None
  return max(1, parse_bytes(value) // 2**20)


def visible_gpus() -> List[str]:
  """Physical GPUs TensorFlow sees (does not initialise TensorFlow's context)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [g.name for g in tf.config.list_physical_devices("GPU")]


def configure(plan_: DevicePlan, gpu_memory="growth", logical_gpus: int = 0,
              tf32: bool = True) -> None:
  """Applies ``plan_`` to TensorFlow; must run before TensorFlow initialises."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.experimental.enable_tensor_float_32_execution(tf32)
  gpus = tf.config.list_physical_devices("GPU")
  if plan_.hide_gpus:
    tf.config.set_visible_devices([], "GPU")
  elif gpus:
    limit = memory_limit_mb(gpu_memory)
    if logical_gpus > 1:  # One GPU as N: each gets an equal share (or the limit).
      share = limit or _even_share_mb(gpus[0], logical_gpus)
      tf.config.set_visible_devices(gpus[:1], "GPU")
      tf.config.set_logical_device_configuration(
          gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=share)] * logical_gpus)
    else:
      for gpu in gpus:
        if limit:
          tf.config.set_logical_device_configuration(
              gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
        elif gpu_memory == "growth":
          tf.config.experimental.set_memory_growth(gpu, True)
  if plan_.collective in ("dtensor_gpu_nccl", "dtensor_gpu"):
    os.environ["DTENSOR_GPU_USE_NCCL_COMMUNICATION"] = (
        "1" if plan_.collective == "dtensor_gpu_nccl" else "0")
    from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
    dtensor.initialize_accelerator_system("GPU")
  elif plan_.cpu_devices > 1:
    tfenv.split_cpu(plan_.cpu_devices)


# nvidia-smi's free memory per GPU, without CUDA: the executor's planner reads it, so the
# executor never creates a CUDA context (device_lib.list_local_devices would, on every GPU).
SMI_FREE_QUERY = ["nvidia-smi", "--query-gpu=index,uuid,memory.free",
                  "--format=csv,noheader,nounits"]


def smi_free_bytes(output: str, visible: Optional[str]) -> Optional[int]:
  """The smallest free memory (bytes) among the GPUs this process may use, from
  :data:`SMI_FREE_QUERY`'s output; ``visible``: ``CUDA_VISIBLE_DEVICES`` (indices or
  UUIDs; None: every GPU). None when no such GPU is listed."""
  rows = [[c.strip() for c in line.split(",")] for line in output.splitlines() if line.strip()]
  rows = [r for r in rows if len(r) == 3 and r[2].isdigit()]
  if visible is not None:
    wanted = parse_visible(visible, 0)
    rows = [r for r in rows if r[0] in wanted or r[1] in wanted]
  return min(int(r[2]) for r in rows) * 2**20 if rows else None


def gpu_free_bytes(environ=None) -> Optional[int]:
  """:func:`smi_free_bytes` of this machine (None without nvidia-smi)."""
  environ = os.environ if environ is None else environ
  try:
    out = subprocess.run(SMI_FREE_QUERY, capture_output=True, text=True, timeout=60,
                         check=False).stdout
  except (OSError, subprocess.TimeoutExpired):
    return None
  return smi_free_bytes(out, environ.get(WORKER_GPUS_ENV))


def keep_off_gpus() -> None:
  """Hides the GPUs from this process's TensorFlow (the executor's: its data scans, model
  checks and planner run on the CPU), so it holds no CUDA context, and no GPU memory, on
  any GPU while its child trainer runs. A no-op once TensorFlow has initialised (e.g.
  an in-process test) or without GPUs."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    if tf.config.list_physical_devices("GPU"):
      tf.config.set_visible_devices([], "GPU")
  except RuntimeError as e:  # Already initialised.
    print(f"[trainer] devices: this process already initialised its GPUs: {e}", flush=True)


def first_visible_gpu(environ=None) -> str:
  """nvidia-smi's id (index or UUID) of TensorFlow's GPU:0: the first entry of
  ``CUDA_VISIBLE_DEVICES`` (nvidia-smi ignores that variable and numbers every GPU)."""
  environ = os.environ if environ is None else environ
  ids = parse_visible(environ.get(WORKER_GPUS_ENV), 1)
  return ids[0] if ids else "0"


def _even_share_mb(gpu, parts: int) -> int:
  """An equal share in MiB of ``gpu``'s memory (90 % of it, leaving room for CUDA)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  details = tf.config.experimental.get_device_details(gpu)
  total = 0
  try:
    out = subprocess.run(["nvidia-smi", f"--id={first_visible_gpu()}",
                          "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=False).stdout
    total = int(out.split()[0])
  except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
    total = 0
  if not total:
    total = 16 * 1024
    print(f"[trainer] GPU memory unknown ({details}); assuming {total} MiB", flush=True)
  return int(total * 0.9) // parts
