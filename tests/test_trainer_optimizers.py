"""One optimizer enum and factory (optimizers.py): the config, the CLI and the planner use
the same names, and each name builds what the planner counts. On the mesh it is rebuilt
with mesh= (said when jit_compile is overridden), checked so before training."""
import argparse

import pytest

from tfx_parallel.components.distributed_trainer import config
from tfx_parallel.components.distributed_trainer import optimizers
from tfx_parallel.pipeline import cli


def test_one_list_of_optimizer_names():
  assert config.OPTIMIZERS is optimizers.OPTIMIZERS
  assert set(optimizers.SLOTS_PER_PARAM) == set(optimizers.OPTIMIZERS)
  p = argparse.ArgumentParser()
  cli.add_run_arguments(p)
  choices = next(a.choices for a in p._actions if a.dest == "optimizer")  # pylint: disable=protected-access
  assert list(choices) == list(optimizers.OPTIMIZERS)


def test_each_name_builds_the_slots_the_planner_counts():
  """On one device and on a mesh (MeshSGD for a plain SGD): stock SGD keeps an ``m`` it
  never reads at momentum 0, and the mesh's keeps it too, so both checkpoints hold the
  same variables under the same names."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  mesh = _one_device_mesh()
  for name in optimizers.OPTIMIZERS:
    built = []
    for on_mesh in (False, True):
      x = tf_keras.Input((3,), name="x")
      if on_mesh:
        layout_map = tf_keras.dtensor.experimental.LayoutMap(mesh)
        with layout_map.scope():
          model = tf_keras.Model({"x": x}, tf_keras.layers.Dense(1, use_bias=False)(x))
      else:
        model = tf_keras.Model({"x": x}, tf_keras.layers.Dense(1, use_bias=False)(x))
      opt = optimizers.make(name, 0.1, mesh=mesh if on_mesh else None)
      opt.build(model.trainable_variables)
      slots = [v for v in opt.variables if v.shape.as_list() == [3, 1]]
      assert len(slots) == optimizers.SLOTS_PER_PARAM[name], (name, on_mesh)
      if on_mesh:
        assert all(dtensor.fetch_layout(v).mesh == mesh for v in slots)
      built.append([(v.name.split("/")[0], v.shape.as_list()) for v in opt.variables])
    assert built[0] == built[1], name


def _one_device_mesh():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  cpu = tf.config.list_logical_devices("CPU")[0].name
  return dtensor.create_mesh([("batch", 1), ("model", 1)], devices=[cpu], device_type="CPU")


def test_an_overridden_jit_compile_is_said_on_the_console_and_the_record_keeps_the_users(
    capsys):
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import run_record  # pylint: disable=g-import-not-at-top
  mesh = _one_device_mesh()
  quiet = optimizers.on_mesh(tf_keras.optimizers.Adam(0.1), mesh, "m.py", optimizers.HOOK)
  assert not quiet.jit_compile and "jit_compile" not in capsys.readouterr().out
  asked = tf_keras.optimizers.Adam(0.1)
  # What tf_keras sets where a GPU is present (_BaseOptimizer.__init__, optimizer.py).
  asked.jit_compile = True
  placed = optimizers.on_mesh(asked, mesh, "m.py", optimizers.HOOK)
  assert placed.jit_compile is False
  assert ("[trainer] optimizer: m.py: optimizer(spec) Adam has jit_compile=True; the mesh "
          "layout runs its update without XLA (jit_compile=False)") in capsys.readouterr().out
  # A plain SGD runs as MeshSGD on the mesh; the record is the user's SGD.
  sgd = optimizers.make("sgd", 0.1)
  assert type(optimizers.on_mesh(sgd, mesh, "config optimizer 'sgd'")).__name__ == "MeshSGD"
  record = run_record.describe(sgd, tf_keras.losses.MeanSquaredError(), "regression", 0)
  assert record["optimizer"] == record["optimizer_config"]["class"] == "SGD"
  assert record["optimizer_config"]["config"] == run_record.jsonable(sgd.get_config())


def test_the_pre_check_builds_the_optimizer_on_a_mesh_as_the_training_process_does():
  """The executor's check on the concrete layout: a legacy optimizer passes on single and
  fails on the mesh, before training, naming the hook; the config's own optimizer is
  the one checked (not the config default)."""
  import hook_cases  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import executor, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run.train import Job  # pylint: disable=g-import-not-at-top
  spec = hook_cases.spec()

  def check(**config):
    config = TrainerConfig(**config).validate()
    job = Job(config={}, examples_uri="", feature_keys=[], label_key="y", train_rows=8,
              model_dir="", model_run_dir="", history_dir="", checkpoint_dir="",
              model_spec=spec.to_dict())
    executor.check_on_layout(job, config)

  legacy = hook_cases.module_path("legacy_optimizer")
  check(module_path=legacy, layout="single")
  with pytest.raises(optimizers.OptimizerError,
                     match=r"^hook_modules\.legacy_optimizer: optimizer\(spec\) returned "
                           r"tf_keras\.src\.optimizers\.legacy\.gradient_descent\.SGD, which the "
                           r"mesh layout cannot place"):
    check(module_path=legacy, layout="mesh", mesh=(1, 2))
  module = user_module.load(builtin="linear")
  assert type(user_module.check_optimizer(module, spec, "momentum", 0.3, "mesh")).__name__ \
      == "SGD"
  assert user_module.check_optimizer(module, spec, "momentum", 0.3, "mesh").get_config()[
      "momentum"] == optimizers.MOMENTUM


_MESH_SHAPE_CHECK = """
import json, sys, tf_keras
from tfx_parallel.components.common import tfenv
tfenv.split_cpu(4)
from tfx_parallel.components.distributed_trainer import model_spec as ms, user_module
seen = []
class Recording(tf_keras.optimizers.Adam):
  def __init__(self, *args, mesh=None, **kwargs):
    if mesh is not None:
      seen.append(list(mesh.shape()))
    super().__init__(*args, mesh=mesh, **kwargs)
module = user_module.load(builtin="linear")
module = module.__class__(**dict(vars(module), optimizer=lambda spec: Recording(0.01)))
spec = ms.ModelSpec(features=(ms.FeatureSpec("x0", ms.FLOAT32),), label_key="y")
user_module.check_optimizer(module, spec, "adam", 0.01, "mesh", (2, 2))
print("SEEN" + json.dumps(seen))
"""


def test_the_pre_check_places_the_optimizer_on_the_runs_own_mesh_shape():
  """check_optimizer rebuilds the optimizer with mesh= on a mesh of the run's shape (2x2
  here, in a process with 4 logical CPUs), not on 1x1."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  proc = subprocess.run([sys.executable, "-c", _MESH_SHAPE_CHECK], capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads(proc.stdout.split("SEEN", 1)[1]) == [[2, 2]]
