"""Wires the pure planner (layout_search.py) to a real model and the devices present.

* :func:`parse_bytes`: config ``device_memory`` (an int, or "512MiB" / "2GiB" / "1.5GB").
* :func:`planner_variables`: a built tf_keras model + layout rules -> the planner's
  ``VariableInfo`` list for each model axis (the rules resolved per axis, as the mesh
  layout resolves them: sharding.resolve on the model's trainable variables).
* :func:`device_budget`: how many devices and how much memory each: GPUs present
  (memory from TensorFlow: the device's limit minus what is in use, read with
  ``tf.config.experimental.get_memory_info``), else config ``devices`` logical CPUs and
  config ``device_memory`` (without it: the available host memory shared by them).
* :func:`choose` (``layout: auto``): runs the planner and returns the config rewritten
  to the chosen concrete layout, plus what to record (``layout_chosen``,
  ``layout_reason``). :func:`check_explicit`: for an explicit layout, one warning line
  with the numbers when its state does not fit the budget.

The executor calls :func:`apply` in the parent process, before the training child
starts: a model that fits nowhere fails before any step, with the planner's numbers.
"""
import dataclasses
import json
import math
import os
from typing import Callable, List, Mapping, Optional, Tuple

from absl import logging

from tfx_parallel.components.common import config_util, keys
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.config import parse_bytes  # pylint: disable=unused-import
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer import optimizers
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.inputs import memory_cache
from tfx_parallel.components.distributed_trainer.plan import devices as devices_lib
from tfx_parallel.components.distributed_trainer.plan import layout_search
from tfx_parallel.components.distributed_trainer import sharding

def trainable_infos(model) -> List[sharding.VariableInfo]:
  """sharding.VariableInfo of the model's trainable variables (what training state holds)."""
  trainable = {sharding.variable_path(v) for v in model.trainable_variables}
  return [i for i in sharding.describe_variables(model) if i.path in trainable]


def planner_variables(model, rules_fn: Optional[Callable[[int], Mapping]] = None,
                      module_name: str = "built-in"
                      ) -> Callable[[int], Optional[List[layout_search.VariableInfo]]]:
  """A function of the model axis M giving the planner's view of ``model``'s trainable
  variables under the layout rules on M devices: ``rules_fn(M)`` (the module's
  ``layout_rules``), or the default rules (sharding.default_rules_for) when None.

  The function returns None for an M where the user's rules cannot apply (e.g. a split
  dimension M does not divide): the planner skips that axis.
  """
  infos = trainable_infos(model)
  dtype_bytes = {sharding.variable_path(v): v.dtype.size for v in model.trainable_variables}

  def at(model_axis: int) -> Optional[List[layout_search.VariableInfo]]:
    if rules_fn is None:
      rules = sharding.default_rules_for(infos, model_axis)
    else:
      rules = rules_fn(model_axis)
    try:
      resolved = sharding.resolve(rules, infos, model_axis, module_name)
    except sharding.ShardingError as e:
      if model_axis == 1 or rules_fn is None:
        raise
      logging.info("planner: model axis %d skipped: %s", model_axis, e)
      return None
    return [dataclasses.replace(i, dtype_bytes=dtype_bytes[i.path],
                                sharding=tuple(resolved.get(i.path, ()))) for i in infos]
  return at


