"""What actually ran, for history.json: read from the built objects, never from config.

A user module's ``optimizer(spec)`` / ``loss(spec)`` hooks (user_module.py) replace the
config's ``optimizer`` and ``learning_rate``, so the record comes from the optimizer and
loss the run trained with: their class and ``get_config()`` (a learning-rate schedule
serialised with its class and config, as tf_keras serialises it), the learning rate at
each history record (:func:`learning_rate_at`, when the record is written), and why the
run stopped if it diverged. Called by the run skeleton once training ends:
``history.update(run_record.describe(...))``.
"""
import json
from typing import Any, Dict

from tfx_parallel.components.common import divergence
from tfx_parallel.components.common import task_contract


def jsonable(value: Any) -> Any:
  """``value`` with numpy scalars and arrays as Python numbers and lists (and anything
  else as its repr), so json.dumps takes it."""
  return json.loads(json.dumps(value, default=_default))


def _default(value):
  if hasattr(value, "tolist"):
    return value.tolist()
  if hasattr(value, "numpy"):
    return value.numpy().tolist()
  return repr(value)


def _schedule(optimizer):
  """The optimizer's learning-rate schedule object, or None for a constant rate."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  schedule_type = tf_keras.optimizers.schedules.LearningRateSchedule
  for candidate in (getattr(optimizer, "_learning_rate", None),
                    getattr(optimizer, "_hyper", {}).get("learning_rate")):
    if isinstance(candidate, schedule_type):
      return candidate
  return None


def optimizer_record(optimizer) -> Dict[str, Any]:
  """{"class", "config", "learning_rate"} of the optimizer as built. ``learning_rate``
  is the constant rate, or {"class", "config"} of the schedule."""
  config = jsonable(optimizer.get_config())
  schedule = _schedule(optimizer)
  if schedule is not None:
    rate = {"class": type(schedule).__name__, "config": jsonable(schedule.get_config())}
  else:
    rate = config.get("learning_rate")
    if rate is None:  # Not in the config: read the variable.
      rate = float(optimizer.learning_rate)
  return {"class": type(optimizer).__name__, "config": config, "learning_rate": rate}


def learning_rate_at(optimizer, step: int) -> float:
  """The learning rate the optimizer applied at 1-based ``step`` (a schedule is called
  with the optimizer's iteration count before that step, as the optimizer does)."""
  schedule = _schedule(optimizer)
  if schedule is not None:
    return float(schedule(max(int(step) - 1, 0)))
  rate = optimizer.learning_rate  # A variable: plain, mirrored or on a DTensor mesh.
  return float(rate.numpy() if hasattr(rate, "numpy") else rate)


def loss_record(loss) -> Dict[str, Any]:
  """{"class", "config"} of the training loss (a function: its name, config {})."""
  if hasattr(loss, "get_config"):
    return {"class": type(loss).__name__, "config": jsonable(loss.get_config())}
  return {"class": getattr(loss, "__name__", type(loss).__name__), "config": {}}


def describe(optimizer, loss, task: str, num_classes: int,
             diverged_reason: str = "") -> Dict[str, Any]:
  """Keys to update history.json with: ``optimizer`` (class), ``optimizer_config`` of the
  optimizer as the user wrote it (the engines' ``written_optimizer``: on the mesh, not
  its rebuild with ``mesh=``), ``loss``, ``num_classes`` as every artifact records it
  (task_contract.py) and ``diverged_reason``. Each record's learning rate is written
  when the record is (callbacks.Recorder, with :func:`learning_rate_at`)."""
  return {
      "optimizer": type(optimizer).__name__,
      "optimizer_config": optimizer_record(optimizer),
      "loss": loss_record(loss),
      "num_classes": task_contract.recorded_num_classes(task, num_classes),
      "diverged_reason": diverged_reason,
  }


def non_negative(loss) -> bool:
  """Whether the loss can never be negative (the divergence rule's range check)."""
  return divergence.is_non_negative(loss_record(loss)["class"])




def mesh_layout(trainer) -> Dict[str, Any]:
  """The mesh run's placement as applied (mesh_runtime.MeshTrainer): ``layout_rules``
  {variable-path regex: per-dimension sharding}, the module's or the defaults, and
  ``variable_shardings`` {variable path: per-dimension sharding} they resolved to."""
  return {
      "layout_rules": {rule: list(sharding) for rule, sharding in trainer.rules.items()},
      "variable_shardings": {path: list(sharding)
                             for path, sharding in trainer.shardings.items()},
  }
