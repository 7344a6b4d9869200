"""The model module contract: loading, validation before training, errors naming the
module; the built-in modules go through the same door."""
import textwrap

import pytest

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.config import TrainerConfig

import trainer_util as tu


def _spec(task="multiclass", num_classes=3):
  return ms.ModelSpec(
      features=(ms.FeatureSpec("x", "float32"),
                ms.FeatureSpec("pay", "string", vocabulary=("card", "cash"), num_ids=3)),
      label_key="y", task=task, num_classes=num_classes if task == "multiclass" else 1)


def _write(tmp_path, body: str) -> str:
  path = tmp_path / "my_model.py"
  path.write_text(textwrap.dedent(body))
  return str(path)


GOOD = """
    import tf_keras
    def build_model(spec):
      inputs = {f.name: tf_keras.Input((1,), name=f.name,
                                       dtype="int64" if f.is_string else "float32")
                for f in spec.features}
      emb = tf_keras.layers.Embedding(spec.feature("pay").num_ids, 4)(inputs["pay"])
      h = tf_keras.layers.Concatenate()([inputs["x"], tf_keras.layers.Flatten()(emb)])
      return tf_keras.Model(inputs, tf_keras.layers.Dense(UNITS)(h))
"""


def test_a_good_module_builds_for_its_task(tmp_path):
  module = user_module.load(module_file=_write(tmp_path, GOOD.replace("UNITS", "spec.output_units")))
  for task in ("regression", "binary", "multiclass"):
    model = user_module.check(module, _spec(task))
    assert model.output_shape == (None, 3 if task == "multiclass" else 1)


def test_a_module_without_build_model_is_rejected_naming_it(tmp_path):
  path = _write(tmp_path, "def make_model(spec):\n  return None\n")
  with pytest.raises(user_module.ModuleError,
                     match=rf"^{path}: the module defines no build_model\(spec\) function "
                           r"\(found: \['make_model'\]\)"):
    user_module.load(module_file=path)


def test_an_output_shape_that_does_not_fit_the_task_is_rejected_naming_it(tmp_path):
  path = _write(tmp_path, GOOD.replace("UNITS", "1"))  # 1 output, but 3 classes
  module = user_module.load(module_file=path)
  with pytest.raises(user_module.ModuleError,
                     match=rf"^{path}: the model's output has shape \[1\] .* task 'multiclass' "
                           r"needs 3 logits per example"):
    user_module.check(module, _spec("multiclass", 3))


def test_build_model_must_return_a_tf_keras_model(tmp_path):
  path = _write(tmp_path, "def build_model(spec):\n  return lambda x: x\n")
  with pytest.raises(user_module.ModuleError,
                     match=rf"^{path}: build_model\(spec\) must return a tf_keras.Model. "
                           r"Received: .*function"):
    user_module.check(user_module.load(module_file=path), _spec())


def test_import_errors_and_missing_files_name_the_module(tmp_path):
  path = _write(tmp_path, "import not_a_real_package_xyz\n")
  with pytest.raises(user_module.ModuleError,
                     match=rf"^{path}: importing the module failed: ModuleNotFoundError"):
    user_module.load(module_file=path)
  with pytest.raises(user_module.ModuleError, match=r"^/nope/m.py: module file not found"):
    user_module.load(module_file="/nope/m.py")
  with pytest.raises(user_module.ModuleError, match=r"^no_such_pkg.mod: importing the module"):
    user_module.load(module_path="no_such_pkg.mod")


@pytest.mark.parametrize("builtin", ["linear", "mlp"])
@pytest.mark.parametrize("task", ["regression", "binary", "multiclass"])
def test_builtin_models_follow_the_contract_for_every_task(builtin, task):
  module = user_module.load(builtin=builtin)
  assert module.name == f"{builtin} (built-in)"  # as the console prints it (issue 31)
  spec = _spec(task)
  model = user_module.check(module, spec)
  assert model.output_shape == (None, spec.output_units)
  assert sorted(model.input) == ["pay", "x"]


