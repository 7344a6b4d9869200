"""Keras epochs of a training run: which epochs ``fit`` runs and where each execution
ends; pure functions, shared by both engines so that every layout drives the callbacks
at the same steps.

The run's epochs are the trainer's (``steps_per_epoch`` steps, from plan/length.py);
the last one is shorter when the run's length is not a whole number of epochs (config
``steps``, or the ``min_steps`` floor), and a run resumed from a checkpoint mid-epoch
starts inside its first one. An execution (``steps_per_execution`` steps in one call
into TensorFlow) ends at the next multiple of ``k`` steps, at the epoch's end and at the
run's end, whichever comes first: records and checkpoints stay on multiples of
``log_every`` and ``checkpoint_every`` (config.execution_steps() makes ``k`` divide
both), and every epoch ends on an execution boundary, where its evaluation runs.
"""
from typing import List, Tuple


def keras_epochs(start_step: int, total: int, steps_per_epoch: int) -> Tuple[int, int, int]:
  """(initial_epoch, epochs, first batch): ``fit(initial_epoch=, epochs=)`` over steps
  ``start_step`` .. ``total`` - 1, and the batch index within ``initial_epoch`` where
  the run starts (0 unless resumed mid-epoch)."""
  first = start_step // steps_per_epoch
  return first, -(-total // steps_per_epoch), start_step - first * steps_per_epoch


def execution_length(step: int, total: int, steps_per_epoch: int, k: int) -> int:
  """The steps of the execution that starts after ``step`` steps (module docstring)."""
  epoch_end = (step // steps_per_epoch + 1) * steps_per_epoch
  return max(1, min(k - step % k, epoch_end - step, total - step))


def execution_lengths(start_step: int, total: int, steps_per_epoch: int, k: int) -> List[int]:
  """Every execution's length from ``start_step`` to ``total``, in order."""
  out, step = [], start_step
  while step < total:
    out.append(execution_length(step, total, steps_per_epoch, k))
    step += out[-1]
  return out
