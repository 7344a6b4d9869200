"""The run record: what the built optimizer and loss were, read from the objects."""
import json

import pytest

from tfx_parallel.components.distributed_trainer.run import run_record


def test_a_hooks_optimizer_is_recorded_as_built_not_the_config_default():
  import tf_keras  # pylint: disable=g-import-not-at-top
  record = run_record.optimizer_record(tf_keras.optimizers.SGD(0.0))
  assert record["class"] == "SGD" and record["learning_rate"] == 0.0
  assert record["config"]["momentum"] == 0.0
  json.dumps(record)  # JSON as it is.


def test_a_schedule_is_recorded_with_its_config_and_each_records_rate():
  import tf_keras  # pylint: disable=g-import-not-at-top
  schedule = tf_keras.optimizers.schedules.ExponentialDecay(0.1, 100, 0.5)
  optimizer = tf_keras.optimizers.SGD(schedule, momentum=0.9)
  loss = tf_keras.losses.BinaryCrossentropy(from_logits=True)
  out = run_record.describe(optimizer, loss, "binary", 1)
  assert out["optimizer"] == "SGD"
  assert out["optimizer_config"]["learning_rate"] == {
      "class": "ExponentialDecay", "config": {"initial_learning_rate": 0.1,
                                              "decay_steps": 100, "decay_rate": 0.5,
                                              "staircase": False, "name": None}}
  assert out["optimizer_config"]["config"]["momentum"] == 0.9
  # The rate applied at a step, as the Recorder writes it into each record.
  assert [run_record.learning_rate_at(optimizer, s) for s in (1, 101)] == pytest.approx(
      [0.1, 0.05])
  assert "records" not in out  # Written once, by the Recorder; not patched after training.
  assert out["loss"] == {"class": "BinaryCrossentropy",
                         "config": pytest.approx(loss.get_config())}
  assert out["num_classes"] == 2  # As on every artifact (task_contract.py).
  assert run_record.non_negative(loss)
  json.dumps(out)


def test_a_legacy_optimizer_and_a_loss_function_are_recorded():
  import tf_keras  # pylint: disable=g-import-not-at-top
  record = run_record.optimizer_record(tf_keras.optimizers.legacy.Adam(0.01))
  assert record["class"] == "Adam" and record["learning_rate"] == pytest.approx(0.01)
  assert run_record.loss_record(tf_keras.losses.mean_squared_error)["class"] == \
      "mean_squared_error"
