"""The private tf_keras fields the mesh layout relies on (engines/mesh_runtime.py) and the
private hooks the fit engine drives ``fit`` through (engines/fit_engine.py
``check_private_hooks``): present in the pinned tf_keras, and a missing one fails loudly,
naming the tf_keras version."""
import re
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


def _compiled(k: int = 4):
  import tf_keras  # pylint: disable=g-import-not-at-top
  x = tf_keras.Input((3,))
  model = tf_keras.Model(x, tf_keras.layers.Dense(1)(x))
  model.compile(optimizer="sgd", loss="mse", steps_per_execution=k)
  return model


def test_the_pinned_tf_keras_has_every_private_hook_the_fit_engine_uses():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import fit_engine as fe  # pylint: disable=g-import-not-at-top
  model = _compiled(4)
  fe.check_private_hooks(model, "single")
  assert getattr(model, fe.TRAINING_STATE) is None  # The probe's state is taken back.
  # The setter assigns into the variable fit's DataHandler holds (identity kept).
  variable = getattr(model, fe.STEPS_PER_EXECUTION)
  model.steps_per_execution = 3
  assert getattr(model, fe.STEPS_PER_EXECUTION) is variable and int(variable.numpy()) == 3
  # fit starts where the state says (epoch 1, batch 2 of 5), and each execution is as
  # long as steps_per_execution when it starts (2; then 1, set at the first one's end).
  model.steps_per_execution = 2
  seen = []

  class Record(tf_keras.callbacks.Callback):

    def on_train_batch_begin(self, batch, logs=None):
      seen.append(("begin", int(batch)))

    def on_train_batch_end(self, batch, logs=None):
      seen.append(("end", int(batch)))
      model.steps_per_execution = 1

  setattr(model, fe.TRAINING_STATE, fe._StartInside(1, 2))  # pylint: disable=protected-access
  x, y = np.ones((10, 3), np.float32), np.ones((10, 1), np.float32)
  model.fit(x, y, batch_size=2, initial_epoch=0, epochs=2, steps_per_epoch=5, verbose=0,
            callbacks=[Record()])
  setattr(model, fe.TRAINING_STATE, None)
  assert seen == [("begin", 2), ("end", 3), ("begin", 4), ("end", 4)]


def test_a_missing_fit_hook_fails_naming_the_field_and_the_tf_keras_version(monkeypatch):
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import fit_engine as fe  # pylint: disable=g-import-not-at-top
  model = _compiled(4)
  version = re.escape(tf_keras.__version__)
  renames = [
      ("TRAINING_STATE", "_renamed_state", "single",
       rf"single layout: tf_keras {version} has no "
       r"Model\._renamed_state \(where fit starts a run resumed"),
      ("LOAD_COUNTERS", "_renamed_load", "mirrored", r"has no Model\._renamed_load \("),
      ("STEPS_PER_EXECUTION", "_renamed_spe", "single",
       r"has no Model\._renamed_spe \(a variable after compile\)")]
  for field, renamed_to, layout, message in renames:
    with monkeypatch.context() as m:
      m.setattr(fe, field, renamed_to)
      with pytest.raises(fe.TfKerasFieldError, match=message):
        fe.check_private_hooks(model, layout)
  # A tf_keras whose fit asks the state under another name.
  renamed = types.SimpleNamespace(
      _training_state=None,
      _maybe_load_initial_counters_from_ckpt=lambda spe, epoch: renamed._training_state
      .load_counters(spe, epoch))
  with pytest.raises(fe.TfKerasFieldError,
                     match=r"has no Model\._maybe_load_initial_counters_from_ckpt asking "
                           r"Model\._training_state\.maybe_load_initial_counters_from_ckpt"):
    fe.check_private_hooks(renamed, "single")


def test_a_wrapped_loss_function_keeps_its_keyword_arguments_per_example(monkeypatch):
  """The evaluator's per-example loss reads LossFunctionWrapper's private keyword
  arguments (engines/callbacks.py ``FN_KWARGS``); gone, it fails naming the version."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tf_keras.src import losses as losses_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import callbacks as cb  # pylint: disable=g-import-not-at-top

  def scaled(y_true, y_pred, scale=1.0):
    return scale * tf_keras.backend.mean(tf_keras.backend.square(y_true - y_pred), axis=-1)

  wrapped = losses_lib.LossFunctionWrapper(scaled, name="scaled", scale=3.0)
  assert getattr(wrapped, cb.FN_KWARGS) == {"scale": 3.0}
  y, p = np.array([[1.0], [2.0]], np.float32), np.array([[0.0], [0.0]], np.float32)
  assert cb.per_example_loss(wrapped)(y, p).numpy().tolist() == [3.0, 12.0]
  monkeypatch.setattr(cb, "FN_KWARGS", "_renamed_kwargs")
  with pytest.raises(cb.TfKerasFieldError,
                     match=rf"evaluation of a loss function: tf_keras "
                           rf"{re.escape(tf_keras.__version__)} has no "
                           r"LossFunctionWrapper\._renamed_kwargs \(on loss 'scaled'.*"
                           r"or pass a tf_keras.losses.Loss subclass"):
    cb.per_example_loss(wrapped)
