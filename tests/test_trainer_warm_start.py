"""Warm start from a base_model (warm_start.py): variables matched by object path and
shape, mismatches named, a partial warm start only by trainer.warm_start_partial; and a
slow run warm-starting a mesh of another shape from a single-device run, whose loss
starts where the base model ended, not from scratch."""
import os
import types

import numpy as np
import pytest

from tfx_parallel.components.common import config_util, run_history

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def _network(units, outputs=1, extra=False):
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs = {n: tf_keras.Input(shape=(1,), name=n) for n in ("x0", "x1")}
  h = tf_keras.layers.Concatenate()(list(inputs.values()))
  h = tf_keras.layers.Dense(units, activation="relu", name="hidden")(h)
  out = tf_keras.layers.Dense(outputs, name="output")(h)
  if extra:  # A layer the base model lacks (path layer_with_weights-2).
    out = tf_keras.layers.Dense(1, name="more")(out)
  return tf_keras.Model(inputs, out)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  """A stock-Trainer-like SavedModel: compiled (optimizer and metrics saved), fitted."""
  model = _network(4)
  model.compile(optimizer="adam", loss="mse", metrics=["mae"])
  x = {"x0": np.ones((8, 1), np.float32), "x1": np.zeros((8, 1), np.float32)}
  model.fit(x, np.ones((8, 1)), verbose=0)
  path = str(tmp_path_factory.mktemp("base") / "Format-Serving")
  model.save(path, save_format="tf")
  return path, model.get_weights()


def test_same_architecture_loads_every_variable_by_path(base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, weights = base
  _network(4)  # Layer names in this process are now uniquified ("hidden_1"): paths match.
  model = _network(4)
  found = warm_start.match(model, path)
  warm_start.check(found, partial=False)
  assert found.record(False) == {"source": path, "loaded": 4, "skipped": 0,
                                 "skipped_names": [], "partial": False}
  warm_start.load(found, path, lambda v, value: v.assign(value))
  for got, want in zip(model.get_weights(), weights):
    np.testing.assert_array_equal(got, want)


def test_shape_mismatch_and_missing_are_named_and_fail_without_partial(base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = base
  found = warm_start.match(_network(8, extra=True), path)
  with pytest.raises(config_util.ConfigError) as e:
    warm_start.check(found, partial=False)
  assert e.value.key == "trainer.warm_start_partial"
  text = str(e.value)
  assert "hidden/kernel" in text and "shape [2, 8] here, [2, 4] in the base model" in text
  assert "more/kernel (path layer_with_weights-2/kernel, shape [1, 1]): not in the base " \
      "model" in text
  assert "warm_start_partial=true" in text
  warm_start.check(found, partial=True)  # Allowed: loads what matches.
  record = found.record(True)
  assert record["loaded"] == 1 and record["skipped"] == 5  # Only output/bias matches.


def test_extra_base_variables_are_named(base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = base
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs = {n: tf_keras.Input(shape=(1,), name=n) for n in ("x0", "x1")}
  h = tf_keras.layers.Concatenate()(list(inputs.values()))
  model = tf_keras.Model(inputs, tf_keras.layers.Dense(4, name="hidden")(h))
  found = warm_start.match(model, path)
  assert [n.split(" ")[0] for n in found.extra] == ["output/kernel", "output/bias"]
  with pytest.raises(config_util.ConfigError, match="output/kernel"):
    warm_start.check(found, partial=False)


def test_no_saved_model_names_the_input(tmp_path):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  with pytest.raises(config_util.ConfigError, match="base_model"):
    warm_start.match(_network(4), str(tmp_path))


def test_record_field_is_a_property():
  assert "warm_start" in run_history.property_names()
  assert run_history.conditional_fields()["warm_start"] == run_history.WHEN_WARM


@pytest.mark.slow
def test_mesh_of_another_shape_starts_from_single_runs_final_loss(tmp_path):
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  feats, _, rows = tu.write_examples(str(tmp_path / "ex"), rows=256, eval_rows=64)
  model = dict(model="mlp", hidden_units=[8], batch_size=32, log_every=5,
               checkpoint_every=0)
  first = tu.job_dict(str(tmp_path / "single"), str(tmp_path / "ex"), feats, rows,
                      layout="single", steps=80, **model)
  warm = dict(tu.job_dict(str(tmp_path / "mesh"), str(tmp_path / "ex"), feats, rows,
                          layout="mesh", mesh=[1, 2], steps=2, **model),
              base_model_dir=first["model_dir"])
  base = tu.run_job(first, str(tmp_path / "single"))  # A process per layout: its devices.
  started = tu.run_job(warm, str(tmp_path / "mesh"))
  assert started["warm_start"] == {"source": first["model_dir"], "loaded": 4, "skipped": 0,
                                   "skipped_names": [], "partial": False}
  assert started["mesh_shape"] == [1, 2]
  final = base["epochs"][-1]["eval_loss"] if base["epochs"] else base["records"][-1]["loss"]
  scratch = base["initial_eval_loss"]  # The same model, freshly initialised.
  assert final < 0.2 * scratch, (final, scratch)
  # The warm-started mesh's untrained eval loss is the base model's, not a fresh one's.
  assert started["initial_eval_loss"] == pytest.approx(final, rel=0.1, abs=1e-3), (
      started["initial_eval_loss"], final, scratch)


def test_a_resumed_run_keeps_its_checkpoint_over_the_base_model(tmp_path):
  """A checkpoint of the same run wins: nothing is read from the base (here a directory
  that holds none: reading it would fail), and the record says so."""
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.job import Job  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top
  job = Job(config={}, examples_uri="", feature_keys=[], label_key="y", train_rows=0,
            model_dir="", model_run_dir="", history_dir="", checkpoint_dir="",
            base_model_dir=str(tmp_path))
  record = train.warm_start_from_base(job, TrainerConfig(), engine=None, start_step=7)
  assert record["resumed_instead"] is True and record["loaded"] == 0
  with pytest.raises(config_util.ConfigError, match="no SavedModel variables"):
    train.warm_start_from_base(job, TrainerConfig(), types.SimpleNamespace(model=None), 0)
  assert train.warm_start_from_base(
      Job(**dict(vars(job), base_model_dir=None)), TrainerConfig(), None, 0) is None


def test_executor_checks_the_base_before_training(base):
  """The executor builds the user's model from the job's spec and matches it: a base of
  another width fails there, naming the variable and the setting."""
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.job import Job  # pylint: disable=g-import-not-at-top
  module_file = os.path.join(os.path.dirname(__file__), "..", "examples", "tuned_model.py")
  path, _ = base

  def job(units):
    spec = ms.ModelSpec(features=(ms.FeatureSpec("x0", "float32"),
                                  ms.FeatureSpec("x1", "float32")),
                        label_key="y", hparams={"units": units})
    return Job(config={}, examples_uri="", feature_keys=["x0", "x1"], label_key="y",
               train_rows=0, model_dir="", model_run_dir="", history_dir="",
               checkpoint_dir="", model_spec=spec.to_dict(), base_model_dir=path)
  config = TrainerConfig(module_file=module_file)
  executor.check_warm_start(job(4), config)  # Same widths: every variable matches.
  with pytest.raises(config_util.ConfigError, match=r"hidden/kernel .*shape \[2, 8\] here"):
    executor.check_warm_start(job(8), config)
  executor.check_warm_start(job(8), TrainerConfig(module_file=module_file,
                                                  warm_start_partial=True))