def slots_per_param(optimizer, model) -> int:
  """Optimizer slot variables per parameter of ``optimizer`` on ``model``'s trainable
  variables (a lazy probe's will do), measured by building it on small probes of the same
  ranks, each dimension 2 (stock tf_keras SGD keeps a momentum slot even at 0): nothing
  the size of the model is allocated. A slot whose size is not the variable's (e.g.
  factored rows and columns) counts high on probes this small, never low."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.device("/CPU:0"):
    probes = [tf.Variable(tf.zeros([2] * v.shape.rank, v.dtype), name=f"slot_probe_{i}")
              for i, v in enumerate(model.trainable_variables)]
  params = sum(int(math.prod(v.shape.as_list())) for v in probes)
  optimizer.build(probes)
  slots = sum(int(math.prod(v.shape.as_list())) for v in optimizer.variables
              if v.shape.rank)  # The scalar step counter is not a slot.
  return int(math.ceil(slots / params)) if params else 0


def slot_count(module, spec, config, model) -> int:
  """Slots per parameter of the run's optimizer: config ``optimizer``'s from the table
  (optimizers.SLOTS_PER_PARAM), or the module's ``optimizer(spec)`` built on small probes
  (:func:`slots_per_param`)."""
  if not module.optimizer:
    return optimizers.SLOTS_PER_PARAM[config.optimizer]
  return slots_per_param(
      user_module.make_optimizer(module, spec, config.optimizer, config.learning_rate), model)


def keeps_best_weights(config) -> bool:
  """Whether the run holds a snapshot of its best evaluation's weights beside the live
  ones: always, since the trainer exports them after an early stop (``patience`` with an
  automatic length, plan/length.py) and also when a run of a set length overfits
  (run/train.py ``best_weights``). Kept as a function so that the plan says where the
  figure comes from."""
  del config
  return True


@dataclasses.dataclass(frozen=True)
class Budget:
  num_devices: int
  memory_per_device: Optional[int]   # None: unknown (CPU, no device_memory, no MemAvailable).
  source: str                        # where the numbers came from, for messages.
  host_memory: Optional[int] = None  # the available host memory shared, when planned with it.


def gpu_memory(gpu_names: List[str]) -> Optional[int]:
  """Free memory of the smallest visible GPU, as nvidia-smi reports it (this process
  never opens CUDA: devices.keep_off_gpus); None when unknown."""
  return devices_lib.gpu_free_bytes() if gpu_names else None


def device_budget(config, gpus: Optional[List[str]] = None,
                  host_memory: Optional[Callable[[], Optional[int]]] = None) -> Budget:
  """Devices and memory per device: the GPUs present (``gpus``, default: listed by
  TensorFlow), else config ``devices`` logical CPUs (0: devices.CPU_DEVICES for mirrored
  and auto, else 1) with config
  ``device_memory``, or without it the available host memory (``host_memory()``,
  default: Linux ``MemAvailable``, memory_cache.available_memory) shared equally by the
  logical devices, which all live in the one host's memory. On GPUs a configured
  ``device_memory`` caps the measured memory."""
  configured = parse_bytes(config.device_memory) if config.device_memory is not None else None
  if gpus is None:
    gpus = gpu_names()
  if gpus:
    known = [m for m in (gpu_memory(gpus), configured) if m is not None]
    return Budget(len(gpus), min(known) if known else None, f"{len(gpus)} GPU(s)")
  n = config.devices or (devices_lib.CPU_DEVICES if config.layout in ("mirrored", "auto")
                         else 1)
  if configured is not None:
    return Budget(n, configured, f"{n} logical CPU device(s), device_memory")
  if host_memory is None:
    host_memory = memory_cache.available_memory
  available = host_memory()
  if not available:
    return Budget(n, None, f"{n} logical CPU device(s)")
  # The reason line of choose() says which memory this is.
  return Budget(n, available // n, f"{n} logical CPU device(s)", host_memory=available)


def _concrete(config, plan: layout_search.Plan):
  """``config`` rewritten to the plan's layout."""
  if plan.layout == "mesh":
    return dataclasses.replace(config, layout="mesh", mesh=tuple(plan.mesh), devices=0)
  if plan.layout == "mirrored":
    return dataclasses.replace(config, layout="mirrored", devices=plan.mesh[0],
                               mesh=(1, 1))
  return dataclasses.replace(config, layout="single", devices=0, mesh=(1, 1))


def _model_axis(config) -> Tuple[str, int, int]:
  """(description, devices, model axis) of an explicit layout."""
  if config.layout == "mesh":
    return f"mesh {config.mesh_batch}x{config.mesh_model}", config.mesh_batch * \
        config.mesh_model, config.mesh_model
  if config.layout == "mirrored":
    return f"mirrored {config.devices or 'all'}", config.devices, 1
  return config.layout, 1, 1


def choose(config, variables, budget: Budget, slots: int):
  """``layout: auto``: (config with the chosen layout, {layout_chosen, layout_reason}).

  Raises:
    layout_search.PlanError: no layout fits (the message has the numbers).
    ValueError: the memory per device is unknown (CPU without ``device_memory``).
  """
  if budget.memory_per_device is None:
    raise ConfigError("device_memory",
                      "layout 'auto' on CPU needs the memory per device and this machine's "
                      "available memory could not be read: set device_memory (bytes, or e.g. "
                      "'512MiB'; CLI --device-memory). Received: None")
  plan = layout_search.plan(variables, budget.num_devices, budget.memory_per_device,
                      config.batch_size, slots, shared_host_memory=budget.host_memory,
                      snapshot=keeps_best_weights(config))
  reason = plan.reason
  if budget.host_memory is not None:  # Say what memory it planned with (no device_memory).
    reason += (f"; planned with {layout_search.human_bytes(budget.memory_per_device)} per device: "
               f"the {layout_search.human_bytes(budget.host_memory)} of available host memory "
               f"shared by {budget.num_devices} logical CPU device(s)")
  return _concrete(config, plan), {keys.LAYOUT_CHOSEN: plan.describe(),
                                   keys.LAYOUT_REASON: reason}


def check_explicit(config, variables, budget: Budget, slots: int) -> Optional[str]:
  """For an explicit layout and a known budget: one warning line with the numbers when
  the layout's state does not fit (None when it fits or nothing is known)."""
  if budget.memory_per_device is None or config.layout == "multi_worker":
    return None
  what, _, model_axis = _model_axis(config)
  at = variables(model_axis) if callable(variables) else variables
  if at is None:
    return None
  need = layout_search.state_bytes_per_device(at, model_axis, slots)
  if need <= budget.memory_per_device:
    return None
  return (f"layout {what} needs {layout_search.human_bytes(need)} of training state per device "
          f"(parameters, gradients, {slots} optimizer slot(s) per parameter and the "
          f"largest variable in transit at an update, the export or a restore), more than "
          f"the {layout_search.human_bytes(budget.memory_per_device)} per device of "
          f"{budget.source}; running it as asked")


