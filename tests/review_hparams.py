"""Review of issue #50 claim 1 (hyperparameters input): failing tests, each a finding.

Run: nice -n 5 .venv/bin/python -m pytest -q tests/review_hparams.py"""
import json
import os

import pytest

EXAMPLE_MODULE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "examples",
                                              "tuned_model.py"))


def _best(directory, **values):
  """A stock Tuner's best_hyperparameters.txt (tfx 1.16.0 tuner/executor.py:58-70)."""
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


def test_tuned_learning_rate_of_the_example_reaches_the_optimizer(tmp_path):
  """examples/tuned_model.py searches learning_rate; the trainer records the tuned value
  in spec.hparams/ML Metadata but trains with config trainer.learning_rate (0.01)."""
  from tfx_parallel.components.distributed_trainer import executor, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config = executor.with_hyperparameters(TrainerConfig(module_file=EXAMPLE_MODULE),
                                         _best(str(tmp_path / "hp"), units=16,
                                               learning_rate=0.1))
  assert config.hparams["learning_rate"] == 0.1
  module = executor.load_module(config)
  optimizer = user_module.make_optimizer(module, None, config.optimizer, config.learning_rate)
  assert float(optimizer.learning_rate.numpy()) == pytest.approx(0.1)


def test_a_tuned_hidden_units_int_for_the_builtin_mlp_is_named(tmp_path):
  """hp.Int("hidden_units", ...) for the built-in mlp: the run fails with "mlp
  (built-in): build_model(spec) raised TypeError: 'int' object is not iterable", naming
  neither hidden_units nor the hyperparameters input."""
  import sys  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import artifacts, config_util, keys  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, os.path.dirname(__file__))
  import evaluator_fixtures as testing  # pylint: disable=g-import-not-at-top
  x, y = testing.synthetic_data(64, [1.0, 2.0], 3.0, noise=0.1)
  records = testing.serialize_examples(x, y, ["x0", "x1"], "y")
  examples = testing.write_examples(str(tmp_path / "ex"), {"train": records[:48],
                                                          "eval": records[48:]},
                                    ["x0", "x1"], "y")
  outputs = {}
  for key, kind in ((keys.MODEL_KEY, standard_artifacts.Model),
                    (keys.MODEL_RUN_KEY, standard_artifacts.ModelRun),
                    (keys.HISTORY_KEY, artifacts.TrainingHistory)):
    outputs[key] = [kind()]
    outputs[key][0].uri = str(tmp_path / key)
    os.makedirs(outputs[key][0].uri)
  config = TrainerConfig(steps=1, batch_size=16, log_every=1, layout="single", model="mlp")
  with pytest.raises(Exception) as e:
    executor.Executor().Do({keys.EXAMPLES_KEY: [examples], keys.HYPERPARAMETERS_KEY: [
        _best(str(tmp_path / "hp"), hidden_units=32)]}, outputs,
                           {keys.CONFIG_KEY: config_util.to_json(config)})
  assert "hidden_units" in str(e.value)
