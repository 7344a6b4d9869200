"""The ``hyperparameters`` input: a stock Tuner's best_hyperparameters reach the user
module as ``spec.hparams`` (merged with config ``trainer.hparams``, hyperparameters.py)
and are recorded in history.json and the TrainingHistory properties.

Fast tests: the merge rule and reading a real KerasTuner config file. Slow: LocalDagRunner
runs PartitionedExampleGen -> stock ``tfx.components.Tuner`` (2 trials, few steps) ->
DistributedTrainer with examples/tuned_model.py serving both hooks; ML Metadata shows
the tuned values in the record, and the parameter count the module built from them."""
import json
import os
import re

import pytest

from tfx_parallel.components.common import config_util
from tfx_parallel.components.distributed_trainer import hyperparameters as hp_lib

EXAMPLE_MODULE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "examples",
                                              "tuned_model.py"))


def test_merge_takes_names_from_either_and_agrees_on_equal_values():
  assert hp_lib.merge({"a": 1, "units": 4}, {"units": 4, "lr": 0.1}) == {
      "a": 1, "units": 4, "lr": 0.1}
  assert hp_lib.merge({}, {"units": 8}) == {"units": 8}
  assert hp_lib.merge({"a": 1}, {}) == {"a": 1}


def test_merge_conflict_compares_types_too_and_names_them():
  """1 == True == 1.0 in Python: a config int against a tuned bool is still a conflict."""
  for mine, theirs, shown in ((1, True, "1 (int) in trainer.hparams but True (bool)"),
                              (1, 1.0, "1 (int) in trainer.hparams but 1.0 (float)")):
    with pytest.raises(config_util.ConfigError, match=re.escape(shown)) as e:
      hp_lib.merge({"units": mine}, {"units": theirs})
    assert e.value.key == "trainer.hparams" and "'units'" in str(e.value)
  assert hp_lib.merge({"units": 1.0}, {"units": 1.0}) == {"units": 1.0}


def test_merge_conflict_names_hparam_both_values_and_setting():
  with pytest.raises(config_util.ConfigError) as e:
    hp_lib.merge({"units": 4, "zeta": 1}, {"units": 16, "zeta": 2}, "the tuner")
  assert e.value.key == "trainer.hparams"
  text = str(e.value)
  assert "'units'" in text and "4" in text and "16" in text and "the tuner" in text
  assert "remove 'units' from trainer.hparams" in text


def _write_best(directory, values):
  """A KerasTuner HyperParameters.get_config(), as the stock Tuner writes it (tfx 1.16.0
  tfx/components/tuner/executor.py write_best_hyperparameters, l.58-70); returns the
  HyperParameters artifact."""
  import keras_tuner  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  hp = keras_tuner.HyperParameters()
  for name, value in values.items():
    hp.Fixed(name, value)
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, "best_hyperparameters.txt"), "w") as f:
    f.write(json.dumps(hp.get_config()))
  artifact = standard_artifacts.HyperParameters()
  artifact.uri = directory
  return artifact


def test_read_values_of_a_keras_tuner_config(tmp_path):
  _write_best(str(tmp_path / "hp"), {"units": 16, "learning_rate": 0.1})
  assert hp_lib.read_values(str(tmp_path / "hp")) == {"units": 16, "learning_rate": 0.1}


def test_read_values_rejects_other_json(tmp_path):
  (tmp_path / "hp").mkdir()
  (tmp_path / "hp" / "best_hyperparameters.txt").write_text('{"units": 3}')
  with pytest.raises(config_util.ConfigError, match="no 'values' object"):
    hp_lib.read_values(str(tmp_path / "hp"))


def test_executor_merges_the_artifact_into_config(tmp_path):
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  artifact = _write_best(str(tmp_path / "hp"), {"units": 16})
  config = TrainerConfig(hparams={"dropout": 0.1})
  assert executor.with_hyperparameters(config, None) is config
  assert executor.with_hyperparameters(config, artifact).hparams == {"dropout": 0.1,
                                                                     "units": 16}
  with pytest.raises(config_util.ConfigError, match="'units' is 4 in trainer.hparams"):
    executor.with_hyperparameters(TrainerConfig(hparams={"units": 4}), artifact)


