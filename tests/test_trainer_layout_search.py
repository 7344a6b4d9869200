"""The layout planner (pure): data parallelism when the state fits one device, otherwise the
smallest model axis that fits, and a PlanError with the numbers when nothing fits."""
import pytest

from tfx_parallel.components.distributed_trainer.plan import layout_search
from tfx_parallel.components.distributed_trainer.plan.layout_search import VariableInfo

MIB = 1 << 20


def _mlp(width: int, features: int = 64):
  """Megatron pair: column-split then row-split kernels; biases of the second replicated."""
  return [VariableInfo("dense_0/kernel", (features, width), dtype_bytes=4,
                       sharding=(None, "model")),
          VariableInfo("dense_0/bias", (width,), dtype_bytes=4, sharding=("model",)),
          VariableInfo("dense_1/kernel", (width, 1), dtype_bytes=4, sharding=("model", None)),
          VariableInfo("dense_1/bias", (1,), dtype_bytes=4, sharding=())]


def test_bytes_per_device_halve_for_a_split_dimension_only():
  kernel = VariableInfo("k", (64, 1024), dtype_bytes=4, sharding=(None, "model"))
  bias = VariableInfo("b", (1,), dtype_bytes=4, sharding=())
  assert kernel.bytes_per_device(1) == 64 * 1024 * 4
  assert kernel.bytes_per_device(2) == 64 * 1024 * 2
  assert bias.bytes_per_device(4) == 4
  # Params + grads + 2 Adam slots, plus two blocks of the largest variable in transit
  # (TRANSIT_BLOCKS: an update's temporaries or a boundary's copies; the kernel's half).
  assert layout_search.TRANSIT_BLOCKS == 2
  assert layout_search.step_bytes_per_device([kernel, bias], 2, 2) == (64 * 1024 * 2 + 4) * 4
  assert layout_search.state_bytes_per_device([kernel, bias], 2, 2) == (
      (64 * 1024 * 2 + 4) * 4 + 2 * 64 * 1024 * 2)


def test_small_model_on_four_devices_is_mirrored():
  p = layout_search.plan(_mlp(16), num_devices=4, memory_per_device=64 * MIB, global_batch=64,
                   slots_per_param=2)
  assert (p.layout, p.mesh) == ("mirrored", (4, 1))
  assert p.describe() == "mirrored 4"
  assert "fits on one device" in p.reason
  assert p.allreduce_bytes_per_step > 0


def test_one_device_is_single():
  p = layout_search.plan(_mlp(16), num_devices=1, memory_per_device=64 * MIB, global_batch=64,
                   slots_per_param=0)
  assert (p.layout, p.mesh, p.allreduce_bytes_per_step) == ("single", (1, 1), 0)


def test_model_twice_the_budget_gets_model_axis_two():
  variables = _mlp(4096)
  one = layout_search.state_bytes_per_device(variables, 1, 2)
  p = layout_search.plan(variables, num_devices=4, memory_per_device=one // 2 + 1024,
                   global_batch=64, slots_per_param=2)
  assert (p.layout, p.mesh) == ("mesh", (2, 2))
  assert p.state_bytes_per_device <= one // 2 + 1024
  assert "smallest" in p.reason and "model axis of 2" in p.reason


def test_batch_axis_must_divide_the_global_batch():
  variables = _mlp(4096)
  one = layout_search.state_bytes_per_device(variables, 1, 0)
  # 6 devices, model axis 2 -> batch axis 3 does not divide 64: the planner uses 1 of 3.
  p = layout_search.plan(variables, num_devices=6, memory_per_device=one // 2 + 1024,
                   global_batch=64, slots_per_param=0)
  assert p.mesh == (1, 2)


def test_model_axis_must_divide_every_split_dimension():
  variables = _mlp(4098)  # 4098 = 2 * 3 * 683: M=4 is impossible, M=3 is not a divisor of 4.
  one = layout_search.state_bytes_per_device(variables, 1, 0)
  with pytest.raises(layout_search.PlanError, match=r"M=2 of 4 device"):
    layout_search.plan(variables, num_devices=4, memory_per_device=one // 3, global_batch=8,
                 slots_per_param=0)


def test_model_that_fits_nowhere_fails_with_the_numbers():
  variables = _mlp(4096)
  with pytest.raises(layout_search.PlanError,
                     match=r"needs [\d.,]+ MiB per device even on the widest model axis "
                           r"possible here \(M=4 of 4 device\(s\)\), and each device has "
                           r"1\.0 KiB"):
    layout_search.plan(variables, num_devices=4, memory_per_device=1024, global_batch=64,
                 slots_per_param=2)


