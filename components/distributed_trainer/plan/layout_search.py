"""The layout planner: which layout fits a model's training state in the devices present.

A pure function of the model's variables (shapes, dtypes, and which dimension the layout
rules split over the model axis), the device count, the memory per device and the global
batch. The figure per device covers the whole run, not only the step:

- the step: parameters + gradients + optimizer slots, each stored at its per-device shard
  size (a dimension the rules split over the model axis holds 1/M of it, everything else
  is replicated). That includes the gradient of a row-split kernel whose input is whole:
  returned from a function as the tape gives it, it is whole on every device
  (tests/test_trainer_linear_mesh.py), but inside the step, where the relayout into the
  kernel's layout follows, a run holds it at shard size (measured: a mesh 1x4 with a
  row-split 2048 x 2048 kernel held +84 MiB in its train phase where shard size plans 96
  and whole gradients 151; tests/test_trainer_planned_vs_measured.py);
- in transit: two blocks of the largest variable (``TRANSIT_BLOCKS``), what an update or
  a boundary holds besides the state, one variable at a time: tf_keras Adam's dense
  ``update_step`` computes ``m * alpha`` and ``sqrt(v)`` before its ``assign_sub``; an
  initializer's random values and their scaled result; at the export
  (mesh_engine.MeshEngine.copy_weights_to, MeshTrainer.copy_into) the variable's value
  read off the devices and the block being written; at a mesh restore, the blocks
  DTensor's RestoreV2 reads.

The host figure (``host_bytes``) is what the run holds in host memory outside the step,
on every layout: the export's plain model (whole parameters, no slots) plus one block of
the largest variable in transit (the export copies one variable at a time: on one
device or a data-parallel copy the whole value ``read_value`` returns,
fit_engine.FitEngine.copy_weights_to; on a mesh one device's block, written into its
slice of the host variable in place, MeshTrainer.copy_into, so at shard size; measured
on tests/test_trainer_planned_vs_measured.py's 2048-wide mlp, the mesh export rose the
host model's 16 MiB and 1.4-1.7 MiB more), plus, when the run stops early
(``patience``), the best evaluation's weights the host keeps until the export (whole
parameters; a mesh keeps them as the devices' blocks, never a whole split variable). Checkpoints add nothing: every layout's checkpoint reads and
writes the live variables, a mesh's sharded (mesh_engine.MeshEngine.checkpointed). On logical
CPU devices the devices' memory IS the host's, so the run's peak there is the larger of
the step on every device and a boundary (``boundary_bytes``: every device's parameters
and slots, on a mesh the step's whole figure, plus the host figure): ``run_bytes``; the
planner checks that against the host memory when it plans with it. tests/test_trainer_planned_vs_measured.py compares the
step and the boundary with the resident memory a real run holds in its train phase and
at its evaluations, checkpoints and export (measured: the transit is 1.0-1.6 blocks of
the largest variable, Adam).

Choice, in order:
1. Pure data parallelism (``single`` on one device, ``mirrored`` N on N) when the whole
   state fits on one device.
2. Otherwise the smallest model axis M (a divisor of the device count, that divides every
   split dimension and leaves a batch axis that divides the global batch) whose state fits.
3. Ties (same M, e.g. fewer replicas because of the batch) go to the smaller all-reduce
   volume per step: a ring all-reduce moves 2 (B - 1) / B of the gradient bytes that each
   device holds.
When nothing fits, ``PlanError`` says what the best layout would need against the budget.
"""
import dataclasses
from typing import Callable, Iterable, List, Optional, Sequence, Tuple, Union

# The one VariableInfo (with its sharding and bytes per device) and MODEL_AXIS.
from tfx_parallel.components.distributed_trainer.mesh_axes import MODEL_AXIS, VariableInfo  # pylint: disable=unused-import


# Blocks of the largest variable in transit besides the state (module docstring).
TRANSIT_BLOCKS = 2


class PlanError(ValueError):
  """No layout fits; the message has the numbers."""


@dataclasses.dataclass(frozen=True)
class Plan:
  """A chosen layout and what it costs per device."""
  layout: str                   # "single" | "mirrored" | "mesh"
  mesh: Tuple[int, int]         # (batch, model); (N, 1) for mirrored, (1, 1) for single
  state_bytes_per_device: int   # step + the largest variable's blocks in transit (whole run)
  allreduce_bytes_per_step: int
  reason: str
  host_bytes: int = 0           # host memory outside the step (the export's copy, transit)

  @property
  def devices(self) -> int:
    return self.mesh[0] * self.mesh[1]

  def describe(self) -> str:
    if self.layout == "mesh":
      return f"mesh {self.mesh[0]}x{self.mesh[1]}"
    if self.layout == "mirrored":
      return f"mirrored {self.mesh[0]}"
    return "single"


def step_bytes_per_device(variables: Sequence[VariableInfo], model_axis: int,
                          slots_per_param: int) -> int:
  """Parameters + gradients + optimizer slots on one device, at shard size (the step)."""
  return sum(v.bytes_per_device(model_axis) for v in variables) * (2 + slots_per_param)