def test_config_takes_exactly_one_module_source():
  with pytest.raises(ConfigError, match=r"module_file: exactly one of module_file and "
                                        r"module_path"):
    TrainerConfig(module_file="a.py", module_path="b").validate()
  with pytest.raises(ConfigError, match=r"task: must be one of"):
    TrainerConfig(task="ranking").validate()


def test_the_executor_rejects_a_bad_module_before_training(tmp_path):
  """executor.prepare runs before any training process starts."""
  from tfx_parallel.components.distributed_trainer import executor
  from tfx_parallel.components.distributed_trainer.run.train import Job
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=64, eval_rows=16)
  path = _write(tmp_path, GOOD.replace('spec.feature("pay").num_ids', "3")
                .replace('inputs["pay"]', 'inputs["x0"]').replace('inputs["x"]', 'inputs["x1"]')
                .replace("UNITS", "2"))
  config = TrainerConfig(module_file=path)
  job = Job(**tu.job_dict(str(tmp_path), root, keys, rows, module_file=path))
  with pytest.raises(user_module.ModuleError,
                     match=rf"^{path}: the model's output has shape \[2\] .* task 'regression' "
                           r"needs 1 value"):
    executor.prepare(job, config)
  assert not (tmp_path / "ckpt").exists() and not (tmp_path / "history").exists()


RULES = GOOD.replace("UNITS", "spec.output_units") + """
    def layout_rules(spec):
      return RULES
"""


@pytest.mark.parametrize("rules, message", [
    ('{".*_deep_embedding/embeddings": (None, "model")}',
     r"^trainer\.module_file: module '.*my_model\.py': layout rule "
     r"'\.\*_deep_embedding/embeddings': matches no variable \(rules are searched in the path, re\.search\)\. "
     r"Variables: \['embedding/embeddings', 'dense/kernel', 'dense/bias'\]$"),
    ('{"embedding/embeddings": ("model", None)}',  # 3 ids on a model axis of 2
     r"^trainer\.module_file: .*dimension 0 of embedding/embeddings \[3, 4\] has size 3, "
     r"which the mesh's 'model' axis of 2 devices does not divide"),
    ('{"dense/bias": (None, "model")}', r"^trainer\.module_file: .*the sharding has rank 2"),
])
def test_layout_rules_are_resolved_before_training_naming_the_config_key(tmp_path, rules,
                                                                         message):
  """Issue 31, case 1: the check resolves the rules against the built model, with the
  layer names a fresh training process gives (a second build here is still 'dense')."""
  module = user_module.load(module_file=_write(tmp_path, RULES.replace("RULES", rules)))
  user_module.check(module, _spec(), model_axis=0)  # Not a mesh: the rules are unused.
  for _ in range(2):
    with pytest.raises(ConfigError, match=message):
      user_module.check(module, _spec(), model_axis=2)


def test_rules_that_apply_pass_the_check(tmp_path):
  rules = '{"embedding/embeddings": (None, "model"), "dense/kernel": (None, None)}'
  module = user_module.load(module_file=_write(tmp_path, RULES.replace("RULES", rules)))
  assert user_module.check(module, _spec(), model_axis=2) is not None


def test_the_executor_resolves_a_mesh_layouts_rules_before_training(tmp_path):
  from tfx_parallel.components.distributed_trainer import executor
  from tfx_parallel.components.distributed_trainer.run.train import Job
  root = str(tmp_path / "ex")
  keys, _, rows = tu.write_examples(root, rows=64, eval_rows=16)
  path = _write(tmp_path, """
    import tf_keras
    def build_model(spec):
      inputs = {f.name: tf_keras.Input((1,), name=f.name) for f in spec.features}
      return tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="head")(
          tf_keras.layers.Concatenate()(list(inputs.values()))))
    def layout_rules(spec):
      return {"hidden_1/kernel": (None, "model")}
  """)
  for layout, fails in (("mesh", True), ("auto", True), ("single", False)):
    config = TrainerConfig(module_file=path, layout=layout, mesh=(1, 2))
    job = Job(**tu.job_dict(str(tmp_path), root, keys, rows, module_file=path))
    if not fails:
      executor.prepare(job, config)
      continue
    with pytest.raises(ConfigError, match=r"^trainer\.module_file: .*'hidden_1/kernel': "
                                          r"matches no variable"):
      executor.prepare(job, config)


