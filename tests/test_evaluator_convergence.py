"""Convergence analysis of training histories: targets, rates, states, parameter error."""
import json
import math

import numpy as np
import pytest

import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
from tfx_parallel.components.convergence_evaluator import convergence
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import testing


def _analyze(losses, target_loss=None, target_fraction=0.01, window=5, rise=0.5, **kwargs):
  history = testing.linear_history(losses, **kwargs)
  curves = convergence.curves_from_history(history)
  return convergence.analyze(curves, target_loss, target_fraction, window, rise,
                             flagged_diverged=history["diverged"])


def test_exponential_decay_converges_with_exact_rate_and_target_step():
  losses = 10.0 * np.exp(-0.01 * np.arange(1, 101) * 10)  # records every 10 steps.
  summary = _analyze(losses)
  assert summary.state == P.CONVERGED
  assert summary.convergence_rate == pytest.approx(-0.01, rel=1e-9)
  assert summary.initial_loss == pytest.approx(losses[0])
  assert summary.final_loss == pytest.approx(losses[-1])
  assert summary.best_loss == pytest.approx(losses[-1])
  target = 0.01 * losses[0]
  assert summary.target_loss == pytest.approx(target)
  first = int(np.flatnonzero(losses <= target)[0])
  assert summary.steps_to_target == (first + 1) * 10
  assert summary.seconds_to_target == pytest.approx((first + 1) * 10 * 0.01)
  assert summary.tail_change == pytest.approx(math.expm1(-0.01 * 40))


def test_absolute_target_never_reached_gives_minus_one_and_plateau():
  losses = [4.0, 2.0, 1.5, 1.2, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1]
  summary = _analyze(losses, target_loss=0.5)
  assert summary.steps_to_target == -1
  assert summary.seconds_to_target == -1.0
  assert summary.state == P.PLATEAUED
  assert summary.tail_change == pytest.approx(0.0, abs=1e-12)


def test_nan_loss_is_diverged_and_ignored_by_fits():
  losses = [4.0, 2.0, 1.0, float("nan"), float("inf")]
  summary = _analyze(losses)
  assert summary.state == P.DIVERGED
  assert summary.best_loss == 1.0
  assert summary.final_loss == math.inf
  # Fitted on the three finite records: ln halves every 10 steps.
  assert summary.convergence_rate == pytest.approx(-math.log(2) / 10)


def test_final_above_initial_is_diverged():
  summary = _analyze([1.0, 0.5, 0.8, 1.5, 3.0])
  assert summary.state == P.DIVERGED


def test_rising_tail_above_target_is_diverged_but_noise_below_target_is_not():
  falling_then_rising = [10.0, 5.0, 2.0, 1.0, 1.5, 2.5, 4.0, 6.0, 8.0]
  assert _analyze(falling_then_rising).state == P.DIVERGED
  noisy_at_floor = [10.0, 1.0, 0.01, 0.02, 0.01, 0.03, 0.05, 0.08]  # target 0.1.
  assert _analyze(noisy_at_floor).state == P.CONVERGED


def test_short_history_ending_below_target_is_converged():
  # The tail median (0.1) is above target 0.04, but the final loss is below it.
  assert _analyze([4.0, 1.0, 0.1, 0.02, 0.01]).state == P.CONVERGED
  # A noisy last record above target: the tail median still decides.
  assert _analyze([4.0, 0.03, 0.02, 0.03, 0.02, 0.05]).state == P.CONVERGED


def test_trainer_divergence_flag_wins():
  history = testing.linear_history([3.0, 2.0, 1.0])
  curves = convergence.curves_from_history(history)
  summary = convergence.analyze(curves, None, 0.5, 5, 0.5, flagged_diverged=True)
  assert summary.state == P.DIVERGED


def test_single_record_history():
  summary = _analyze([2.0])
  assert math.isnan(summary.convergence_rate)
  assert summary.tail_change == 0.0
  assert summary.state == P.PLATEAUED  # 2.0 > target 0.02.


def test_history_json_with_nan_literals_and_unsorted_records_parses():
  text = json.dumps({"records": [{"step": 20, "loss": float("nan")},
                                 {"step": 10, "loss": 1.0, "grad_norm": 2.0}],
                     "epochs": [{"epoch": 1, "step": 20, "train_loss": None,
                                 "eval_loss": float("inf")}]})
  curves = convergence.curves_from_history(json.loads(text))
  assert curves.step.tolist() == [10.0, 20.0]
  assert curves.loss[0] == 1.0 and math.isnan(curves.loss[1])
  assert math.isnan(curves.wall_time[0])  # Missing field.
  assert math.isnan(curves.epochs[0]["train_loss"])
  document = convergence.curves_document(
      curves, convergence.analyze(curves, None, 0.1, 5, 0.5))
  text = json.dumps(document, allow_nan=False)  # Strict JSON.
  assert json.loads(text)["records"]["loss"] == [1.0, None]
  assert json.loads(text)["steps_to_target"] is None


def test_empty_history_raises_naming_the_problem():
  with pytest.raises(ValueError, match="no records"):
    convergence.curves_from_history({"records": [], "layout": "single"})


def test_grad_norm_trend_is_linear_slope():
  summary = _analyze([5.0, 4.0, 3.0, 2.0], grad_norms=[4.0, 3.0, 2.0, 1.0])
  assert summary.grad_norm_trend == pytest.approx(-0.1)
  assert (summary.grad_norm_first, summary.grad_norm_last) == (4.0, 1.0)