def transit_bytes_per_device(variables: Sequence[VariableInfo], model_axis: int) -> int:
  """``TRANSIT_BLOCKS`` blocks of the largest variable on one device: what an optimizer
  update or a boundary (the export, a restore) holds besides the state."""
  return TRANSIT_BLOCKS * max((v.bytes_per_device(model_axis) for v in variables), default=0)


def state_bytes_per_device(variables: Sequence[VariableInfo], model_axis: int,
                           slots_per_param: int) -> int:
  """The whole run's peak on one device: the step's state plus the largest variable's
  blocks in transit (``transit_bytes_per_device``)."""
  return (step_bytes_per_device(variables, model_axis, slots_per_param)
          + transit_bytes_per_device(variables, model_axis))


def snapshot_bytes(variables: Sequence[VariableInfo], snapshot: bool) -> int:
  """The best evaluation's weights an early-stopping run keeps in host memory (whole
  parameters; nothing without early stopping)."""
  return sum(v.num_elements * v.dtype_bytes for v in variables) if snapshot else 0


def host_bytes(variables: Sequence[VariableInfo], snapshot: bool = False,
               model_axis: int = 1) -> int:
  """Host memory the run holds outside the step (module docstring): the export's host
  model plus one block of the largest variable on the model axis ``model_axis`` in
  transit (whole when the variable is not split), plus the early stop's snapshot
  (``snapshot``: the run stops early)."""
  whole = sum(v.num_elements * v.dtype_bytes for v in variables)
  block = max((v.bytes_per_device(model_axis) for v in variables), default=0)
  return whole + block + snapshot_bytes(variables, snapshot)


def boundary_bytes(variables: Sequence[VariableInfo], batch_axis: int, model_axis: int,
                   slots_per_param: int, snapshot: bool = False) -> int:
  """A boundary (export, restore) when the devices share the host's memory: what the
  devices hold plus the host's figure, whose whole variables in transit are the
  boundary's.

  What the devices hold there: on one device or a data-parallel copy of it (model axis
  1), their parameters and slots; the step's gradients and transit blocks are freed and
  the export's host model takes their place. On a mesh (model axis > 1) the step's
  whole figure, gradients and transit blocks included (``state_bytes_per_device`` on
  every device): the memory the device threads freed is not reused by the export's host
  model, which lands on fresh pages. Measured (tests/test_trainer_planned_vs_measured.py,
  rss hook, 2048-wide mlp against 64-wide, three runs on 2026-12-06 after the export
  was built from zeros and copied block by block): the mesh export rose by the host
  model (16 MiB) and 1.4-1.7 MiB more above the train phase's peak; the boundaries then
  measure 0.88 of this figure on single, 0.77-0.78 on mesh 1x2 and 0.71-0.75 on a
  row-split mesh 1x4 (three runs from a clean clone, 2026-12-07, TensorFlow's oneDNN CPU
  kernels off: on they hold buffers this figure does not count, single 1.25-1.45).
  Before those export changes, on benchmarks/bench_mesh_memory.py's model, the mesh 1x4
  export rose +454-461 MB above the end of training against +13 MB on single
  (benchmarks/RESULTS.md). Bounding glibc's malloc arenas did not change it."""
  if model_axis > 1:
    step = state_bytes_per_device(variables, model_axis, slots_per_param)
    return batch_axis * model_axis * step + host_bytes(variables, snapshot, model_axis)
  kept = sum(v.bytes_per_device(model_axis) for v in variables) * (1 + slots_per_param)
  return batch_axis * model_axis * kept + host_bytes(variables, snapshot, model_axis)


def run_bytes(variables: Sequence[VariableInfo], batch_axis: int, model_axis: int,
              slots_per_param: int, snapshot: bool = False) -> int:
  """The run's peak when the devices share the host's memory (logical CPU devices): the
  larger of the step (every device's figure, and an early stop's snapshot kept on the
  host meanwhile) and a boundary (``boundary_bytes``)."""
  step = batch_axis * model_axis * state_bytes_per_device(variables, model_axis,
                                                          slots_per_param)
  step += snapshot_bytes(variables, snapshot)
  return max(step, boundary_bytes(variables, batch_axis, model_axis, slots_per_param,
                                  snapshot))


def allreduce_bytes_per_step(variables: Sequence[VariableInfo], batch_axis: int,
                             model_axis: int) -> int:
  """Bytes each device sends in a ring all-reduce of its gradient shards over the batch axis."""
  if batch_axis <= 1:
    return 0
  grad = sum(v.bytes_per_device(model_axis) for v in variables)
  return int(2 * (batch_axis - 1) * grad / batch_axis)


def _divisors(n: int) -> List[int]:
  return [d for d in range(1, n + 1) if n % d == 0]


# The variables, or a function of the model axis giving them with that axis's sharding
# (layout rules may leave a dimension whole when the axis does not divide it), or None
# when the rules cannot apply on that axis (it is skipped).
Variables = Union[Sequence[VariableInfo], Callable[[int], Optional[Sequence[VariableInfo]]]]