def test_tuned_learning_rate_of_the_example_reaches_the_optimizer(tmp_path):
  """examples/tuned_model.py searches learning_rate and has no optimizer hook: the tuned
  value sets trainer.learning_rate for the run (the optimizer is built from it), and the
  change is in the record."""
  from tfx_parallel.components.distributed_trainer import executor, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config, record = executor.apply_hyperparameters(
      TrainerConfig(module_file=EXAMPLE_MODULE),
      _write_best(str(tmp_path / "hp"), {"units": 16, "learning_rate": 0.1}))
  assert config.hparams["learning_rate"] == 0.1 and config.learning_rate == 0.1
  assert record == {"learning_rate": {"config": 0.01, "tuned": 0.1}}
  module = executor.load_module(config)
  optimizer = user_module.make_optimizer(module, None, config.optimizer, config.learning_rate)
  assert float(optimizer.learning_rate.numpy()) == pytest.approx(0.1)


def test_tuned_optimizer_and_batch_size_set_those_settings(tmp_path):
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config, record = executor.apply_hyperparameters(
      TrainerConfig(batch_size=64), _write_best(str(tmp_path / "hp"),
                                                {"optimizer": "sgd", "batch_size": 32}))
  assert (config.optimizer, config.batch_size) == ("sgd", 32)
  assert record == {"optimizer": {"config": "adam", "tuned": "sgd"},
                    "batch_size": {"config": 64, "tuned": 32}}


@pytest.mark.parametrize("values, needle", [
    ({"optimizer": "rmsprop"}, "tuned 'optimizer' sets trainer.optimizer for this run: "
                               "optimizer: unknown optimizer 'rmsprop'; expected one of "
                               "('sgd', 'momentum', 'adam'). Received: 'rmsprop' from"),
    ({"batch_size": 0.5}, "Received: 0.5 (float)"),
    ({"learning_rate": True}, "Received: True (bool)"),
])
def test_a_tuned_setting_of_the_wrong_kind_is_named(tmp_path, values, needle):
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  with pytest.raises(config_util.ConfigError, match=re.escape(needle)) as e:
    executor.with_hyperparameters(TrainerConfig(), _write_best(str(tmp_path / "hp"), values))
  assert e.value.key == "hyperparameters" and str(tmp_path / "hp") in str(e.value)


def test_a_tuned_batch_size_the_replicas_do_not_divide_names_the_tuner(tmp_path):
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  with pytest.raises(config_util.ConfigError, match=re.escape(
      "tuned 'batch_size' sets trainer.batch_size for this run: batch_size: global batch "
      "33 is not divisible by the 2 replicas of layout 'mirrored'. Received: 33 from the "
      "hyperparameters input")) as e:
    executor.with_hyperparameters(TrainerConfig(layout="mirrored", devices=2),
                                  _write_best(str(tmp_path / "hp"), {"batch_size": 33}))
  assert e.value.key == "hyperparameters"


def test_a_tuned_hidden_units_int_for_the_builtin_mlp_is_named(tmp_path):
  """hp.Int("hidden_units", ...) for the built-in mlp, through the executor: a ConfigError
  naming hidden_units, the input, the value and the fix, before any scan or build (was
  "build_model(spec) raised TypeError: 'int' object is not iterable")."""
  from tfx_parallel.components.common import keys  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config = TrainerConfig(steps=1, batch_size=16, layout="single", model="mlp")
  with pytest.raises(config_util.ConfigError) as e:
    executor.Executor().Do(
        {keys.HYPERPARAMETERS_KEY: [_write_best(str(tmp_path / "hp"), {"hidden_units": 32})]},
        {}, {keys.CONFIG_KEY: config_util.to_json(config)})
  text = str(e.value)
  assert e.value.key == "hyperparameters"
  assert ("hparam 'hidden_units' as a list of positive integer widths, e.g. [64, 64]. "
          "Received: 32 (int) from the hyperparameters input") in text
  assert "set trainer.hparams.hidden_units" in text


