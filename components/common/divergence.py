"""When has a training run diverged? One rule, used by the trainer to stop a run early
(``stop_on_divergence``, distributed_trainer/engines/callbacks.py) and by ConvergenceEvaluator to
label it (convergence_evaluator/convergence.py). Pure Python, no TensorFlow.

A run has diverged when, over the losses seen so far (training records in step order,
eval losses in epoch order):

1. a loss is NaN or +-inf;
2. a loss is impossible: below 0 (by more than float rounding) while the loss function
   cannot be negative (MSE, MAE, cross-entropies, Huber, ...: :data:`NON_NEGATIVE_LOSSES`);
   e.g. a "negative cross-entropy", which only float32 overflow produces;
3. the loss exploded: a loss exceeds ``explode_factor`` (default 100) x the run's
   starting point: the eval loss of the untrained model, measured by the trainer before
   its first step (history.json ``initial_eval_loss``); without it, the larger of the
   first positive training loss and the first eval loss. (Not the first training record:
   a learning rate of 10,000 blows the loss up to 1e18 within the 10 steps that record
   averages, and a first record of 0 would make every loss "exploded". Not the trivial
   predictor: an untrained regression model on raw labels starts far above the label
   variance and is not diverging.)
4. the eval loss rose from one evaluation to the next by more than ``rise_tolerance``
   (default 0.5 = 50 %) **and** by more than ``rise_noise_z`` (default 3) standard
   errors of the two eval losses, each the spread of the per-example losses over the
   eval rows / sqrt(rows) (when the trainer recorded it: ``eval_loss_se`` of
   history.json's epochs), **and** the training loss at those two evaluations (the
   epochs' ``train_loss``) rose by more than ``rise_tolerance`` too. On a large eval set
   the standard error is small and 50 % decides; on a small one the noise of a few rows
   must be exceeded (a 69-row eval set whose loss rose 63 % in one interval of an
   otherwise healthy run is noise; a rise of several x is not).

An eval loss that rises while the training loss falls is not divergence but
overfitting (:func:`overfitting`): the optimizer works, the model learns the train
split's noise. The trainer keeps going (or stops early) and exports the weights of the
best evaluation; the evaluator labels the run ``overfitting``.

Keras's ``TerminateOnNaN`` covers only rule 1 (tf_keras/callbacks.py); rules 2-4 catch
the runs that overflow into finite garbage first.
"""
import math
from typing import Iterable, List, Optional, Sequence

EXPLODE_FACTOR = 100.0
RISE_TOLERANCE = 0.5
RISE_NOISE_Z = 3.0
# Overfitting: the last eval loss above the best one by more than this fraction (and by
# more than rise_noise_z standard errors) while the training loss fell. The evaluator's
# plateau_tolerance, whose default is the same 2 %.
OVERFIT_TOLERANCE = 0.02
NEGATIVE_TOLERANCE = 1e-6  # A loss of -1e-9 is float rounding of 0, not a broken run.

# tf_keras loss classes (tf_keras/losses.py) whose value is >= 0 for any input.
NON_NEGATIVE_LOSSES = frozenset({
    "MeanSquaredError", "MeanAbsoluteError", "MeanSquaredLogarithmicError",
    "MeanAbsolutePercentageError", "Huber", "LogCosh", "BinaryCrossentropy",
    "BinaryFocalCrossentropy", "CategoricalCrossentropy", "CategoricalFocalCrossentropy",
    "SparseCategoricalCrossentropy", "KLDivergence", "Hinge", "SquaredHinge",
    "CategoricalHinge",
    # Function names (a loss given as a function, or tf_keras.losses.get(name)).
    "mean_squared_error", "mse", "mean_absolute_error", "mae", "binary_crossentropy",
    "categorical_crossentropy", "sparse_categorical_crossentropy", "huber", "log_cosh",
})


def is_non_negative(loss_class: Optional[str]) -> bool:
  """True if the loss named ``loss_class`` (class or function name) is never negative."""
  return bool(loss_class) and loss_class in NON_NEGATIVE_LOSSES


