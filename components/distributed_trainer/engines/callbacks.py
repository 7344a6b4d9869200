"""tf_keras callbacks of a training run: history records, per-epoch eval loss, divergence
stop, checkpoints, and progress (printed by :class:`Progress` only).

The Keras epochs are the run's epochs, passes over the train split (``steps_per_epoch``
steps; the last one shorter when the length is not a whole number of them), on every
layout (engines/epochs.py). The callbacks see the step at the end of every execution,
which ends at each multiple of ``steps_per_execution``, each epoch's end and the run's
end, so records and checkpoints fall on execution boundaries (config.execution_steps()
divides log_every and checkpoint_every) and each epoch's evaluation runs at its last
step, before any ``on_epoch_end``: the Recorder, the first callback, adds that
evaluation's loss to the epoch's logs as ``val_loss``, as ``Model.fit`` merges its
validation logs into the logs of ``on_epoch_end`` (tf_keras 2.16
tf_keras/src/engine/training.py ``Model.fit``, lines 1869-1871:
``epoch_logs.update(val_logs)``, then ``callbacks.on_epoch_end(epoch, epoch_logs)``), so
that EarlyStopping, ReduceLROnPlateau and CSVLogger see it.
"""
import dataclasses
import math
import time
from typing import Callable, List, Optional, Sequence, Tuple

import tf_keras

from tfx_parallel.components.common import divergence
from tfx_parallel.components.common import progress
from tfx_parallel.components.distributed_trainer.engines.tf_keras_fields import TfKerasFieldError


@dataclasses.dataclass
class RunState:
  """What the callbacks share, and what a checkpoint and history.json keep."""
  total: int
  start_step: int
  global_batch: int
  steps_per_epoch: int
  learning_rate: float
  records: List[dict] = dataclasses.field(default_factory=list)
  epochs: List[dict] = dataclasses.field(default_factory=list)
  wall_offset: float = 0.0
  step: int = 0
  diverged: bool = False
  diverged_reason: str = ""   # components/common/divergence.py's reason, "" if none.
  early_stopped: bool = False  # EarlyStop: the eval loss stopped improving.
  stopped_by: str = ""  # The user callback that set model.stop_training (UserStop).
  initial_eval_loss: Optional[float] = None  # The untrained model's (divergence start).
  last_loss: float = math.nan
  t_start: float = dataclasses.field(default_factory=time.perf_counter)
  eval_seconds: float = 0.0   # Time spent in per-epoch evaluation (not training).
  # The optimizer's plain learning rate at the start of the current epoch, before any
  # callback's on_epoch_begin (None: a LearningRateSchedule, or between epochs); a
  # checkpoint inside the epoch keeps it (Recorder.on_epoch_begin).
  epoch_learning_rate: Optional[float] = None

  def wall_time(self) -> float:
    return self.wall_offset + time.perf_counter() - self.t_start