def _at(variables: Variables, model_axis: int) -> Sequence[VariableInfo]:
  return variables(model_axis) if callable(variables) else variables


def _candidates(variables: Variables, num_devices: int,
                global_batch: int) -> Iterable[Tuple[int, int]]:
  """(batch axis, model axis) pairs that are valid layouts on up to num_devices devices."""
  for model_axis in _divisors(num_devices):
    variables_m = _at(variables, model_axis)
    if variables_m is None:
      continue  # The layout rules cannot apply on this axis.
    if not all(v.divisible_by(model_axis) for v in variables_m):
      continue
    if model_axis > 1 and not any(v.split_dims for v in variables_m):
      continue  # No rule splits anything: a model axis would only replicate.
    for batch_axis in _divisors(num_devices // model_axis):
      if global_batch % batch_axis == 0:
        yield batch_axis, model_axis


def human_bytes(n: float) -> str:
  """1536 -> "1.5 KiB" (as the planner's messages print sizes)."""
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if abs(n) < 1024 or unit == "TiB":
      return f"{n:,.1f} {unit}" if unit != "B" else f"{int(n):,} B"
    n /= 1024
  raise AssertionError("unreachable")


def plan(variables: Variables, num_devices: int, memory_per_device: int,
         global_batch: int, slots_per_param: int,
         shared_host_memory: Optional[int] = None, snapshot: bool = False) -> Plan:
  """The layout to use (see the module docstring); raises PlanError when none fits.

  ``variables`` is a list of VariableInfo, or a function of the model axis returning it.
  ``shared_host_memory``: the host memory the devices share (logical CPU devices), or None
  (devices of their own); when given, a layout fits only if ``run_bytes`` fits in it too.
  ``snapshot``: the run stops early and keeps its best weights on the host until the
  export (``host_bytes``).
  """
  if num_devices < 1:
    raise PlanError(f"no devices to train on. Received: num_devices={num_devices}")
  if memory_per_device <= 0:
    raise PlanError(f"memory per device must be positive. Received: {memory_per_device}")
  total = sum(v.num_elements * v.dtype_bytes for v in _at(variables, 1))
  options = []
  for batch_axis, model_axis in _candidates(variables, num_devices, global_batch):
    infos = _at(variables, model_axis)  # Resolves the layout rules once per candidate.
    need = state_bytes_per_device(infos, model_axis, slots_per_param)
    whole_run = run_bytes(infos, batch_axis, model_axis, slots_per_param, snapshot)
    if need <= memory_per_device and (shared_host_memory is None
                                      or whole_run <= shared_host_memory):
      volume = allreduce_bytes_per_step(infos, batch_axis, model_axis)
      # Smallest model axis first; then the most replicas (more throughput), then the
      # smaller all-reduce volume.
      options.append(((model_axis, -batch_axis, volume), batch_axis, model_axis, need, volume))
  if not options:
    best_m = max((m for _, m in _candidates(variables, num_devices, global_batch)), default=1)
    best = state_bytes_per_device(_at(variables, best_m), best_m, slots_per_param)
    shared = ""
    if shared_host_memory is not None:
      best_run = run_bytes(_at(variables, best_m), num_devices // best_m, best_m,
                           slots_per_param, snapshot)
      shared = (f"; with the host's copy at the export the run needs "
                f"{human_bytes(best_run)} of the {human_bytes(shared_host_memory)} of host "
                f"memory the devices share")
    raise PlanError(
        f"the model does not fit: its training state (parameters {human_bytes(total)}, with "
        f"gradients, {slots_per_param} optimizer slot(s) per parameter and the largest "
        f"variable in transit at an update, the export or a restore) needs "
        f"{human_bytes(best)} per device even on the widest model axis possible here "
        f"(M={best_m} of {num_devices} device(s)), and each device has "
        f"{human_bytes(memory_per_device)}{shared}")
  _, batch_axis, model_axis, need, volume = min(options, key=lambda o: o[0])
  one = state_bytes_per_device(_at(variables, 1), 1, slots_per_param)
  if model_axis == 1:
    layout = "single" if batch_axis == 1 else "mirrored"
    reason = (f"the state fits on one device ({human_bytes(one)} of "
              f"{human_bytes(memory_per_device)}), "
              f"so pure data parallelism over {batch_axis} device(s)")
  else:
    layout = "mesh"
    reason = (f"the state needs {human_bytes(one)} on one device, more than its "
              f"{human_bytes(memory_per_device)}; a model axis of {model_axis} is the smallest "
              f"that fits ({human_bytes(need)} per device), with {batch_axis} data-parallel "
              f"replica(s)")
  host = host_bytes(_at(variables, model_axis), snapshot, model_axis)
  reason += f"; the host holds {human_bytes(host)} at the export"
  return Plan(layout=layout, mesh=(batch_axis, model_axis), state_bytes_per_device=need,
              allreduce_bytes_per_step=volume, reason=reason, host_bytes=host)
