"""Issue #25, one place per fact: whether the mesh's model axis divides a model is decided
once, by the default rules on the variables of the model that will train
(sharding.unsplit_kernels / sharding.resolve), before the first step. The config checks
meant for the built-in models (hidden_units, feature count) no longer refuse a user
module, which never reads them."""
import dataclasses
import os
import re
import textwrap

import pytest

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer import executor
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.run.train import Job
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.pipeline import config as config_lib

import trainer_util as tu

# Two features in, a hidden layer of 6 and one output: every Dense kernel divides by 3
# ([2, 6] by columns, then [6, 1] by rows), though neither 2 features nor the built-in
# mlp's default width 16 does.
THREE_WAY = """
    import tf_keras
    def build_model(spec):
      inputs = {f.name: tf_keras.Input((1,), name=f.name) for f in spec.features}
      x = tf_keras.layers.Concatenate()(list(inputs.values()))
      h = tf_keras.layers.Dense(6, activation="relu", name="hidden")(x)
      return tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="head")(h))
"""


def _module(tmp_path, body: str) -> str:
  path = tmp_path / "three_way.py"
  path.write_text(textwrap.dedent(body))
  return str(path)


def _job(tmp_path, **config) -> Job:
  root = str(tmp_path / "ex")
  if not os.path.isdir(root):
    tu.write_examples(root, rows=96, eval_rows=16)
  return Job(**tu.job_dict(str(tmp_path), root, ["x0", "x1"], 96, **config))


def test_the_pipeline_config_no_longer_refuses_a_user_module_on_mesh_1x3(tmp_path):
  """Before: `trainer.mesh: the model axis (3) must divide the feature count` (synthetic,
  2 features) and `trainer.hidden_units: hidden width 16 ...` (the CLI sets model mlp for
  CSV data even with --module-file)."""
  path = _module(tmp_path, THREE_WAY)
  for model in ("linear", "mlp"):
    config_lib.PipelineConfig(
        example_gen=ExampleGenConfig(rows=96, num_features=2),
        trainer=TrainerConfig(layout="mesh", mesh=(1, 3), model=model,
                              module_file=path)).validate()


@pytest.mark.slow
def test_a_user_module_whose_layers_divide_by_3_trains_on_mesh_1x3(tmp_path):
  path = _module(tmp_path, THREE_WAY)
  config = dict(layout="mesh", mesh=[1, 3], model="mlp", module_file=path, steps=4,
                log_every=2, checkpoint_every=0, batch_size=24)
  job = executor.prepare(_job(tmp_path, **config), TrainerConfig(**dict(config, mesh=(1, 3))))
  history = tu.run_job(dataclasses.asdict(job), str(tmp_path / "run"))
  splits = history["variable_splits"]
  assert splits["hidden/kernel"]["split"] == "columns", splits
  assert splits["hidden/kernel"]["per_device"] == [2, 2], splits
  assert splits["head/kernel"]["split"] == "rows", splits
  assert splits["head/kernel"]["per_device"] == [2, 1], splits
  assert history["replicated_variables"] == []


def test_a_user_split_that_cannot_divide_fails_before_the_first_step_naming_the_module(
    tmp_path):
  path = _module(tmp_path, THREE_WAY + """
    def layout_rules(spec):
      return {"hidden/kernel": ("model", None)}   # 2 input rows over 3 devices
  """)
  job = _job(tmp_path, layout="mesh", mesh=[1, 3], module_file=path)
  with pytest.raises(ConfigError, match=r"^trainer\.module_file: module '.*three_way\.py': "
                                        r"layout rule 'hidden/kernel' variable 'hidden/kernel': "
                                        r"dimension 0 of hidden/kernel \[2, 6\] has size 2, "
                                        r"which the mesh's 'model' axis of 3 devices does not "
                                        r"divide"):
    executor.prepare(job, TrainerConfig(layout="mesh", mesh=(1, 3), module_file=path))
  assert not (tmp_path / "ckpt").exists() and not (tmp_path / "history").exists()


@pytest.mark.parametrize("config, key, message", [
    (dict(model="linear", mesh=(1, 3)), "trainer.mesh",
     r"the model axis \(3\) must divide the feature count \(2 inputs of linear/kernel "
     r"\[2, 1\]\)"),
    (dict(model="mlp", mesh=(1, 2), hidden_units=(5,)), "trainer.hidden_units",
     r"hidden width 5 is not divisible by the model axis 2"),
    (dict(model="mlp", mesh=(1, 3), hidden_units=(6, 4)), "trainer.hidden_units",
     r"hidden width 4 is not divisible by the model axis 3"),
    (dict(model="mlp", mesh=(1, 2), hparams={"hidden_units": [7]}), "trainer.hparams",
     r"hidden width 7 is not divisible by the model axis 2"),
])
def test_a_builtin_model_whose_split_is_impossible_fails_before_training_naming_the_key(
    tmp_path, config, key, message):
  job = _job(tmp_path, layout="mesh", **config)
  with pytest.raises(ConfigError) as err:
    executor.prepare(job, TrainerConfig(layout="mesh", **config))
  assert err.value.key == key, err.value
  assert re.search(message, str(err.value)), err.value
  assert not (tmp_path / "ckpt").exists() and not (tmp_path / "history").exists()


@pytest.mark.parametrize("config", [
    dict(model="linear", mesh=(1, 2)), dict(model="mlp", mesh=(2, 2)),
    dict(model="mlp", mesh=(1, 3), hidden_units=(6, 3)),
    dict(model="linear", mesh=(1, 3), layout="single"),  # Not a mesh: nothing is split.
])
def test_builtin_models_whose_kernels_divide_pass(tmp_path, config):
  config = dict(dict(layout="mesh"), **config)
  assert executor.prepare(_job(tmp_path, **config), TrainerConfig(**config)).model_spec