class Recorder(tf_keras.callbacks.Callback):
  """Appends history records every ``log_every`` steps, evaluates at epoch ends, and
  stops training when the run diverges (``stop_on_divergence``) by the rule the
  evaluator labels runs with (components/common/divergence.py: a NaN/inf, negative
  (``non_negative`` losses) or exploding loss, or an eval loss rising by half and by
  more than its noise together with the training loss; an eval loss that rises alone is
  overfitting, not divergence). ``eval_loss()`` returns (eval loss, its standard error).

  ``step_losses(n)`` returns the exact losses of the last ``n`` steps (the engine's
  ``step_losses``: each step's mean over its global batch, as the step computed it); a
  record's loss is the mean of the exact losses of the steps since the previous record
  (with ``log_every`` 1, the step's own loss). The divergence rule sees the mean of each
  execution's steps. Keras's ``logs["loss"]`` (a running mean since the start of the
  epoch) is not read. The step is the epoch's first step (``on_epoch_begin``) plus the
  batch index within the epoch. ``on_epoch_end`` adds the epoch's evaluation to its logs
  as ``val_loss`` (module docstring); it must come before the user's callbacks.

  ``on_epoch_begin``, before any user callback's, keeps the optimizer's plain learning
  rate as ``state.epoch_learning_rate``, and a run resumed inside that epoch sets the
  rate back to it there: the checkpoint holds the rate a
  LearningRateScheduler (``lambda epoch, lr: lr * 0.5``) already set at the epoch's
  start, and its ``on_epoch_begin`` runs again on resume, so without this the schedule
  would apply twice. A LearningRateSchedule (step-based) is left as it is.
  """

  def __init__(self, state: RunState, log_every: int, stop_on_divergence: bool,
               eval_loss: Callable[[], Tuple[float, float]],
               step_losses: Callable[[int], Sequence[float]], writer=None,
               non_negative: bool = True,
               learning_rate_at: Optional[Callable[[int], float]] = None):
    super().__init__()
    self.state = state
    self.step_losses = step_losses
    # The rate the optimizer applied at a step (run_record.learning_rate_at), read when
    # the record is written; without it, the run's configured rate.
    self.learning_rate_at = learning_rate_at or (lambda step: state.learning_rate)
    self.log_every = log_every
    self.stop_on_divergence = stop_on_divergence
    self.eval_loss = eval_loss
    self.writer = writer
    self._epoch_start = 0  # The first step of the current Keras epoch.
    self._last = state.start_step  # The step of the last execution seen.
    self._window: List[float] = []  # Exact losses of the steps since the last record.
    self._flushed = len(state.records)
    self._t_last, self._step_last, self._eval_last = time.perf_counter(), state.start_step, 0.0
    self.monitor = divergence.Monitor(non_negative, start=state.initial_eval_loss)
    for record in state.records:  # A resumed run: what came before counts.
      self.monitor.add_train(record["loss"])
    for epoch in state.epochs:
      if epoch.get("eval_loss") is not None:
        self.monitor.add_eval(epoch["eval_loss"], epoch.get("eval_loss_se"),
                              epoch.get("train_loss"))

  def on_epoch_begin(self, epoch, logs=None):
    st = self.state
    self._epoch_start = int(epoch) * st.steps_per_epoch
    rate = _plain_rate(getattr(self.model, "optimizer", None))
    if rate is None:
      st.epoch_learning_rate = None
    elif self._epoch_start < st.start_step and st.epoch_learning_rate is not None:
      # Resumed inside this epoch: its rate as it began, before any on_epoch_begin.
      tf_keras.backend.set_value(rate, st.epoch_learning_rate)
    else:
      st.epoch_learning_rate = float(tf_keras.backend.get_value(rate))

  def on_train_batch_end(self, batch, logs=None):
    st = self.state
    step = self._epoch_start + int(batch) + 1
    st.step = step
    losses = [float(x) for x in self.step_losses(step - self._last)]
    self._last = step
    self._window += losses
    st.last_loss = execution_loss = sum(losses) / len(losses)
    why = self.monitor.add_train(execution_loss)
    if step % self.log_every == 0 or step >= st.total or why:
      self._record(step)
    if why:
      self._diverged(why)
      return
    epoch = step // st.steps_per_epoch
    if (epoch > len(st.epochs) and step > st.start_step) or step >= st.total:
      t0 = time.perf_counter()
      self.flush_summaries()
      ev, ev_se = self.eval_loss()
      st.eval_seconds += time.perf_counter() - t0
      train_loss = st.records[-1]["loss"] if st.records else execution_loss
      st.epochs.append({"epoch": len(st.epochs) + 1, "step": step,
                        "train_loss": train_loss, "eval_loss": ev, "eval_loss_se": ev_se})
      why = self.monitor.add_eval(ev, ev_se, train_loss)
      if why:
        self._diverged(why)
        return
    if step >= st.total:
      self.model.stop_training = True

  def _record(self, step: int):
    """A history record of the steps since the previous one, ending at ``step``."""
    st = self.state
    now = time.perf_counter()
    train_seconds = now - self._t_last - (st.eval_seconds - self._eval_last)
    eps = (step - self._step_last) * st.global_batch / max(train_seconds, 1e-9)
    loss = sum(self._window) / len(self._window)
    self._window = []
    st.records.append({"step": step, "loss": loss, "learning_rate": self.learning_rate_at(step),
                       "examples_per_sec": eps, "wall_time": st.wall_time()})
    self._t_last, self._step_last, self._eval_last = now, step, st.eval_seconds

  def _diverged(self, why: str):
    self.state.diverged, self.state.diverged_reason = True, why
    if self.stop_on_divergence:
      self.model.stop_training = True

  def on_epoch_end(self, epoch, logs=None):
    self.state.epoch_learning_rate = None  # A checkpoint at the epoch's end: none inside.
    self._add_val_loss(logs)

  def _add_val_loss(self, logs):
    """The evaluation at this step (the epoch's last) into ``logs`` as ``val_loss``:
    every later callback gets the same dict (tf_keras/src/callbacks.py
    ``CallbackList.on_epoch_end`` hands one processed ``logs`` to each in turn)."""
    st = self.state
    if logs is not None and st.epochs and st.epochs[-1]["step"] == st.step and (
        st.step > st.start_step):
      logs["val_loss"] = st.epochs[-1]["eval_loss"]

  def on_train_end(self, logs=None):
    self._add_val_loss(logs)
    if self._window:
      # A stop between records (a user callback's EarlyStopping at an epoch's end that
      # is no multiple of log_every, the trainer's own patience): the steps since the
      # last record end the history, so that its last step and final loss are those of
      # the exported weights.
      self._record(self.state.step)
    self.flush_summaries()

  def flush_summaries(self):
    """Writes the TensorBoard scalars of the records since the last flush. Batched (at
    epoch ends and at the end), so that logging costs no time between training steps."""
    if self.writer is None:
      return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    with self.writer.as_default():
      for record in self.state.records[self._flushed:]:
        tf.summary.scalar("loss", record["loss"], step=record["step"])
        tf.summary.scalar("examples_per_sec", record["examples_per_sec"], step=record["step"])
    self.writer.flush()
    self._flushed = len(self.state.records)


