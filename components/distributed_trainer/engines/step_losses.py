"""The exact loss of every step that tf_keras ``fit`` runs, on every ``tf.distribute`` layout.

``fit`` hands its callbacks the compiled loss metric's running mean since the start of
``fit`` (a float32 ``Mean``: tf_keras/src/engine/compile_utils.py
``LossesContainer.__call__`` updates it with each step's loss weighted by the batch
size), and only for the last step of each execution of ``steps_per_execution`` steps
(tf_keras/src/engine/training.py ``make_train_function``: ``for _ in
tf.range(steps_per_execution): outputs = step_function(...)``, the last outputs
returned). Recovering a step's loss from two running means is exact for neither: the
steps in between are averaged, and the float32 difference of two sums loses the digits
(an overflowing run's losses came back negative).

:class:`StepLosses` takes each step's loss where the step computes it instead. It wraps
the model's ``compute_loss`` (the loss ``Model.train_step`` minimises, compiled loss plus
regularisation, training.py ``Model.compute_loss``) and ``train_step``: after each step,
the replicas' losses are summed (``ReplicaContext.all_reduce``; ``compute_loss`` returns
each replica's mean divided by the number of replicas, compile_utils.py
``scale_loss_for_distribution``, so the sum is the mean over the global batch) and
shifted into a ``[steps_per_execution]`` buffer on the devices. :meth:`last` reads the
buffer once per execution, after ``fit`` has handed the callbacks the execution's logs.
"""
import threading
from typing import List

import tensorflow as tf


class StepLosses:
  """Records the exact loss of each step of ``model.fit``; create it under the strategy's
  scope, after ``model.compile`` and before ``fit``.

  Args:
    model: the compiled tf_keras model (its ``train_step`` and ``compute_loss`` are
      wrapped on the instance; a user's override of either is kept and called).
    steps_per_execution: the model's ``steps_per_execution`` (the buffer's length).
  """

  def __init__(self, model, steps_per_execution: int):
    self.steps_per_execution = int(steps_per_execution)
    # One copy per replica (each writes its own; every copy holds the same all-reduced
    # losses), read from the first replica's (values.py SyncOnReadVariable
    # _get_cross_replica: ONLY_FIRST_REPLICA reads the primary, no collective).
    self._buffer = tf.Variable(
        tf.fill([self.steps_per_execution], float("nan")), trainable=False,
        name="tfxp_step_losses", synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    # Replicas trace train_step in threads of their own (MirroredStrategy): each
    # collects the loss its own compute_loss call returned.
    self._local = threading.local()
    user_compute_loss, user_train_step = model.compute_loss, model.train_step
    name = model.name

    def compute_loss(*args, **kwargs):
      loss = user_compute_loss(*args, **kwargs)
      seen = getattr(self._local, "seen", None)
      if seen is not None:
        seen.append(loss)
      return loss

    def train_step(data):
      self._local.seen = []
      try:
        logs = user_train_step(data)
      finally:
        seen, self._local.seen = self._local.seen, None
      if len(seen) != 1:
        raise ValueError(
            f"model {name!r}: train_step called compute_loss {len(seen)} times in one "
            f"step; the trainer records each step's loss from its one compute_loss call "
            f"(as tf_keras Model.train_step makes it). Call self.compute_loss(x, y, "
            f"y_pred, sample_weight) once in your train_step.")
      loss = tf.distribute.get_replica_context().all_reduce(
          tf.distribute.ReduceOp.SUM, tf.cast(seen[0], tf.float32))
      self._buffer.assign(tf.concat([self._buffer[1:], tf.reshape(loss, [1])], 0))
      return logs

    model.compute_loss = compute_loss
    model.train_step = train_step

  def last(self, n: int) -> List[float]:
    """The exact losses of the last ``n`` steps (``n <= steps_per_execution``), oldest
    first: one read of the buffer."""
    if not 0 < n <= self.steps_per_execution:
      raise ValueError(f"n: between 1 and {self.steps_per_execution}. Received: {n}")
    return [float(x) for x in self._buffer.numpy()[-n:]]
