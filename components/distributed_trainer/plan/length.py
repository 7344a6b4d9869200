"""How long a run trains: the steps the user set, or a length chosen from the data.

* config ``steps`` > 0: exactly that many steps;
* else config ``epochs`` > 0: exactly that many passes over the train split;
* else (the default, ``epochs: 0``) the automatic length: at least :data:`AUTO_EPOCHS`
  passes and at least ``min_steps`` steps, whichever is longer, and the run stops early
  when the eval loss has not improved on its best for ``patience`` evaluations in a row;
  the model then keeps the weights of its best evaluation (Keras ``EarlyStopping`` with
  ``restore_best_weights=True``, tf_keras/src/callbacks.py; there ``patience`` counts
  epochs, here the trainer's evaluations, one per pass over the train split).

Why a floor on steps: 5 passes over a 300-row CSV at batch 64 are 25 steps, far too few
for a model to learn (R^2 -4.71 on the issue's 406-row file, 0.8 reachable). On a file
shaped like it (tests/test_trainer_length.py, 338 train rows) the built-in CSV trainer
reached eval R^2 0.92 after 500 steps, still improving, 0.95 after 1,000, and stopped
early at 1,980 of 2,000 (best 0.959 at step 1,880); Ridge gets 0.877. The floor (1,000 by
default) lengthens only data under 12,800 rows at batch 64 (5 passes of 200 steps);
early stopping ends the longer run once the eval loss stops improving.
"""
import dataclasses
from typing import Any, Dict

AUTO_EPOCHS = 5


@dataclasses.dataclass(frozen=True)
class Length:
  """The chosen length of a run."""
  total_steps: int
  steps_per_epoch: int
  patience: int   # Evaluations without a better eval loss before stopping; 0: never.
  automatic: bool
  reason: str

  def as_record(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def steps_per_epoch(train_rows: int, batch_size: int) -> int:
  return max(1, int(train_rows) // int(batch_size))


def choose(steps: int, epochs: int, min_steps: int, patience: int, train_rows: int,
           batch_size: int) -> Length:
  """The length of a run (module docstring); ``reason`` is the console's sentence."""
  spe = steps_per_epoch(train_rows, batch_size)
  per_epoch = f"{spe} step(s) per epoch ({train_rows:,} train rows / batch {batch_size})"
  if steps:
    return Length(steps, spe, 0, False, f"{steps} steps, as set (steps); {per_epoch}")
  if epochs:
    return Length(epochs * spe, spe, 0, False,
                  f"{epochs * spe} steps = {epochs} epoch(s) as set (epochs) x {per_epoch}")
  total = max(AUTO_EPOCHS * spe, int(min_steps))
  if total > AUTO_EPOCHS * spe:
    why = (f"the floor min_steps {min_steps} (= {total / spe:.3g} epochs), as "
           f"{AUTO_EPOCHS} epochs would be only {AUTO_EPOCHS * spe} steps")
  else:
    why = f"{AUTO_EPOCHS} epochs, at least min_steps {min_steps}"
  stop = (f"; stops early when the eval loss has not improved for {patience} evaluations "
          f"in a row, keeping the best weights" if patience else "")
  return Length(total, spe, int(patience), True,
                f"{total} steps: {why}; {per_epoch}{stop}. Set epochs or steps to fix "
                f"the length")

