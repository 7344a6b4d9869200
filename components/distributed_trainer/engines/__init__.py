"""The two step engines of a training run (run/train.py owns the run itself).

An engine builds the user's model, loss and optimizer for its layout, trains N steps
while driving the run's tf_keras callbacks at every execution boundary, and hands back
weights and state:

* :class:`FitEngine`: ``single``, ``mirrored``, ``multi_worker``; tf_keras ``model.fit``
  under a ``tf.distribute`` strategy (strategies.py), or none.
* :class:`MeshEngine`: ``mesh``; ``mesh_runtime.MeshTrainer`` on a DTensor (batch, model)
  mesh, with the layout rules of sharding.py. Like ``fit``, it runs
  ``steps_per_execution`` steps per call into TensorFlow (one DTensor function over that
  many stacked batches), drives the callbacks through the same Keras protocol, in the
  same order and with the same arguments as ``fit`` (train, epoch and batch hooks) and
  reports the running mean loss ``fit`` reports; the losses leave the devices once per
  execution.

Both give the run's Recorder (run/callbacks.py) the exact loss of every step,
``step_losses(n)``: the mean over the step's global batch, from where the step computed
it (on the fit engine, step_losses.py), never recovered from a running mean.

Both take the loss from ``user_module.make_loss`` and the optimizer from the one
factory ``user_module.make_optimizer`` (optimizers.py; on the mesh, built with
``mesh=``; ``written_optimizer`` is the optimizer as the user wrote it, which the run
records). Their common surface: ``model``, ``optimizer``, ``loss``, ``chief``,
``num_workers``, ``describe()``, ``variable_record()``, ``dataset(make, start_step)``,
``evaluator(eval_ds)``, ``train(dataset, start_step, total, callbacks)``,
``step_losses(n)``, ``weights()``,
``checkpointed()`` (the model and optimizer a tf.train.Checkpoint saves and restores,
live: run/checkpoint.py), ``host_blocks`` (None, or how a checkpoint streams a
variable's blocks to the host), ``copy_weights_to(model)`` (the export's host copy).
"""
import contextlib
import math
from typing import Callable, Dict, List, Sequence, Tuple

from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.engines import sharding