@pytest.mark.parametrize("hparams, needle", [
    ({"embedding_dim": 2.5}, "hparam 'embedding_dim' as a positive integer, e.g. 8. "
                             "Received: 2.5 (float) from trainer.hparams"),
    ({"hidden_units": [16, 0]}, "Received: [16, 0] (list) from trainer.hparams"),
])
def test_builtin_mlp_hparams_of_the_wrong_type_are_named(hparams, needle):
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  with pytest.raises(config_util.ConfigError, match=re.escape(needle)):
    executor.with_hyperparameters(TrainerConfig(model="mlp", hparams=hparams), None)
  # A user module reads what it likes.
  executor.with_hyperparameters(TrainerConfig(module_file=EXAMPLE_MODULE, hparams=hparams),
                                None)


@pytest.fixture(scope="module")
def tuned_run(tmp_path_factory):
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.component import DistributedTrainer  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.component import PartitionedExampleGen  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  tmp = tmp_path_factory.mktemp("tuned")
  example_gen = PartitionedExampleGen(config=ExampleGenConfig(rows=256, noise=0.1))
  from test_stock_pipeline import no_wheels  # pylint: disable=g-import-not-at-top
  with no_wheels():  # The module from its file (the README loop's first run builds wheels).
    tuner = tfx.components.Tuner(
        module_file=EXAMPLE_MODULE, examples=example_gen.outputs["examples"],
        train_args=tfx.proto.TrainArgs(num_steps=4), eval_args=tfx.proto.EvalArgs(num_steps=2),
        custom_config={"max_trials": 2})
  trainer = DistributedTrainer(
      examples=example_gen.outputs["examples"], module_file=EXAMPLE_MODULE,
      config=TrainerConfig(steps=6, batch_size=32, log_every=3, hparams={"note": "fixed"}),
      hyperparameters=tuner.outputs["best_hyperparameters"])
  # A trained model warm-starting a second trainer through the base_model input is the
  # README loop's second run (tests/test_readme.py, whose checks include the record
  # and the warm run's initial eval loss).
  metadata = str(tmp / "metadata.sqlite")
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name="tuned", pipeline_root=str(tmp / "root"),
      components=[example_gen, tuner, trainer],
      metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
          metadata)))
  from tfx_parallel.pipeline import summary  # pylint: disable=g-import-not-at-top
  store = summary.open_store(metadata)
  types = {t.id: t.name for t in store.get_artifact_types()}
  return {types[a.type_id]: a for a in store.get_artifacts()}


@pytest.mark.slow
def test_tuner_best_hyperparameters_reach_the_module_and_the_record(tuned_run):
  best = tuned_run["HyperParameters"]
  with open(os.path.join(best.uri, "best_hyperparameters.txt")) as f:
    chosen = json.load(f)["values"]
  assert set(chosen) == {"units", "learning_rate"}
  history = tuned_run["TrainingHistory"]
  recorded = json.loads(history.custom_properties["hparams"].string_value)
  assert recorded == dict(chosen, note="fixed")
  assert history.custom_properties["hyperparameters_uri"].string_value == best.uri
  # The tuned learning_rate trained (the example has no optimizer hook).
  assert json.loads(history.custom_properties["tuned_settings"].string_value) == {
      "learning_rate": {"config": 0.01, "tuned": chosen["learning_rate"]}}
  assert json.loads(history.custom_properties["optimizer_config"].string_value)[
      "learning_rate"] == pytest.approx(chosen["learning_rate"])
  # The module built its hidden layer from spec.hparams["units"]: 2 features ->
  # Dense(units) -> Dense(1) has 4 * units + 1 parameters.
  assert history.custom_properties["param_count"].int_value == 4 * chosen["units"] + 1
  with open(os.path.join(history.uri, "history.json")) as f:
    assert json.load(f)["hparams"] == recorded