def _plain_rate(optimizer):
  """The optimizer's learning-rate variable as LearningRateScheduler reads and sets it
  (``optimizer.lr``), or None when the rate is a LearningRateSchedule or there is none
  (no optimizer)."""
  schedule_type = tf_keras.optimizers.schedules.LearningRateSchedule
  for candidate in (getattr(optimizer, "_learning_rate", None),
                    getattr(optimizer, "_hyper", {}).get("learning_rate")):
    if isinstance(candidate, schedule_type):
      return None
  return getattr(optimizer, "lr", None)


class EarlyStop(tf_keras.callbacks.Callback):
  """Stops the run when ``patience`` evaluations in a row (the Recorder's epochs) did not
  beat the best eval loss, and keeps ``snapshot()`` (the weights) of the best one: Keras
  ``EarlyStopping(patience=..., restore_best_weights=True)`` (tf_keras/src/callbacks.py,
  min_delta 0) on the trainer's own evaluations. A resumed run starts from the best eval
  loss its checkpoint recorded, without those weights (:meth:`record` says so).
  Runs after the Recorder."""

  def __init__(self, state: RunState, patience: int, snapshot: Callable[[], list]):
    super().__init__()
    self.state, self.patience, self.snapshot = state, patience, snapshot
    self.best, self.best_epoch, self.best_step = math.inf, 0, 0
    self.weights: Optional[list] = None
    self.wait = 0
    self._seen = 0
    self._take(resumed=True)

  def _take(self, resumed: bool = False):
    for epoch in self.state.epochs[self._seen:]:
      loss = epoch.get("eval_loss")
      if loss is not None and math.isfinite(loss) and loss < self.best:
        self.best, self.best_epoch, self.best_step = loss, epoch["epoch"], epoch["step"]
        self.weights = None if resumed else self.snapshot()
        self.wait = 0
      else:
        self.wait += 1
    self._seen = len(self.state.epochs)

  def on_train_batch_end(self, batch, logs=None):
    st = self.state
    if len(st.epochs) == self._seen or st.diverged:
      return
    self._take()
    if self.patience and self.wait >= self.patience and st.step < st.total:
      st.early_stopped = True
      self.model.stop_training = True

  def best_weights(self) -> Optional[list]:
    """The best evaluation's weights when they are not the last ones, else None."""
    if self.weights is None or self.best_step == self.state.step:
      return None
    return self.weights

  def record(self) -> dict:
    """history.json ``early_stopping``."""
    return {"patience": self.patience, "stopped": self.state.early_stopped,
            "best_epoch": self.best_epoch, "best_step": self.best_step,
            "best_eval_loss": self.best if math.isfinite(self.best) else None,
            "restored_best": self.best_weights() is not None,
            "stopped_by_callback": self.state.stopped_by or None}