def _first_positive(values: Iterable[float]) -> float:
  for v in values:
    if math.isfinite(v) and v > 0:
      return v
  return math.nan


def standard_error(total: float, total_squares: float, count: int) -> float:
  """The standard error of a mean of ``count`` values with the given sum and sum of
  squares (sample standard deviation / sqrt(count)); NaN for fewer than 2 values."""
  if count < 2:
    return math.nan
  mean = total / count
  variance = max(total_squares / count - mean * mean, 0.0) * count / (count - 1)
  return math.sqrt(variance / count)


def rise_is_noise(previous: float, current: float, previous_se: Optional[float],
                  current_se: Optional[float], rise_noise_z: float = RISE_NOISE_Z) -> bool:
  """True when ``current - previous`` is within ``rise_noise_z`` combined standard
  errors (an unknown standard error counts as 0: the rule of rise_tolerance alone)."""
  errors = [e for e in (previous_se, current_se)
            if e is not None and math.isfinite(e) and e > 0]
  return current - previous <= rise_noise_z * math.sqrt(sum(e * e for e in errors))


def reason(train_losses: Sequence[float], eval_losses: Sequence[float] = (),
           non_negative: bool = True, explode_factor: float = EXPLODE_FACTOR,
           rise_tolerance: float = RISE_TOLERANCE,
           eval_errors: Sequence[Optional[float]] = (),
           rise_noise_z: float = RISE_NOISE_Z, start: Optional[float] = None,
           eval_train_losses: Sequence[Optional[float]] = ()) -> str:
  """Why the run diverged (module docstring, rules 1-4), or "" if it has not.
  ``eval_errors``: the standard error of each eval loss (None or missing: unknown).
  ``start``: the untrained model's eval loss (None or not > 0: unknown).
  ``eval_train_losses``: the training loss at each evaluation (None or missing:
  unknown, and rule 4 does not fire: an eval rise alone is not divergence)."""
  named = (("training loss", list(train_losses)), ("eval loss", list(eval_losses)))
  for name, values in named:
    for i, v in enumerate(values):
      if not math.isfinite(v):
        return f"{name} is {v} ({_where(name, i)})"
  if non_negative:
    for name, values in named:
      for i, v in enumerate(values):
        if v < -NEGATIVE_TOLERANCE:
          return (f"{name} is {v:.6g} ({_where(name, i)}), below 0, which this loss "
                  f"cannot be: the values overflowed")
  if start is not None and math.isfinite(start) and start > 0:
    starts = [start]
  else:
    starts = [v for v in (_first_positive(named[0][1]), _first_positive(named[1][1]))
              if math.isfinite(v)]
  if starts:
    start = max(starts)
    for name, values in named:
      for i, v in enumerate(values):
        if v > explode_factor * start:
          return (f"{name} is {v:.6g} ({_where(name, i)}), more than {explode_factor:g} x "
                  f"the starting loss {start:.6g}: the loss exploded")
  evals = named[1][1]
  errors = _padded(eval_errors, len(evals))
  trains = _padded(eval_train_losses, len(evals))
  for i in range(1, len(evals)):
    previous, current = evals[i - 1], evals[i]
    train_rise = _rise(trains[i - 1], trains[i])
    if (previous > 0 and (current - previous) / previous > rise_tolerance
        and not rise_is_noise(previous, current, errors[i - 1], errors[i], rise_noise_z)
        and train_rise > rise_tolerance):
      known = [e for e in errors[i - 1:i + 1] if e is not None and math.isfinite(e)]
      noise = (f" and more than {rise_noise_z:g} standard errors of the eval loss "
               f"(+-{max(known):.3g})" if known else "")
      return (f"eval loss rose {100 * (current / previous - 1):.0f} % in epoch {i + 1} "
              f"({previous:.6g} -> {current:.6g}), more than rise_tolerance "
              f"{100 * rise_tolerance:g} %{noise}, and the training loss with it "
              f"(+{100 * train_rise:.0f} %, {trains[i - 1]:.6g} -> {trains[i]:.6g})")
  return ""