class FitEngine:
  """tf_keras ``fit`` under the layout's strategy (None for single)."""

  host_blocks = None  # Checkpoints: TensorFlow's own writer (see MeshEngine.host_blocks).

  def __init__(self, config, plan, device_record: dict):
    """Creates the strategy: first thing after the devices are configured (multi_worker
    configures collective ops, which must precede any other use of TensorFlow)."""
    # TensorFlow: not before run/train.py's setup_devices has configured the devices.
    from tfx_parallel.components.distributed_trainer.engines import strategies  # pylint: disable=g-import-not-at-top
    self.config, self.device_record = config, device_record
    self.layout = config.layout
    self.strategy = strategies.make_strategy(config.layout, config.devices, plan.collective)
    self.chief, self.num_workers, self.worker_index = True, 1, 0
    if config.layout == "multi_worker":
      task_type, self.worker_index, self.num_workers = strategies.worker_info(self.strategy)
      self.chief = strategies.is_chief(task_type, self.worker_index)
    self.steps_per_execution = config.execution_steps()

  def build(self, module, spec):
    """The user's model, loss and optimizer under the strategy, compiled."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    # TensorFlow: not before run/train.py's setup_devices has configured the devices.
    from tfx_parallel.components.distributed_trainer.engines import step_losses  # pylint: disable=g-import-not-at-top
    config = self.config
    tf_keras.utils.set_random_seed(config.seed)
    with self.scope():
      self.model = user_module.build(module, spec)
      self.loss = user_module.make_loss(module, spec)
      self.optimizer = user_module.make_optimizer(module, spec, config.optimizer,
                                                  config.learning_rate)
      self.model.compile(optimizer=self.optimizer, loss=self.loss,
                         steps_per_execution=self.steps_per_execution)
      self._step_losses = step_losses.StepLosses(self.model, self.steps_per_execution)
    self.written_optimizer = self.optimizer
    if self.strategy is not None:
      # The logs fit hands the callbacks are the compiled metrics' result(), which
      # already aggregates every replica's (sync-on-read) totals and counts: the mean
      # per-example loss over the global batch. tf_keras's default reduction "auto"
      # then SUMS that value over the replicas under MultiWorkerMirroredStrategy
      # (tf_keras/src/engine/training.py, reduce_per_replica: "auto" -> "sum", and
      # strategy.reduce("SUM") for a multi-worker collective strategy), recording
      # workers x the loss. "first" takes the one synchronised value, as under
      # MirroredStrategy, where the replicas' identical results pass through as is.
      self.model.distribute_reduction_method = "first"

  def scope(self):
    return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

  def describe(self) -> dict:
    # TensorFlow: not before run/train.py's setup_devices has configured the devices.
    from tfx_parallel.components.distributed_trainer.engines import strategies  # pylint: disable=g-import-not-at-top
    return dict(strategies.describe(self.layout, self.strategy, self.model.weights),
                **self.device_record)

  def variable_record(self) -> Tuple[Dict[str, dict], List[str], str]:
    """(per-variable splits, replicated-by-default paths, console text): whole copies."""
    return {}, [], ""

  def dataset(self, make: Callable[[int, int, int, int], object], start_step: int):
    """The train dataset: ``make(batch, num_shards, index, skip_batches)``."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    batch = self.config.batch_size
    if self.layout != "multi_worker":
      return make(batch, 1, 0, start_step)

    def fn(ctx: tf.distribute.InputContext):
      per_pipeline = ctx.num_replicas_in_sync // ctx.num_input_pipelines
      return make(ctx.get_per_replica_batch_size(batch), ctx.num_input_pipelines,
                  ctx.input_pipeline_id, start_step * per_pipeline)
    return self.strategy.distribute_datasets_from_function(fn)

  def evaluator(self, eval_ds, callbacks: Sequence = ()) -> Callable[[], Tuple[float, float]]:
    """The per-epoch evaluation; drives ``callbacks``' test hooks (run/callbacks.py)."""
    # TensorFlow: not before run/train.py's setup_devices has configured the devices.
    from tfx_parallel.components.distributed_trainer.run import callbacks as cb  # pylint: disable=g-import-not-at-top
    return cb.make_evaluator(self.model, self.loss, eval_ds, callbacks)

  def train(self, dataset, start_step: int, total: int, callbacks: list):
    if total > start_step:
      self.model.fit(dataset, epochs=1, steps_per_epoch=total - start_step,
                     callbacks=callbacks, verbose=0)

  def step_losses(self, n: int) -> List[float]:
    """The exact losses of the last ``n`` steps (at most one execution's), oldest first:
    each the mean over its global batch, read where the step computed it
    (step_losses.py), not recovered from ``fit``'s running mean."""
    return self._step_losses.last(n)

  def weights(self) -> list:
    return self.model.get_weights()

  def copy_weights_to(self, model):
    """The trained weights into ``model`` (a plain copy on the host), one variable at a
    time: the host holds the copy plus the variable in transit (plan/layout_search.py
    ``host_bytes``), never a second whole copy as ``get_weights`` would."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    targets, sources = model.weights, self.model.weights
    if len(targets) != len(sources):
      raise RuntimeError(f"export: the host model has {len(targets)} variables, the trained "
                         f"model {len(sources)}")
    with tf.device("/CPU:0"):
      for target, source in zip(targets, sources):
        target.assign(source.read_value())

  def checkpointed(self) -> Dict[str, object]:
    """What a checkpoint holds: the model and its optimizer, built (every slot exists,
    so that a restore fills it at once rather than when ``fit`` creates it)."""
    with self.scope():
      self.optimizer.build(self.model.trainable_variables)
    return {"model": self.model, "optimizer": self.optimizer}


class MeshEngine:
  """``MeshTrainer`` on the (batch, model) mesh of ``config.mesh``."""

  def __init__(self, config, plan, device_record: dict):
    del plan
    self.config, self.device_record = config, device_record
    self.layout = "mesh"
    self.chief, self.num_workers, self.worker_index = True, 1, 0
    self.steps_per_execution = config.execution_steps()
    self._losses: List[float] = []  # The last execution's exact losses (train).

  def build(self, module, spec):
    """Places the user's model on the mesh (probe, rules, DVariables) with the loss and
    the optimizer built with ``mesh=``; a rule or optimizer that cannot apply fails here,
    before the first step."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    # TensorFlow: not before run/train.py's setup_devices has configured the devices.
    from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
    config = self.config
    self.module, self.spec = module, spec
    self.loss = user_module.make_loss(module, spec)
    tf_keras.utils.set_random_seed(config.seed)
    # As written (recorded); placed on the mesh by a rebuild with mesh= (optimizers.on_mesh).
    self.written_optimizer = user_module.make_optimizer(module, spec, config.optimizer,
                                                        config.learning_rate)
    self.trainer = mesh_runtime.MeshTrainer(
        lambda: user_module.build(module, spec), mesh_shape=tuple(config.mesh),
        rules=module.layout_rules(spec) if module.layout_rules else None,
        loss_fn=self.loss,
        optimizer=lambda mesh: user_module.place_optimizer(
            module, self.written_optimizer, mesh, config.optimizer),
        global_batch=config.batch_size, module_name=module.name)
    self.model, self.optimizer = self.trainer.model, self.trainer.optimizer
    # One variable's blocks on the host, each copied once and never assembled: a
    # checkpoint after the first streams them a few at a time (run/checkpoint.py).
    self.host_blocks = self.trainer.host_blocks

  def describe(self) -> dict:
    b, m = self.trainer.mesh_shape
    return dict({"layout": "mesh", "replicas": b, "mesh_shape": [b, m],
                 "devices": list(self.trainer.mesh.local_devices())}, **self.device_record)

  def variable_record(self) -> Tuple[Dict[str, dict], List[str], str]:
    """(per-variable splits, variables the default rules left whole, console text)."""
    m = self.trainer.mesh_shape[1]
    splits = sharding.split_record(self.trainer.shardings, self.trainer.shard_shapes(), m)
    return (splits, [v.path for v in self.trainer.replicated],
            sharding.describe_splits(splits, self.trainer.global_shapes()))

  def dataset(self, make, start_step: int):
    return make(self.config.batch_size, 1, 0, start_step)

  def evaluator(self, eval_ds, callbacks: Sequence = ()) -> Callable[[], Tuple[float, float]]:
    """Evaluation on the mesh itself (the sharded variables, the batch split over the
    batch axis: MeshTrainer.evaluation_sums); drives ``callbacks``' test hooks as the fit
    engine's does."""
    # TensorFlow: not before run/train.py's setup_devices has configured the devices.
    from tfx_parallel.components.distributed_trainer.run import callbacks as cb  # pylint: disable=g-import-not-at-top
    return cb.make_evaluator(self.model, self.loss, eval_ds, callbacks,
                             sums=self.trainer.evaluation_sums)

  def train(self, dataset, start_step: int, total: int, callbacks: list):
    """Steps until ``total`` (or a callback sets ``model.stop_training``), in executions
    of ``steps_per_execution`` steps: each is ONE DTensor call over that many batches,
    stacked by ``dataset.batch`` (the last may be shorter).

    The callbacks are driven as ``model.fit(epochs=1, steps_per_epoch=total -
    start_step)`` drives them (tf_keras/src/engine/training.py ``Model.fit``, TF 2.16):
    a ``CallbackList`` with a History, ``on_train_begin``, ``on_epoch_begin(0)``, per
    execution ``on_train_batch_begin(first step)`` and ``on_train_batch_end(last step,
    {"loss": running mean since the start})``, ``on_epoch_end(0, logs)`` and
    ``on_train_end(logs)``; the losses leave the devices only once per execution."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    if total <= start_step:
      return  # As FitEngine: no fit, no callbacks.
    model, steps = self.model, total - start_step
    hooks = tf_keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=False,
                                            model=model, verbose=0, epochs=1, steps=steps)
    model.stop_training = False
    hooks.on_train_begin()
    hooks.on_epoch_begin(0)
    count, mean, logs = 0, 0.0, {}
    # Stacked k at a time by tf.data's threads (prefetch), and each execution's batches
    # packed onto the mesh while the one before runs (run_packed returns before the
    # devices finish; fetch waits): the host's input work overlaps the steps, as fit's
    # input is read inside its train function.
    batches = iter(dataset.take(steps).batch(self.steps_per_execution).prefetch(1))
    packed = self._pack_next(batches)
    while packed is not None:
      hooks.on_train_batch_begin(count)
      running = self.trainer.run_packed(packed)
      packed = self._pack_next(batches)
      losses = self._losses = self.trainer.fetch([running])
      for n, loss in enumerate(losses, count + 1):
        mean = mean + (loss - mean) / n if math.isfinite(loss) else loss
      count += len(losses)
      logs = {"loss": mean}
      hooks.on_train_batch_end(count - 1, logs)
      if model.stop_training:
        break
    hooks.on_epoch_end(0, dict(logs))
    hooks.on_train_end(dict(logs))

  def _pack_next(self, batches):
    """The next execution's batches packed onto the mesh, or None at the end."""
    stacked = next(batches, None)
    return None if stacked is None else self.trainer.pack_steps(*stacked)

  def step_losses(self, n: int) -> List[float]:
    """The exact losses of the last ``n`` steps of the execution that just ended, oldest
    first, as the step function returned them."""
    if not 0 < n <= len(self._losses):
      raise ValueError(f"n: between 1 and {len(self._losses)} (the last execution's "
                       f"steps). Received: {n}")
    return self._losses[-n:]

  def weights(self) -> list:
    return self.trainer.full_weights()

  def copy_weights_to(self, model):
    """The mesh model's weights into ``model`` (a plain host copy), one variable at a
    time through host memory: no device holds a whole split variable."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with tf.device("/CPU:0"):
      for target, source in zip(model.weights, self.model.weights):
        target.assign(self.trainer.to_host(source))

  def checkpointed(self) -> Dict[str, object]:
    """What a checkpoint holds: the mesh model and optimizer themselves, no host copy;
    no device ever holds a whole split variable.

    A run's first save, and every restore, are TensorFlow's DTensor-aware checkpointing
    of the DVariables. Each saves through its ``_DVariableSaveable``
    (tensorflow/dtensor/python/d_variable.py, TF 2.16.2): a ``DSaveSpec`` with the
    variable's global shape and its layout on the host mesh, so DTensor's SaveV2 writes
    each device's block as a slice of the global tensor; functional_saver.py
    ``MultiDeviceSaver.restore`` runs the restore inside a tf.function on the DTensor
    device "because custom devices, such as DTensor, usually do a sharded save and
    restore", so RestoreV2 reads each device's block in the layout of its variable.
    Each such save traces and DTensor-compiles a new function (0.2-0.5 s, whatever the
    model's size), so later saves stream the devices' blocks a few at a time through
    host memory (``host_blocks``; run/checkpoint.py ``_write_streamed``), each block as a
    slice of its variable as DTensor writes it, under the same keys and object graph. The keys are the ones any layout's checkpoint has (the optimizer is the
    user's class rebuilt with ``mesh=``; a plain SGD's MeshSGD keeps stock SGD's ``m``
    slots): a mesh checkpoint resumes on single or mirrored, and theirs here.
    """
    return {"model": self.model, "optimizer": self.optimizer}


def create(config, plan, device_record: dict):
  """The engine of ``config.layout`` (then ``engine.build(module, spec)``)."""
  cls: type = MeshEngine if config.layout == "mesh" else FitEngine
  return cls(config, plan, device_record)