class UserStop(tf_keras.callbacks.Callback):
  """Follows one user callback (``name``, its class) and notes it in
  ``state.stopped_by`` when it is the first to set ``model.stop_training`` before the
  run's end (Keras EarlyStopping, TerminateOnNaN, ...) other than the trainer's own
  stops (divergence, EarlyStop), which record themselves."""

  def __init__(self, state: RunState, name: str):
    super().__init__()
    self.state, self.name = state, name

  def _check(self, *args, **kwargs):
    del args, kwargs
    st = self.state
    if (self.model.stop_training and not st.stopped_by and not st.early_stopped
        and not st.diverged and st.step < st.total):
      st.stopped_by = self.name

  on_train_batch_begin = on_train_batch_end = on_epoch_begin = on_epoch_end = _check
  on_test_end = _check


class Checkpointer(tf_keras.callbacks.Callback):
  """Every ``every`` steps (not at the end), ``save(step)`` on the chief. A step that
  ends an epoch is saved at ``on_epoch_end``, after the user's callbacks (the
  Checkpointer is the last callback): what their ``on_epoch_end`` changed (e.g.
  ReduceLROnPlateau's cut of the rate) is in the checkpoint, as in the uninterrupted run,
  whose next epoch starts with it."""

  def __init__(self, state: RunState, every: int, save: Callable[[int], None], chief: bool):
    super().__init__()
    self.state, self.every, self.save, self.chief = state, every, save, chief

  def _save(self, step: int):
    if (self.every and step % self.every == 0 and step < self.state.total
        and not self.state.diverged and self.chief):
      self.save(step)

  def on_train_batch_end(self, batch, logs=None):
    if self.state.step % self.state.steps_per_epoch:
      self._save(self.state.step)

  def on_epoch_end(self, epoch, logs=None):
    if self.state.step % self.state.steps_per_epoch == 0:
      self._save(self.state.step)


class Progress(tf_keras.callbacks.Callback):
  """The only place that prints training progress, through
  :class:`~tfx_parallel.components.common.progress.ProgressReporter`: on a terminal one
  updating line, elsewhere a line per 10% of the steps. Each history record updates it
  (loss, the latest epoch's eval loss, ex/s); a divergence is a line of its own."""

  def __init__(self, state: RunState, stop_on_divergence: bool, stream=None,
               is_tty: Optional[bool] = None):
    super().__init__()
    self.state = state
    self.stop_on_divergence = stop_on_divergence
    self.reporter = progress.ProgressReporter(
        total=max(state.total, state.start_step), label="[trainer]", stream=stream,
        is_tty=is_tty, initial=state.start_step)
    self._records = len(state.records)
    self._diverged = False

  def on_train_batch_end(self, batch, logs=None):
    st = self.state
    for record in st.records[self._records:]:
      metrics = {"loss": record["loss"]}
      if st.epochs:
        metrics["eval_loss"] = st.epochs[-1]["eval_loss"]
      metrics["examples_per_sec"] = record["examples_per_sec"]
      self.reporter.update(min(record["step"], self.reporter.total), **metrics)
    self._records = len(st.records)
    if st.diverged and not self._diverged:
      self._diverged = True
      self.reporter.message(
          f"[trainer] training diverged at step {st.step}: {st.diverged_reason}"
          + ("; stopping early" if self.stop_on_divergence else ""))

  def on_train_end(self, logs=None):
    self.reporter.close()


