"""FitEngine: ``single``, ``mirrored``, ``multi_worker``; tf_keras ``model.fit`` under a
``tf.distribute`` strategy (strategies.py), or none. The common engine surface is
described in the package docstring (engines/__init__.py)."""
import contextlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.engines import epochs as ep
from tfx_parallel.components.distributed_trainer.engines.tf_keras_fields import TfKerasFieldError

# Private tf_keras hooks FitEngine.train relies on: checked at build (check_private_hooks,
# before the first step), never guessed with a default; pinned by
# tests/test_trainer_tf_keras_fields.py. Lines of tf_keras v2.16.0: upstream
# tf_keras/engine/training.py, the same lines as the wheel's tf_keras/src/engine/training.py
# (the installed 2.16.0 differs only in its import paths).
# - Where fit starts: Model.__init__ sets ``self._training_state = None`` (training.py:315);
#   fit takes (initial epoch, initial step) from ``self._maybe_load_initial_counters_from_ckpt
#   (steps_per_epoch, initial_epoch)`` (:1787), which, when the state is set, returns
#   ``self._training_state.maybe_load_initial_counters_from_ckpt(steps_per_epoch,
#   initial_epoch, mode=ModeKeys.TRAIN)`` (:3946, :3966-3969); _StartInside answers it.
TRAINING_STATE, LOAD_COUNTERS = "_training_state", "_maybe_load_initial_counters_from_ckpt"
STATE_LOAD_COUNTERS = "maybe_load_initial_counters_from_ckpt"
# - Where each execution ends: the ``steps_per_execution`` setter assigns into the
#   variable compile made, ``_steps_per_execution`` (:1031-1036; made at :863-864), the
#   one fit hands its DataHandler (:1756) and its train function loops over (:1439);
#   DataHandler.steps reads it before each execution (data_adapter.py:1406).
STEPS_PER_EXECUTION = "_steps_per_execution"


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
    check_private_hooks(self.model, self.layout)
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
    """The per-epoch evaluation; drives ``callbacks``' test hooks (engines/callbacks.py)."""
    # TensorFlow: not before run/train.py's setup_devices has configured the devices.
    from tfx_parallel.components.distributed_trainer.engines import callbacks as cb  # pylint: disable=g-import-not-at-top
    return cb.make_evaluator(self.model, self.loss, eval_ds, callbacks)

  def train(self, dataset, start_step: int, total: int, callbacks: list,
            steps_per_epoch: Optional[int] = None):
    """Steps ``start_step`` .. ``total`` as ONE ``model.fit`` whose Keras epochs are the
    run's (``steps_per_epoch`` steps; default: one epoch of ``total`` steps), so that a
    callback's ``on_epoch_begin(e)`` / ``on_epoch_end(e, logs)`` come at each epoch
    boundary, as a Keras user expects (engines/epochs.py).

    Two things ``fit`` does not offer are set through the hooks it reads them from
    (tf_keras/src/engine/training.py ``Model.fit``, TF 2.16):

    * a run resumed mid-epoch starts inside its first epoch at the batch where it
      stopped, as after a ``BackupAndRestore`` restore: ``fit`` (line 1787 in tf_keras
      2.16) takes (initial epoch, initial step) from ``model._training_state``'s
      ``maybe_load_initial_counters_from_ckpt`` (``_maybe_load_initial_counters_from_ckpt``;
      BackupAndRestore, its only other user, is refused: user_module.py);
    * each execution ends where engines/epochs.py says (a multiple of
      ``steps_per_execution``, the epoch's end, the run's end): :class:`_Executions`
      sets ``model.steps_per_execution`` (the variable ``DataHandler.steps`` reads
      before each execution and the train function loops over), and stops ``fit`` at
      ``total`` inside a shorter last epoch.
    """
    if total <= start_step:
      return
    spe = steps_per_epoch or total
    first, epochs, first_batch = ep.keras_epochs(start_step, total, spe)
    model = self.model
    setattr(model, TRAINING_STATE, _StartInside(first, first_batch) if first_batch else None)
    try:
      model.fit(dataset, initial_epoch=first, epochs=epochs, steps_per_epoch=spe,
                callbacks=[_executions(start_step, total, spe, self.steps_per_execution)]
                + list(callbacks), verbose=0)
    finally:
      setattr(model, TRAINING_STATE, None)
      model.steps_per_execution = self.steps_per_execution

  def step_losses(self, n: int) -> List[float]:
    """The exact losses of the last ``n`` steps (at most one execution's), oldest first:
    each the mean over its global batch, read where the step computed it
    (step_losses.py), not recovered from ``fit``'s running mean."""
    return self._step_losses.last(n)

  def weights(self) -> list:
    return self.model.get_weights()

  def snapshot(self) -> list:
    """The weights as they are now, in host memory (an early stop's best weights)."""
    return self.model.get_weights()

  def copy_weights_to(self, model, snapshot=None):
    """The trained weights (or ``snapshot``'s) into ``model`` (a plain copy on the host),
    one variable at a time: the host holds the copy plus the variable in transit
    (plan/layout_search.py ``host_bytes``), never a second whole copy as ``get_weights``
    would. A snapshot's arrays leave it as they are written."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    targets, sources = model.weights, self.model.weights
    if len(targets) != len(sources):
      raise RuntimeError(f"export: the host model has {len(targets)} variables, the trained "
                         f"model {len(sources)}")
    with tf.device("/CPU:0"):
      for i, (target, source) in enumerate(zip(targets, sources)):
        if snapshot is None:
          target.assign(source.read_value())
        else:
          target.assign(snapshot[i])
          snapshot[i] = None

  def assign_from_host(self, variable, value):
    """One whole host value (a warm start's: warm_start.py) into a model variable; a
    mirrored variable's assign, outside a replica context, writes every replica."""
    variable.assign(value)

  def checkpointed(self) -> Dict[str, object]:
    """What a checkpoint holds: the model and its optimizer, built (every slot exists,
    so that a restore fills it at once rather than when ``fit`` creates it)."""
    with self.scope():
      self.optimizer.build(self.model.trainable_variables)
    return {"model": self.model, "optimizer": self.optimizer}


def check_private_hooks(model, layout: str):
  """The private tf_keras hooks ``train`` relies on (the constants above), present and
  doing what tf_keras 2.16 does with them on this compiled ``model``; else
  TfKerasFieldError naming the field and the tf_keras version.

  ``Model._maybe_load_initial_counters_from_ckpt`` is asked once with a state set (then
  restored): it must return the state's answer. ``_steps_per_execution`` must be a
  variable and ``steps_per_execution`` a property with a setter (that the setter assigns
  into that variable is pinned by the test: an assign here would write the devices)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  user = f"{layout} layout"
  resumed = "where fit starts a run resumed mid-epoch"
  if not hasattr(model, TRAINING_STATE):
    raise TfKerasFieldError(f"Model.{TRAINING_STATE}", resumed, user)
  load = getattr(model, LOAD_COUNTERS, None)
  if load is None:
    raise TfKerasFieldError(f"Model.{LOAD_COUNTERS}", resumed, user)
  saved = getattr(model, TRAINING_STATE)
  setattr(model, TRAINING_STATE, _StartInside(3, 2))
  try:
    answer = tuple(load(5, 0))
  except (AttributeError, TypeError) as e:
    raise TfKerasFieldError(f"Model.{LOAD_COUNTERS} asking Model.{TRAINING_STATE}."
                            f"{STATE_LOAD_COUNTERS}(steps_per_epoch, initial_epoch, mode=) "
                            f"({type(e).__name__}: {e})", resumed, user) from e
  finally:
    setattr(model, TRAINING_STATE, saved)
  if answer != (3, 2):
    raise TfKerasFieldError(f"Model.{LOAD_COUNTERS} returning Model.{TRAINING_STATE}'s "
                            f"answer (it returned {answer} for (3, 2))", resumed, user)
  ends = "the variable fit's executions loop over, set to end them at epoch ends"
  if not isinstance(getattr(model, STEPS_PER_EXECUTION, None), tf.Variable):
    raise TfKerasFieldError(f"Model.{STEPS_PER_EXECUTION} (a variable after compile)", ends,
                            user)
  setter = getattr(type(model), "steps_per_execution", None)
  if not isinstance(setter, property) or setter.fset is None:
    raise TfKerasFieldError("Model.steps_per_execution setter", ends, user)


class _StartInside:
  """Where ``fit`` starts its first epoch (``Model._maybe_load_initial_counters_from_ckpt``
  asks ``model._training_state``, as BackupAndRestore's WorkerTrainingState answers)."""

  def __init__(self, epoch: int, batch: int):
    self.epoch, self.batch = epoch, batch

  def maybe_load_initial_counters_from_ckpt(self, steps_per_epoch, initial_epoch, mode=None):
    del steps_per_epoch, initial_epoch, mode
    return self.epoch, self.batch


def _executions(start_step: int, total: int, steps_per_epoch: int, k: int):
  """The callback that makes ``fit``'s executions end where engines/epochs.py says and
  stops ``fit`` at ``total``; runs first."""
  import tf_keras  # pylint: disable=g-import-not-at-top

  class _Executions(tf_keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self._epoch_start = 0
      self._length = None  # The length last set (fit changes it only before our first).

    def _next(self, step: int):
      if step >= total:
        self.model.stop_training = True
      elif k > 1:  # k 1: fit traced a one-step function; every execution is one step.
        length = ep.execution_length(step, total, steps_per_epoch, k)
        if length != self._length:  # An assign per change, not per execution.
          self.model.steps_per_execution = self._length = length

    def on_epoch_begin(self, epoch, logs=None):
      self._epoch_start = epoch * steps_per_epoch
      self._next(max(start_step, self._epoch_start))

    def on_train_batch_end(self, batch, logs=None):
      self._next(self._epoch_start + int(batch) + 1)

  return _Executions()
