"""One optimizer enum and factory (optimizers.py): the config, the CLI and the planner use
the same names, and each name builds what the planner counts."""
import argparse

import tfx_parallel.pipeline.tfenv  # noqa: F401  (before TensorFlow)
from tfx_parallel.components.distributed_trainer import config
from tfx_parallel.components.distributed_trainer.engines import optimizers
from tfx_parallel.components.distributed_trainer.plan import layout_search
from tfx_parallel.pipeline import cli


def test_one_list_of_optimizer_names():
  assert config.OPTIMIZERS is optimizers.OPTIMIZERS
  assert set(layout_search.SLOTS_PER_PARAM) == set(optimizers.OPTIMIZERS)
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
    want = layout_search.SLOTS_PER_PARAM[name] or (1 if name == "sgd" else 0)
    assert len(slots) == want, name


def test_checkpoint_state_is_matched_by_name_across_sgd_with_and_without_its_unread_slot():
  """Stock SGD (momentum 0) keeps an m slot it never reads; the mesh's SGD keeps none.
  Either one's state loads into the other; a slot that carries state cannot be dropped."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import pytest  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  x = tf_keras.Input((3,), name="x")
  model = tf_keras.Model({"x": x}, tf_keras.layers.Dense(1, use_bias=False, name="d")(x))
  stock, slotless = optimizers.make("sgd", 0.1), optimizers.mesh_sgd_class()(0.1)
  for opt in (stock, slotless):
    opt.build(model.trainable_variables)
  assert optimizers.variable_names(stock) == ["iteration", "m/d/kernel"]
  assert optimizers.variable_names(slotless) == ["iteration"]
  got = optimizers.match_state(stock, {"iteration": np.int64(7)})
  assert int(got[0]) == 7 and not np.any(got[1])
  assert [int(v) for v in optimizers.match_state(
      slotless, {"iteration": np.int64(7), "m/d/kernel": np.zeros((3, 1))})] == [7]
  momentum = optimizers.make("momentum", 0.1)
  momentum.build(model.trainable_variables)
  with pytest.raises(ValueError, match=r"missing \['m/d/kernel'\]"):
    optimizers.match_state(momentum, {"iteration": np.int64(7)})
  with pytest.raises(ValueError, match=r"unexpected \['m/d/kernel'\]"):
    optimizers.match_state(slotless, {"iteration": np.int64(7), "m/d/kernel": np.ones((3, 1))})
