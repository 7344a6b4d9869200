"""MeshEngine: ``mesh``; ``mesh_runtime.MeshTrainer`` on a DTensor (batch, model) mesh,
with the layout rules of sharding.py. The common engine surface is described in the
package docstring (engines/__init__.py)."""
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from tfx_parallel.components.distributed_trainer import sharding
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.engines import epochs as ep


def stacked_executions(dataset, lengths: Sequence[int], k: int):
  """``dataset``'s first ``sum(lengths)`` batches, stacked by tf.data one execution at a
  time: one element per execution, its batches' tensors stacked on a new first axis of
  ``lengths[j]`` (each at most ``k``), the values ``tf.stack`` would give.

  ``dataset.batch(k)`` alone would cut every execution at ``k``; the lengths of
  engines/epochs.py also end at epoch ends, at the run's end and, on a resumed run, at
  the first multiple of ``k``. ``Dataset.rebatch`` with a vector cuts the batched stream
  into those sizes in turn (tensorflow/python/data/ops/dataset_ops.py ``rebatch``, TF
  2.16: "If the `batch_size` argument is a list, `rebatch` cycles through the list";
  the list is the whole run, consumed once). ``batch(k)`` first makes the per-element
  work tf.data's per ``k`` batches, not per batch: as cheap as ``batch(k)`` alone,
  about a tenth of stacking in Python (benchmarks/RESULTS.md).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not lengths or not all(0 < n <= k for n in lengths):
    raise ValueError(f"lengths: each between 1 and k={k}. Received: {list(lengths)}")
  return dataset.take(sum(lengths)).batch(k).rebatch(tf.constant(lengths, tf.int64))


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
    # ``model.optimizer`` is the optimizer that trains, as ``compile`` makes it on the fit
    # engine: LearningRateScheduler and ReduceLROnPlateau read and set its learning rate
    # (tf_keras backend.set_value relayouts a value into a DVariable's layout).
    self.model.optimizer = self.optimizer
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
    from tfx_parallel.components.distributed_trainer.engines import callbacks as cb  # pylint: disable=g-import-not-at-top
    return cb.make_evaluator(self.model, self.loss, eval_ds, callbacks,
                             sums=self.trainer.evaluation_sums)

  def train(self, dataset, start_step: int, total: int, callbacks: list,
            steps_per_epoch: Optional[int] = None):
    """Steps until ``total`` (or a callback sets ``model.stop_training``), in executions
    that end where engines/epochs.py says (a multiple of ``steps_per_execution``, the
    epoch's end, the run's end, as on the fit engine): each is ONE DTensor call over
    that many batches, stacked by tf.data (:func:`stacked_executions`) and packed onto
    the mesh while the execution before runs.

    The callbacks are driven as ``model.fit(initial_epoch=, epochs=,
    steps_per_epoch=steps_per_epoch)`` drives them on the fit engine
    (tf_keras/src/engine/training.py ``Model.fit``, TF 2.16): a ``CallbackList`` with a
    History, ``on_train_begin``; per Keras epoch (the run's epochs; a run resumed
    mid-epoch starts inside its first, as fit_engine.py makes ``fit`` start)
    ``on_epoch_begin(e)``, per execution ``on_train_batch_begin(its first batch in the
    epoch)`` and ``on_train_batch_end(its last, {"loss": running mean since the epoch's
    start})``, then ``on_epoch_end(e, logs)`` (the Recorder, first, has added the
    epoch's ``val_loss``: engines/callbacks.py), stopping after it when a callback set
    ``model.stop_training``; ``on_train_end(logs)``. The losses leave the devices only
    once per execution. An execution of a new length traces a new step function (k is
    static in it: mesh_runtime.py), at most ``steps_per_execution`` of them."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    if total <= start_step:
      return  # As FitEngine: no fit, no callbacks.
    spe = steps_per_epoch or total
    first, epochs, _ = ep.keras_epochs(start_step, total, spe)
    model = self.model
    hooks = tf_keras.callbacks.CallbackList(callbacks, add_history=True, add_progbar=False,
                                            model=model, verbose=0, epochs=epochs, steps=spe)
    # Each execution's batches stacked by tf.data's threads (prefetch), and packed onto
    # the mesh while the execution before runs (run_packed returns before the devices
    # finish; fetch waits): the host's input work overlaps the steps, as fit's input is
    # read inside its train function.
    stacked = iter(stacked_executions(
        dataset, ep.execution_lengths(start_step, total, spe, self.steps_per_execution),
        self.steps_per_execution).prefetch(1))

    def pack_next():
      batches = next(stacked, None)
      return None if batches is None else self.trainer.pack_steps(*batches)

    model.stop_training = False
    hooks.on_train_begin()
    step, logs, training_logs = start_step, {}, None
    packed = pack_next()
    for epoch in range(first, epochs):
      hooks.on_epoch_begin(epoch)
      epoch_start, count, mean = epoch * spe, 0, 0.0
      while packed is not None and step < min(total, epoch_start + spe):
        hooks.on_train_batch_begin(step - epoch_start)
        running = self.trainer.run_packed(packed)
        packed = pack_next()
        losses = self._losses = self.trainer.fetch([running])
        for n, loss in enumerate(losses, count + 1):
          mean = mean + (loss - mean) / n if math.isfinite(loss) else loss
        count += len(losses)
        step += len(losses)
        logs = {"loss": mean}
        hooks.on_train_batch_end(step - epoch_start - 1, logs)
        if model.stop_training:
          break
      training_logs = dict(logs)
      hooks.on_epoch_end(epoch, training_logs)
      if model.stop_training or step >= total:
        break
    hooks.on_train_end(training_logs)

  def step_losses(self, n: int) -> List[float]:
    """The exact losses of the last ``n`` steps of the execution that just ended, oldest
    first, as the step function returned them."""
    if not 0 < n <= len(self._losses):
      raise ValueError(f"n: between 1 and {len(self._losses)} (the last execution's "
                       f"steps). Received: {n}")
    return self._losses[-n:]

  def weights(self) -> list:
    """The weights as whole host arrays (for tests; the run itself uses ``snapshot``)."""
    return self.trainer.full_weights()

  def snapshot(self) -> list:
    """The weights as they are now, kept in host memory as the blocks the devices hold,
    never assembled (an early stop's best weights: engines/callbacks.py ``EarlyStop``):
    the host holds one copy of the state, as ``single``'s ``get_weights`` does, and no
    whole copy of a split variable."""
    return [list(self.trainer.host_slices(v)) for v in self.model.weights]

  def copy_weights_to(self, model, snapshot=None):
    """The mesh model's weights (or ``snapshot``'s) into ``model`` (a plain host copy),
    one variable at a time, each block written into its slice of the host variable: no
    device and no host buffer holds a whole split variable besides the copy itself."""
    targets, sources = model.weights, self.model.weights
    if len(targets) != len(sources):
      raise RuntimeError(f"export: the host model has {len(targets)} variables, the trained "
                         f"model {len(sources)}")
    for i, (target, source) in enumerate(zip(targets, sources)):
      blocks = None
      if snapshot is not None:
        blocks, snapshot[i] = snapshot[i], None  # Each block leaves the host once written.
      self.trainer.copy_into(source, target, blocks)

  def assign_from_host(self, variable, value):
    """One whole host value (a warm start's: warm_start.py) into a model variable, each
    device receiving its block (mesh_runtime ``assign_from_host``)."""
    self.trainer.assign_from_host(variable, value)

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
