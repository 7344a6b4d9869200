"""Training-state bytes per device, measured from where the variables really live.

A DTensor variable holds ``layout.local_shape_from_global_shape(shape)`` on each device of
its mesh; a ``tf.distribute`` variable holds one full copy per replica; a plain variable
lives on one device. Gradients have the shape and layout of their parameters, so the
step's state on a device is 2 x its parameter bytes + its optimizer-slot bytes. An
update and the run's boundaries (the export, a restore: one variable at a time) add
blocks of the largest parameter on that device in transit
(``layout_search.TRANSIT_BLOCKS`` of them); ``state_bytes_per_device`` counts them, as the
planner does (plan/layout_search.py ``state_bytes_per_device``).
"""
import collections
import dataclasses
import math
from typing import Dict, Iterable, Iterator, Tuple

from tfx_parallel.components.distributed_trainer.plan import layout_search


@dataclasses.dataclass(frozen=True)
class StateBytes:
  """What ``measure`` found: the recorded properties (names in components/common/keys.py)."""
  param_count: int
  param_bytes_total: int
  state_bytes_per_device: int   # max over devices of params + grads + slots + blocks in transit

  def as_dict(self) -> Dict[str, int]:
    return dataclasses.asdict(self)


def _blocks(v) -> Iterator[Tuple[str, int]]:
  """(device name, bytes) of each block of variable ``v``."""
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  shape = v.shape.as_list()
  itemsize = v.dtype.size
  if isinstance(v, dtensor.DVariable):
    layout = dtensor.fetch_layout(v)
    local = int(math.prod(layout.local_shape_from_global_shape(shape))) * itemsize
    for device in layout.mesh.local_devices():
      yield device, local
  elif hasattr(v, "values") and isinstance(getattr(v, "values"), (tuple, list)):
    for component in v.values:  # tf.distribute: one full copy per replica.
      yield component.device, int(math.prod(shape)) * itemsize
  else:
    yield v.device, int(math.prod(shape)) * itemsize


def bytes_by_device(variables: Iterable) -> Dict[str, int]:
  """Device name -> bytes of ``variables`` stored on it."""
  out: Dict[str, int] = collections.Counter()
  for v in variables:
    for device, size in _blocks(v):
      out[device] += size
  return out


def largest_block_by_device(variables: Iterable) -> Dict[str, int]:
  """Device name -> bytes of the largest block of one of ``variables`` on it."""
  out: Dict[str, int] = {}
  for v in variables:
    for device, size in _blocks(v):
      out[device] = max(out.get(device, 0), size)
  return out


def measure(params: Iterable, slots: Iterable) -> StateBytes:
  """Counts and bytes of ``params`` (trainable variables) and ``slots`` (optimizer state)."""
  params, slots = list(params), list(slots)
  param_bytes = bytes_by_device(params)
  slot_bytes = bytes_by_device(slots)
  transit = largest_block_by_device(params)
  devices = set(param_bytes) | set(slot_bytes)
  per_device = max((2 * param_bytes.get(d, 0) + slot_bytes.get(d, 0)
                    + layout_search.TRANSIT_BLOCKS * transit.get(d, 0)
                    for d in devices), default=0)
  return StateBytes(
      param_count=sum(int(math.prod(v.shape.as_list())) for v in params),
      param_bytes_total=sum(int(math.prod(v.shape.as_list())) * v.dtype.size for v in params),
      state_bytes_per_device=per_device)


def gpu_memory_peaks(device_names: Iterable[str]) -> Dict[str, int]:
  """Peak bytes TensorFlow allocated on each GPU of ``device_names`` in this process
  ("GPU:0" -> bytes; {} without GPUs), from ``tf.config.experimental.get_memory_info``."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  out: Dict[str, int] = {}
  for name in device_names:
    short = name.split("device:")[-1]
    if not short.upper().startswith("GPU") or short in out:
      continue
    try:
      out[short] = int(tf.config.experimental.get_memory_info(short)["peak"])
    except (ValueError, RuntimeError):  # Not a local device (another worker's).
      continue
  return out