def test_parameter_error():
  weights = {"kernel": [[1.0], [2.5], [0.0]], "bias": [2.75]}
  assert convergence.parameter_error(weights, [1.0, 2.0], 3.0) == (0.5, 0.25)
  assert convergence.parameter_error(None, [1.0], 3.0) == (-1.0, -1.0)
  assert convergence.parameter_error(weights, None, None) == (-1.0, -1.0)
  with pytest.raises(ValueError, match="1 kernel entries"):
    convergence.parameter_error({"kernel": [[1.0]], "bias": [0.0]}, [1.0, 2.0], 0.0)


# The taxi demo before issue 16 (mirrored x2, 5 epochs): a noisy training loss whose
# tail even rises, while the eval loss falls fast to the last epoch.
TAXI_LOSSES = [  # every 10 steps: history.json of that run, rounded
    260.6, 182.2, 156.1, 124.6, 899.1, 86.0, 68.6, 39.2, 60.8, 27.1, 29.2, 41.9, 26.3, 17.3,
    18.8, 48.3, 38.8, 19.5, 24.3, 20.2, 763.4, 28.7, 24.5, 21.7, 29.4, 19.1, 27.9, 213.4,
    20.4, 20.7, 534.7, 29.6, 34.7, 34.4, 24.9, 36.6, 18.6, 27.5, 315.8, 29.8, 30.4, 73.4,
    25.7, 24.4, 28.5, 24.9, 37.5, 21.6, 25.0, 22.7, 24.3, 23.1, 767.1, 23.7, 16.5, 20.5,
    18.8, 22.1, 14.1, 248.9, 26.4, 28.9, 23.9, 28.2, 17.0, 16.9, 766.0, 23.6, 17.7, 24.8,
    16.8, 17.4, 52.5, 22.5, 14.6, 19.1, 46.7, 25.3, 14.4, 25.6, 12.3, 16.0, 23.9, 20.4,
    17.8, 23.2, 766.9, 19.9, 12.4, 12.0, 10.8, 156.9, 16.2, 9.9]
TAXI_EVAL = [258.4, 154.4, 62.4, 32.4, 19.6]


def _with_eval(history, eval_losses, every=18):
  history["epochs"] = [{"epoch": i + 1, "step": (i + 1) * every * 10, "train_loss": 1.0,
                        "eval_loss": loss} for i, loss in enumerate(eval_losses)]
  return history


def test_falling_eval_loss_is_improving_not_plateaued():
  history = _with_eval(testing.linear_history(TAXI_LOSSES), TAXI_EVAL)
  curves = convergence.curves_from_history(history)
  summary = convergence.analyze(curves, None, 0.01, 5, 0.5)
  assert summary.tail_change > 0  # the noisy training tail alone would say "not falling"
  assert summary.eval_loss_change == pytest.approx(19.6 / 32.4 - 1)
  assert summary.state == P.IMPROVING


def test_flat_eval_loss_above_target_is_plateaued():
  history = _with_eval(testing.linear_history(TAXI_LOSSES), [258.4, 30.0, 19.9, 19.8])
  summary = convergence.analyze(convergence.curves_from_history(history), None, 0.01, 5, 0.5)
  assert summary.eval_loss_change == pytest.approx(19.8 / 19.9 - 1)
  assert summary.state == P.PLATEAUED
  # The tolerance decides: a 0.5 % fall per epoch counts as falling under 0.1 %.
  summary = convergence.analyze(convergence.curves_from_history(history), None, 0.01, 5,
                                0.5, plateau_tolerance=0.001)
  assert summary.state == P.IMPROVING


def test_without_eval_losses_the_training_tail_decides():
  still_falling = [4.0, 3.0, 2.5, 2.0, 1.6, 1.3, 1.1]  # target 0.04: far above
  summary = _analyze(still_falling)
  assert math.isnan(summary.eval_loss_change)
  assert summary.tail_change < -0.02 and summary.state == P.IMPROVING
  flat = [4.0, 2.0, 1.5, 1.2, 1.1, 1.1, 1.1, 1.1, 1.1, 1.1]
  assert _analyze(flat).state == P.PLATEAUED


def test_eval_loss_change_skips_non_finite_epochs():
  history = _with_eval(testing.linear_history([3.0, 2.0, 1.0, 0.5]), [2.0, 1.0, math.nan])
  assert convergence.eval_loss_change(convergence.curves_from_history(history)) == -0.5
  history = _with_eval(testing.linear_history([3.0, 2.0]), [2.0])
  assert math.isnan(convergence.eval_loss_change(convergence.curves_from_history(history)))


def test_eval_loss_jumping_up_at_the_end_is_diverged():
  # The taxi demo at 15 epochs: the eval loss bottoms out, then rises 70 % in the last.
  history = _with_eval(testing.linear_history(TAXI_LOSSES), [258.4, 19.6, 18.3, 23.1, 39.2])
  summary = convergence.analyze(convergence.curves_from_history(history), None, 0.01, 5, 0.5)
  assert summary.eval_loss_change == pytest.approx(39.2 / 23.1 - 1)
  assert summary.state == P.DIVERGED
  # Rising by less than rise_tolerance is not divergence: the loss stopped falling.
  history = _with_eval(testing.linear_history(TAXI_LOSSES), [258.4, 19.6, 18.3, 20.0])
  summary = convergence.analyze(convergence.curves_from_history(history), None, 0.01, 5, 0.5)
  assert summary.state == P.PLATEAUED
