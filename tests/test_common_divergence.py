"""The divergence rule shared by the trainer's early stop and the evaluator's state."""
import math

from tfx_parallel.components.common import divergence


def test_finite_falling_losses_have_not_diverged():
  assert divergence.reason([0.7, 0.5, 0.4], [0.6, 0.45, 0.44]) == ""


def test_each_rule_names_itself():
  assert "nan" in divergence.reason([0.7, math.nan])
  assert "inf" in divergence.reason([0.7], [math.inf])
  assert "below 0" in divergence.reason([0.7, -17_179_869_184.0])
  assert divergence.reason([0.7, -1e-9]) == ""  # Rounding of a loss of 0.
  assert divergence.reason([0.7, -3.0], non_negative=False) == ""
  assert "exploded" in divergence.reason([0.7, 71.0])
  assert divergence.reason([0.7, 69.0]) == ""
  assert "rose" in divergence.reason([0.7], [0.5, 0.8], eval_train_losses=[0.4, 0.9])
  assert divergence.reason([0.7], [0.5, 0.74], eval_train_losses=[0.4, 0.9]) == ""


def test_a_first_loss_of_0_is_not_the_starting_point():
  # 100 x 0 would call every later loss "exploded"; the first positive loss is the start.
  assert divergence.reason([0.0, 0.6, 0.5]) == ""
  assert "exploded" in divergence.reason([0.0, 0.6, 61.0])


def test_the_monitor_stops_at_the_first_reason_and_keeps_it():
  monitor = divergence.Monitor()
  assert monitor.add_train(0.0) == "" and monitor.add_train(0.7) == ""
  assert monitor.add_eval(0.6) == "" and monitor.add_train(0.5) == ""
  why = monitor.add_train(-17_179_869_184.0)
  assert "below 0" in why
  assert monitor.add_train(0.4) == why


def test_loss_classes_that_cannot_be_negative():
  assert divergence.is_non_negative("BinaryCrossentropy")
  assert divergence.is_non_negative("MeanSquaredError")
  assert not divergence.is_non_negative("CosineSimilarity")
  assert not divergence.is_non_negative("")


def test_a_rise_within_the_eval_sets_noise_is_not_divergence():
  # 69 eval rows (the 406-row file): +63 % in one interval, standard errors 5 and
  # 8.1 (3 x their combined 9.5 = 28.6 > the rise of 12.6): noise, not divergence.
  rising = [25.0, 60.0]  # The training loss at the two evaluations, rising with them.
  assert divergence.reason([30.0, 25.0], [20.0, 32.6], eval_errors=[5.0, 8.1],
                           eval_train_losses=rising) == ""
  # Without standard errors (a history of an older trainer): rise_tolerance alone.
  assert "rose 63 %" in divergence.reason([30.0, 25.0], [20.0, 32.6],
                                          eval_train_losses=rising)
  # A rise of 5x stands out of the same noise.
  why = divergence.reason([30.0, 25.0], [20.0, 100.0], eval_errors=[5.0, 25.0],
                          eval_train_losses=rising)
  assert "rose 400 %" in why and "3 standard errors" in why
  # A large eval set: tiny standard errors, so rise_tolerance decides as before.
  assert "rose 58 %" in divergence.reason([0.7], [0.6, 0.95], eval_errors=[0.004, 0.006],
                                          eval_train_losses=[0.5, 0.9])


def test_an_eval_loss_rising_while_the_training_loss_falls_is_overfitting_not_divergence():
  """#47: a 1,316-row file's eval loss rose 160 % in epoch 2 while the training loss fell,
  and the run was called "diverged". Divergence needs the training loss to blow up; an
  eval loss rising alone is overfitting."""
  evals, falling = [0.5, 1.3], [0.6, 0.3]
  assert divergence.reason([0.7, 0.3], evals, eval_train_losses=falling) == ""
  assert divergence.reason([0.7, 0.3], evals) == ""  # Training loss unknown: not judged.
  assert "training loss with it" in divergence.reason([0.7, 0.9], evals,
                                                      eval_train_losses=[0.6, 1.2])
  why = divergence.overfitting(evals, falling)
  assert "rose 160.0 % from its best 0.5 (evaluation 1)" in why
  assert "training loss fell 50.0 %" in why
  # The best is any earlier evaluation, not the one before the last.
  assert "evaluation 2" in divergence.overfitting([0.9, 0.4, 0.45, 0.6], [1.0, 0.5, 0.4, 0.3])
  # Not overfitting: the training loss rose too, the rise is within the noise or the
  # tolerance, or the last evaluation is the best.
  assert divergence.overfitting(evals, [0.6, 0.7]) == ""
  assert divergence.overfitting(evals, falling, eval_errors=[0.2, 0.2]) == ""
  assert divergence.overfitting([0.5, 0.505], falling) == ""
  assert divergence.overfitting([0.5, 0.4], falling) == ""
  # The trainer's monitor: the same eval rise with a falling training loss goes on.
  monitor = divergence.Monitor()
  monitor.add_train(0.7)
  assert monitor.add_eval(0.5, None, 0.6) == "" and monitor.add_eval(1.3, None, 0.3) == ""
  assert "rose" in monitor.add_eval(3.0, None, 0.9)


def test_standard_error_of_a_mean():
  values = [1.0, 2.0, 3.0, 4.0]
  se = divergence.standard_error(sum(values), sum(v * v for v in values), len(values))
  assert math.isclose(se, math.sqrt(5 / 3 / 4))  # sample variance 5/3, over n = 4.
  assert math.isnan(divergence.standard_error(1.0, 1.0, 1))


def test_the_untrained_models_eval_loss_is_the_start_when_known():
  # Learning rate 10,000 (the 406-row file, measured): the first record, the mean
  # of steps 1-10, is already 1.6e18, and the eval losses are noise-sized to each other.
  train, evals, errors = [1.64e18, 2.6e16], [2.9e15, 1.95e16], [2.5e15, 1.06e16]
  assert divergence.reason(train, evals, eval_errors=errors) == ""  # No start: missed.
  why = divergence.reason(train, evals, eval_errors=errors, start=612.0)
  assert "record 1" in why and "the starting loss 612" in why and "exploded" in why
  # The same start does not flag a healthy run far below it.
  assert divergence.reason([300.0, 40.0], [250.0, 30.0], start=612.0) == ""
  monitor = divergence.Monitor(start=612.0)
  assert "exploded" in monitor.add_train(1.64e18)
