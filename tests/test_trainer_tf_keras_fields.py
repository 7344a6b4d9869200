"""The private tf_keras fields the mesh layout relies on (engines/mesh_runtime.py): present
in the pinned tf_keras, and a missing one fails loudly, naming the tf_keras version."""
import types

import pytest


def test_the_pinned_tf_keras_has_every_private_field_the_mesh_reads():
  import importlib  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime as mr  # pylint: disable=g-import-not-at-top
  lazy = importlib.import_module(mr.LAZY_VARIABLE_MODULE)
  assert callable(getattr(lazy, mr.LAZY_INIT_SCOPE))
  x = tf_keras.Input((3,))
  column = tf_keras.layers.Dense(4, name="column")
  row = tf_keras.layers.Dense(1, name="row")
  tf_keras.Model(x, row(column(x)))
  assert hasattr(column, mr.OUTBOUND_NODES)
  assert mr.outbound_layers(column) == [row]
  assert mr.outbound_layers(row) == []
  with mr.lazy_init_scope():  # Variables with shapes and no values.
    probe = tf_keras.layers.Dense(2)
    probe.build((None, 3))
  assert probe.kernel.shape.as_list() == [3, 2]
  tf_keras.utils.set_random_seed(1)  # Starts the seed sequence the mesh's builds draw from.
  assert mr.seed_generator().generator.getstate() == __import__("random").Random(1).getstate()
  drop = tf_keras.layers.Dropout(0.5)  # Unbuilt: the mesh creates its generator.
  mr.init_random_generators(tf_keras.Sequential([drop]))
  assert getattr(drop, mr.RANDOM_GENERATOR)._built  # pylint: disable=protected-access


def test_a_missing_field_fails_naming_the_field_and_the_tf_keras_version(monkeypatch):
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime as mr  # pylint: disable=g-import-not-at-top
  renamed = types.SimpleNamespace(name="hidden")  # A layer whose _outbound_nodes is gone.
  with pytest.raises(mr.TfKerasFieldError,
                     match=rf"tf_keras {tf_keras.__version__} has no Layer\._outbound_nodes "
                           r"\(on layer 'hidden'"):
    mr.outbound_layers(renamed)
  node = types.SimpleNamespace(name="hidden", _outbound_nodes=[object()])
  with pytest.raises(mr.TfKerasFieldError, match=r"has no Node\.outbound_layer"):
    mr.outbound_layers(node)
  monkeypatch.setattr(mr, "LAZY_VARIABLE_MODULE", "tf_keras.src.dtensor.no_such_module")
  with pytest.raises(mr.TfKerasFieldError,
                     match=rf"tf_keras {tf_keras.__version__} has no "
                           r"tf_keras\.src\.dtensor\.no_such_module"):
    mr.lazy_init_scope()
  monkeypatch.setattr(mr, "SEED_GENERATOR", "_RENAMED")
  with pytest.raises(mr.TfKerasFieldError, match=r"has no tf_keras\.src\.backend\._RENAMED"):
    mr.seed_generator()
  monkeypatch.setattr(mr, "MAYBE_INIT", "_renamed_init")
  with pytest.raises(mr.TfKerasFieldError,
                     match=r"has no BaseRandomLayer\._random_generator\._renamed_init "
                           r"\(on layer 'drop'"):
    mr.init_random_generators(tf_keras.Sequential([tf_keras.layers.Dropout(0.5, name="drop")]))
  monkeypatch.setattr(mr, "LAZY_VARIABLE_MODULE", "tf_keras.src.dtensor.lazy_variable")
  monkeypatch.setattr(mr, "LAZY_INIT_SCOPE", "renamed_scope")
  with pytest.raises(mr.TfKerasFieldError, match=r"lazy_variable\.renamed_scope"):
    mr.lazy_init_scope()