# The keyword arguments a LossFunctionWrapper passes its function: private in tf_keras
# (v2.16.0 tf_keras/losses.py:250 ``self._fn_kwargs = kwargs``, the wheel's
# tf_keras/src/losses.py:250); pinned by tests/test_trainer_tf_keras_fields.py.
FN_KWARGS = "_fn_kwargs"


def per_example_loss(loss):
  """A per-example version of a tf_keras loss (for evaluation outside ``fit``)."""
  from tf_keras.src import losses as losses_lib  # pylint: disable=g-import-not-at-top
  if type(loss) is losses_lib.LossFunctionWrapper:  # pylint: disable=unidiomatic-typecheck
    # A user's function, wrapped as compile wraps it (user_module.make_loss).
    if not hasattr(loss, FN_KWARGS):
      raise TfKerasFieldError(f"LossFunctionWrapper.{FN_KWARGS}",
                              f"on loss {loss.name!r}, evaluated per example",
                              "evaluation of a loss function",
                              "or pass a tf_keras.losses.Loss subclass as the loss")
    return losses_lib.LossFunctionWrapper(loss.fn, reduction="none", name=loss.name,
                                          **getattr(loss, FN_KWARGS))
  if isinstance(loss, tf_keras.losses.Loss):
    config = dict(loss.get_config(), reduction="none")
    return type(loss).from_config(config)
  return loss


def make_evaluator(model, loss, dataset, callbacks: Sequence = (), sums=None
                   ) -> Callable[[], Tuple[float, float]]:
  """A function returning (the mean per-example loss of ``model`` over ``dataset``
  ((inputs, labels) batches), its standard error), traced once. Runs outside ``fit``
  (no collectives). The standard error (the per-example losses' spread / sqrt(count))
  tells the divergence rule how much a small eval set's loss moves by noise.

  Each evaluation drives ``callbacks``' test hooks as ``model.evaluate`` would:
  ``on_test_begin``, per batch ``on_test_batch_begin(i)`` and ``on_test_batch_end(i,
  {"loss": mean so far})``, and ``on_test_end({"loss": mean})``; the same on every
  layout, since every engine evaluates through here (``evaluate(drive_callbacks=False)``
  evaluates without them: the untrained model's loss is not a user's evaluation).

  ``sums(per_example)``, when given, makes the per-batch ``(x, y) -> (sum, sum of
  squares, count)`` in place of ``model``'s (the mesh evaluates on its own devices:
  mesh_runtime.MeshTrainer.evaluation_sums)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  per_example = per_example_loss(loss)
  callback_list = tf_keras.callbacks.CallbackList(list(callbacks)) if callbacks else None

  @tf.function
  def batch_sums(x, y):
    values = tf.cast(per_example(y, model(x, training=False)), tf.float64)
    return tf.reduce_sum(values), tf.reduce_sum(tf.square(values)), tf.size(values)

  if sums is not None:
    batch_sums = sums(per_example)

  def evaluate(drive_callbacks: bool = True) -> Tuple[float, float]:
    hooks = callback_list if drive_callbacks else None
    total, squares, count = 0.0, 0.0, 0
    if hooks:
      hooks.on_test_begin()
    for i, (x, y) in enumerate(dataset):
      if hooks:
        hooks.on_test_batch_begin(i)
      s, s2, n = batch_sums(x, y)
      total += float(s)
      squares += float(s2)
      count += int(n)
      if hooks:
        hooks.on_test_batch_end(i, {"loss": total / count if count else math.nan})
    mean = total / count if count else math.nan
    if hooks:
      hooks.on_test_end({"loss": mean})
    if not count:
      return math.nan, math.nan
    return mean, divergence.standard_error(total, squares, count)

  return evaluate