def test_the_component_checks_the_module_file_exists():
  from tfx import types
  from tfx.types import standard_artifacts
  from tfx_parallel.components.distributed_trainer.component import DistributedTrainer
  with pytest.raises(ConfigError, match=r"module_file: no such file. Received: '/nope.py'"):
    DistributedTrainer(types.Channel(type=standard_artifacts.Examples), module_file="/nope.py")
  with pytest.raises(ConfigError, match=r"module_path: given both"):
    DistributedTrainer(types.Channel(type=standard_artifacts.Examples),
                       config=TrainerConfig(module_path="a.b"), module_path="c.d")


@pytest.mark.parametrize("task", ["regression", "binary", "multiclass"])
def test_the_example_module_follows_the_contract(task):
  import os  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "taxi_model.py")
  module = user_module.load(module_file=path)
  spec = _spec(task)
  assert user_module.check(module, spec).output_shape == (None, spec.output_units)
  assert module.layout_rules(spec) == {r".*_embedding/embeddings": (None, "model"),
                                       r".*hidden_1/kernel": (None, "model"),
                                       r".*hidden_2/kernel": ("model", None)}


def _example_module():
  import os  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "taxi_model.py")
  return user_module.load(module_file=path)


def _string(name, values):
  return ms.FeatureSpec(name, "string", vocabulary=tuple(f"v{i}" for i in range(values)),
                        num_ids=values + 1)


# CSV shapes: numeric only; a 2-value string column (#47: width 5 on a model axis of 2);
# string columns only, of 3, 50 and 5,000 values.
CSV_SHAPES = {
    "numeric only": (ms.FeatureSpec("a", "float32"), ms.FeatureSpec("b", "float32")),
    "2-value string": (ms.FeatureSpec("x", "float32"), _string("sex", 2)),
    "strings only": (_string("s3", 3), _string("s50", 50), _string("s5000", 5000)),
}


@pytest.mark.parametrize("shape", sorted(CSV_SHAPES))
@pytest.mark.parametrize("model_axis", [2, 4, 8])
def test_the_example_module_fits_any_csv_shape_on_a_mesh(shape, model_axis):
  """#47: examples/taxi_model.py gave a 2-value string column an embedding of width 5,
  which the default mesh's model axis of 2 cannot divide; a CSV without strings had a
  rule that matched nothing. Checked as the trainer checks it before training."""
  module = _example_module()
  spec = ms.ModelSpec(features=CSV_SHAPES[shape], label_key="y", task="binary")
  model = user_module.check(module, spec, model_axis=model_axis)
  widths = [v.shape[1] for v in model.trainable_variables if "_embedding" in v.name]
  assert all(w % model_axis == 0 and w in (8, 16) for w in widths), widths
  assert len(widths) == sum(f.is_string for f in spec.features)


def test_an_embedding_width_the_model_axis_does_not_divide_names_the_fix():
  module = _example_module()
  spec = ms.ModelSpec(features=CSV_SHAPES["2-value string"], label_key="y", task="binary",
                      hparams={"embedding_dim": 5})
  with pytest.raises(ConfigError, match=(
      r"trainer.module_file: .*dimension 1 of sex_embedding/embeddings \[3, 5\] has size 5, "
      r".*e.g. 6, .*--hparams '\{\"embedding_dim\": 6\}'.*trainer.hparams.*--mesh BxM; "
      r"the setting trainer.mesh")):
    user_module.check(module, spec, model_axis=2)
