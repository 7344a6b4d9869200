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
  assert "rose" in divergence.reason([0.7], [0.5, 0.8])
  assert divergence.reason([0.7], [0.5, 0.74]) == ""


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