def test_replicated_only_model_never_gets_a_model_axis():
  variables = [VariableInfo("w", (1000, 1000), dtype_bytes=4, sharding=())]
  with pytest.raises(layout_search.PlanError, match=r"M=1 of 4"):
    layout_search.plan(variables, num_devices=4, memory_per_device=MIB, global_batch=8,
                 slots_per_param=0)


def test_allreduce_volume_is_the_ring_formula():
  variables = [VariableInfo("w", (256, 256), dtype_bytes=4, sharding=(None, "model"))]
  grad = 256 * 256 * 4
  assert layout_search.allreduce_bytes_per_step(variables, 1, 1) == 0
  assert layout_search.allreduce_bytes_per_step(variables, 4, 1) == 2 * 3 * grad // 4
  assert layout_search.allreduce_bytes_per_step(variables, 2, 2) == 2 * 1 * (grad // 2) // 2


@pytest.mark.parametrize("bad, message", [(dict(num_devices=0), "no devices"),
                                          (dict(memory_per_device=0), "must be positive")])
def test_bad_arguments(bad, message):
  kwargs = dict(num_devices=2, memory_per_device=MIB, global_batch=8, slots_per_param=0)
  kwargs.update(bad)
  with pytest.raises(layout_search.PlanError, match=message):
    layout_search.plan(_mlp(8), **kwargs)


def test_variables_may_depend_on_the_model_axis():
  """Rules that leave a dimension whole when the axis does not divide it: M=4 replicates
  the 4098-wide kernel, so only M=2 halves it."""
  def at(model_axis):
    width = 4098
    split = width % model_axis == 0
    return [VariableInfo("k", (64, width), dtype_bytes=4,
                         sharding=(None, "model") if split else ())]
  one = layout_search.state_bytes_per_device(at(1), 1, 0)
  p = layout_search.plan(at, num_devices=4, memory_per_device=one // 2 + 1024, global_batch=8,
                   slots_per_param=0)
  assert p.mesh == (2, 2)


def test_the_host_figure_is_the_export_copy_and_one_block_of_the_largest_variable():
  variables = _mlp(4096)  # 64x4096 + 4096 + 4096 + 1 float32 parameters.
  whole = (64 * 4096 + 4096 + 4096 + 1) * 4
  largest = 64 * 4096 * 4
  # Every layout: the export's host model (params, no slots), + one block of the largest
  # variable in transit: whole on one device (FitEngine.copy_weights_to reads one whole
  # value at a time), its shard on a mesh (MeshTrainer.copy_into writes each device's
  # block into its slice); checkpoints read and write the live variables.
  assert layout_search.host_bytes(variables) == whole + largest
  assert layout_search.host_bytes(variables, model_axis=2) == whole + largest // 2
  # Logical CPU devices share the host. 1x2: the step is two devices' figures; at the
  # export a mesh still holds them, gradients and transit blocks included (the export's
  # host model does not reuse what the device threads freed), and the host's figure.
  params_on_one = (64 * 2048 + 2048 + 2048 + 1) * 4
  per_device = params_on_one * 4 + 2 * 64 * 2048 * 4
  assert layout_search.state_bytes_per_device(variables, 2, 2) == per_device
  export = 2 * per_device + whole + largest // 2
  assert layout_search.boundary_bytes(variables, 1, 2, 2) == export


def test_on_shared_host_memory_the_host_copies_must_fit_too():
  variables = _mlp(4096)
  need = layout_search.run_bytes(variables, 1, 1, 2)
  roomy = 1 << 40  # Each device alone would fit: only the shared host memory limits.
  p = layout_search.plan(variables, num_devices=1, memory_per_device=roomy, global_batch=8,
                         slots_per_param=2, shared_host_memory=need)
  assert (p.layout, p.host_bytes) == ("single", layout_search.host_bytes(variables))
  assert "the host holds" in p.reason
  with pytest.raises(layout_search.PlanError,
                     match=r"with the host's copy at the export the run needs "
                           r"[0-9.]+ MiB of the [0-9.]+ MiB of host memory the devices share"):
    layout_search.plan(variables, num_devices=1, memory_per_device=roomy, global_batch=8,
                       slots_per_param=2, shared_host_memory=need - 1)