def apply(config, module, spec, gpus: Optional[List[str]] = None):
  """The executor's step before launching training: (config to train with, properties to
  record). ``layout: auto`` -> the planner's choice (printed); an explicit layout -> a
  warning line when it does not fit the budget. Counts on ``module``'s lazy probe
  (user_module.probe) and the slot table (:func:`slot_count`): no model and no slots are
  allocated."""
  auto = config.layout == "auto"
  if gpus is None:
    gpus = gpu_names()
  if not auto and config.device_memory is None and not gpus:
    return config, {}
  model = user_module.probe(module, spec)
  rules_fn = (lambda m: module.layout_rules(spec)) if module.layout_rules else None
  variables = planner_variables(model, rules_fn, module.name)
  slots = slot_count(module, spec, config, model)
  budget = device_budget(config, gpus)
  if not auto:
    warning = check_explicit(config, variables, budget, slots)
    if warning:
      logging.warning("DistributedTrainer: %s", warning)
      print(f"[trainer] WARNING: {warning}", flush=True)
    return config, {}
  chosen, record = choose(config, variables, budget, slots)
  line = (f"[trainer] layout auto on {budget.source} of "
          f"{layout_search.human_bytes(budget.memory_per_device)}: "
          f"{record[keys.LAYOUT_CHOSEN]} ({record[keys.LAYOUT_REASON]})")
  logging.info("DistributedTrainer: %s", line)
  print(line, flush=True)
  return chosen, record


def gpu_names() -> List[str]:
  """Physical GPUs visible to TensorFlow (a small function tests can replace)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [g.name for g in tf.config.list_physical_devices("GPU")]


def plan_job(job, config, module=None):
  """The executor's entry: (job, config) to launch, with ``layout: auto`` resolved to a
  concrete layout in both, and the properties to record ({} unless auto). ``module``: the
  run's module as the executor loaded it (loaded here without it)."""
  if module is None:
    module = user_module.load(config.module_file, config.module_path, config.model)
  spec = ms.ModelSpec.from_dict(job.model_spec)
  chosen, record = apply(config, module, spec, gpus=[] if config.device == "cpu" else None)
  if chosen is not config:
    chosen = chosen.validate()
    job = dataclasses.replace(job, config=json.loads(config_util.to_json(chosen)))
  return job, chosen, record


# Logical CPU devices of the default CPU mesh (2x2, devices.default_mesh(0)).
DEFAULT_CPU_MESH_DEVICES = 4


def cpu_cores() -> int:
  """CPU cores this process may run on (its affinity; else ``os.cpu_count()``)."""
  try:
    return len(os.sched_getaffinity(0))
  except (AttributeError, OSError):
    return os.cpu_count() or 1


def oversubscription(config, cores: int, gpu_count: int) -> Optional[str]:
  """One warning line when the layout runs more logical CPU devices (or local worker
  processes) than ``cores``: they take turns on the cores, so each step is slower, not
  faster (issue 31: a 4x4 mesh on 2 cores trained at 296 examples/s, against 5,401 for
  the default). The default CPU layouts (mesh 2x2, mirrored 2: devices.default_mesh)
  show the layouts work on a machine without GPUs, and never warn: up to
  :data:`DEFAULT_CPU_MESH_DEVICES` is not counted as oversubscribed. None when it fits, or on GPUs
  (devices.plan fits the layout to the GPUs present)."""
  if gpu_count and config.device != "cpu":
    return None
  if config.layout == "mesh":
    what, n = f"mesh {config.mesh_batch}x{config.mesh_model}", config.mesh_batch * config.mesh_model
  elif config.layout == "mirrored":
    n = config.devices or devices_lib.CPU_DEVICES
    what = f"mirrored x{n}"
  elif config.layout == "auto":
    n = config.devices or devices_lib.CPU_DEVICES
    what = f"layout auto over {n} devices"
  elif config.layout == "multi_worker":
    what, n = f"multi_worker x{config.workers}", config.workers
  else:
    return None
  if n <= max(cores, DEFAULT_CPU_MESH_DEVICES):
    return None
  unit = "worker processes" if config.layout == "multi_worker" else "logical CPU devices"
  return (f"{what} runs {n} {unit} on {cores} CPU core(s): they take turns on the cores, "
          f"so training is slower, not faster; at most {cores} fit this machine")


def warn_if_oversubscribed(config, gpus: List[str]) -> None:
  """Prints :func:`oversubscription`'s line (and logs it) when there is one."""
  warning = oversubscription(config, cpu_cores(), len(gpus))
  if warning:
    logging.info("DistributedTrainer: WARNING: %s", warning)  # The console has the print.
    print(f"[trainer] WARNING: {warning}", flush=True)
