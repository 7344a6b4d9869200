"""One optimizer enum and factory (optimizers.py): the config, the CLI and the planner use
the same names, and each name builds what the planner counts."""
import argparse

from tfx_parallel.components.distributed_trainer import config
from tfx_parallel.components.distributed_trainer.engines import optimizers
from tfx_parallel.pipeline import cli


def test_one_list_of_optimizer_names():
  assert config.OPTIMIZERS is optimizers.OPTIMIZERS
  assert set(optimizers.SLOTS_PER_PARAM) == set(optimizers.OPTIMIZERS)
  p = argparse.ArgumentParser()
  cli.add_run_arguments(p)
  choices = next(a.choices for a in p._actions if a.dest == "optimizer")  # pylint: disable=protected-access
  assert list(choices) == list(optimizers.OPTIMIZERS)


def test_each_name_builds_the_slots_the_planner_counts():
  import tf_keras  # pylint: disable=g-import-not-at-top
  x = tf_keras.Input((3,), name="x")
  model = tf_keras.Model({"x": x}, tf_keras.layers.Dense(1, use_bias=False)(x))
  for name in optimizers.OPTIMIZERS:
    opt = optimizers.make(name, 0.1)
    opt.build(model.trainable_variables)
    slots = [v for v in opt.variables if v.shape.as_list() == [3, 1]]
    # Stock SGD keeps a momentum slot it never reads (the mesh's SGD does not).
    want = optimizers.SLOTS_PER_PARAM[name] or (1 if name == "sgd" else 0)
    assert len(slots) == want, name