def _padded(values: Sequence[Optional[float]], n: int) -> List[Optional[float]]:
  return (list(values) + [None] * n)[:n]


def _rise(previous: Optional[float], current: Optional[float]) -> float:
  """(current - previous) / previous; inf from 0 to a positive loss; NaN when either is
  unknown or previous is negative."""
  if (previous is None or current is None or not math.isfinite(previous)
      or not math.isfinite(current) or previous < 0):
    return math.nan
  if previous == 0:
    return math.inf if current > 0 else 0.0
  return (current - previous) / previous


def overfitting(eval_losses: Sequence[float], eval_train_losses: Sequence[Optional[float]],
                eval_errors: Sequence[Optional[float]] = (),
                tolerance: float = OVERFIT_TOLERANCE,
                rise_noise_z: float = RISE_NOISE_Z) -> str:
  """Why the run overfits, or "": the last eval loss is above the best earlier one by
  more than ``tolerance`` (relative) and by more than ``rise_noise_z`` standard errors,
  while the training loss at the last evaluation is below the one at the best.
  ``eval_train_losses``: the training loss at each evaluation (unknown: not judged)."""
  evals = list(eval_losses)
  if len(evals) < 2 or not math.isfinite(evals[-1]):
    return ""
  finite = [(v, i) for i, v in enumerate(evals[:-1]) if math.isfinite(v)]
  if not finite:
    return ""
  best, b = min(finite)
  last = evals[-1]
  errors = _padded(eval_errors, len(evals))
  trains = _padded(eval_train_losses, len(evals))
  rise, train_change = _rise(best, last), _rise(trains[b], trains[-1])
  if not (rise > tolerance and train_change < 0
          and not rise_is_noise(best, last, errors[b], errors[-1], rise_noise_z)):
    return ""
  return (f"the eval loss rose {100 * rise:.1f} % from its best {best:.6g} (evaluation "
          f"{b + 1}) to {last:.6g} while the training loss fell {100 * -train_change:.1f} % "
          f"({trains[b]:.6g} -> {trains[-1]:.6g}): the model fits the train split's "
          f"noise")


def _where(name: str, index: int) -> str:
  return f"epoch {index + 1}" if name == "eval loss" else f"record {index + 1}"


class Monitor:
  """The rule applied as a run goes: feed each training loss and eval loss; a non-empty
  return value is the reason the run diverged (the first one found)."""

  def __init__(self, non_negative: bool = True, explode_factor: float = EXPLODE_FACTOR,
               rise_tolerance: float = RISE_TOLERANCE, rise_noise_z: float = RISE_NOISE_Z,
               start: Optional[float] = None):
    self.non_negative = non_negative
    self.start = start
    self.explode_factor = explode_factor
    self.rise_tolerance = rise_tolerance
    self.rise_noise_z = rise_noise_z
    self.train: List[float] = []
    self.evals: List[float] = []
    self.eval_errors: List[Optional[float]] = []
    self.eval_train: List[Optional[float]] = []
    self.why = ""

  def _check(self) -> str:
    if not self.why:
      self.why = reason(self.train, self.evals, self.non_negative, self.explode_factor,
                        self.rise_tolerance, self.eval_errors, self.rise_noise_z,
                        self.start, self.eval_train)
    return self.why

  def add_train(self, loss: float) -> str:
    # The rule needs the first positive training loss and the latest one: keep those.
    loss = float(loss)
    if self.train and math.isfinite(self.train[0]) and self.train[0] > 0:
      self.train = [self.train[0], loss]
    else:
      self.train = [loss]
    return self._check()

  def add_eval(self, loss: float, standard_error: Optional[float] = None,
               train_loss: Optional[float] = None) -> str:
    """``train_loss``: the training loss at this evaluation (rule 4 needs it)."""
    self.evals.append(float(loss))
    self.eval_errors.append(standard_error)
    self.eval_train.append(train_loss)
    return self._check()
