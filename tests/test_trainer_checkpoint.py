"""checkpoint.py: TensorFlow's own checkpoint format, committed atomically, pruned, and
read back by the plain TensorFlow a user's tooling runs (tf.train.latest_checkpoint,
tf.train.Checkpoint.read). Cross-layout resumes with a real kill are in
test_trainer_resume_layouts.py."""
import json
import os
import re

import numpy as np
import pytest

import tensorflow as tf
import tf_keras

from tfx_parallel.components.distributed_trainer import executor
from tfx_parallel.components.distributed_trainer import optimizers
from tfx_parallel.components.distributed_trainer.run import checkpoint


def _model(width: int = 1):
  x = tf_keras.Input((3,), name="x")
  return tf_keras.Model({"x": x}, tf_keras.layers.Dense(width, name="d")(x))


def _trained(optimizer, steps: int = 3):
  """A model and its optimizer after ``steps`` real updates (slots hold state)."""
  tf_keras.utils.set_random_seed(0)
  model = _model()
  model.compile(optimizer=optimizer, loss="mse")
  x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
  model.fit({"x": x}, x.sum(1, keepdims=True), batch_size=8, epochs=steps, verbose=0)
  return model, optimizer


def _values(model, optimizer):
  return [v.numpy() for v in model.weights + optimizer.variables]


def test_a_checkpoint_is_tensorflows_own_and_plain_tensorflow_reads_it(tmp_path):
  directory = str(tmp_path / "ckpt")
  model, opt = _trained(tf_keras.optimizers.Adam(0.1))
  prefix = checkpoint.save(directory, 10, {"model": model, "optimizer": opt},
                           {"records": [{"step": 10}], "layout": "mesh 2x2"})
  # What a user's tooling does, with no code of ours.
  assert tf.train.latest_checkpoint(directory) == prefix == os.path.join(directory, "ckpt-10")
  fresh, fresh_opt = _model(), tf_keras.optimizers.Adam(0.1)
  fresh_opt.build(fresh.trainable_variables)
  tf.train.Checkpoint(model=fresh, optimizer=fresh_opt).read(prefix).assert_consumed()
  for got, want in zip(_values(fresh, fresh_opt), _values(model, opt)):
    np.testing.assert_array_equal(got, want)
  assert int(fresh_opt.iterations.numpy()) == 3
  keys = [k for k, _ in tf.train.list_variables(prefix)]
  assert "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys
  with open(prefix + ".json") as f:
    assert json.load(f) == {"records": [{"step": 10}], "layout": "mesh 2x2", "step": 10}


def test_restore_returns_the_run_state_and_fills_every_variable(tmp_path):
  """Written as the mesh engine holds them (a model never compiled), read as the fit
  engine holds them (compiled: the model tracks its optimizer too)."""
  directory = str(tmp_path / "ckpt")
  model, opt = _trained(tf_keras.optimizers.SGD(0.1, momentum=0.5))
  uncompiled = _model()
  uncompiled.set_weights(model.get_weights())
  checkpoint.save(directory, 4, {"model": uncompiled, "optimizer": opt}, {"epochs": [1]})
  fresh, fresh_opt = _model(), tf_keras.optimizers.SGD(0.1, momentum=0.5)
  fresh.compile(optimizer=fresh_opt, loss="mse")
  fresh_opt.build(fresh.trainable_variables)
  assert not np.allclose(fresh.weights[0].numpy(), model.weights[0].numpy())
  meta = checkpoint.restore(checkpoint.latest(directory),
                            {"model": fresh, "optimizer": fresh_opt})
  assert meta["step"] == 4 and meta["epochs"] == [1]
  for got, want in zip(_values(fresh, fresh_opt), _values(model, opt)):
    np.testing.assert_array_equal(got, want)


def test_the_last_two_are_kept_and_an_uncommitted_write_is_never_read(tmp_path):
  directory = str(tmp_path / "ckpt")
  model, opt = _trained(tf_keras.optimizers.Adam(0.1))
  objects = {"model": model, "optimizer": opt}
  for step in (10, 20, 30):
    checkpoint.save(directory, step, objects, {})
  assert checkpoint.steps(directory) == [20, 30]
  assert sorted(f for f in os.listdir(directory) if f.startswith("ckpt-")) == [
      "ckpt-20.data-00000-of-00001", "ckpt-20.index", "ckpt-20.json",
      "ckpt-30.data-00000-of-00001", "ckpt-30.index", "ckpt-30.json"]
  # What a kill mid-write leaves: step 40's files, torn, never committed.
  tf.train.Checkpoint(**objects).write(os.path.join(directory, "ckpt-40"))
  with open(os.path.join(directory, "ckpt-40.data-00000-of-00001"), "r+b") as f:
    f.truncate(7)
  with open(os.path.join(directory, "ckpt-30.json.tmp-1-ab"), "w") as f:  # Killed mid-rename.
    f.write("{")
  assert checkpoint.latest(directory).endswith("ckpt-30")
  checkpoint.save(directory, 50, objects, {})  # The next save removes the torn files.
  assert checkpoint.steps(directory) == [30, 50]
  assert not [f for f in os.listdir(directory) if f.startswith("ckpt-40") or ".tmp-" in f]
  checkpoint.clear(directory)  # A finished run: nothing left to resume.
  assert checkpoint.latest(directory) is None and checkpoint.steps(directory) == []
  assert not [f for f in os.listdir(directory) if f.startswith("ckpt")]


def test_restore_is_strict_under_plain_sgd_too(tmp_path):
  """Every model and optimizer variable must have a value: a model variable the
  checkpoint lacks is refused (as for any optimizer), naming the directory to remove;
  a plain SGD's unread momentum slots are part of every layout's checkpoint."""
  model, opt = _trained(optimizers.make("sgd", 0.1))
  assert len(opt.momentums) == 2  # kernel and bias: saved like any slot
  directory = str(tmp_path / "ckpt")
  checkpoint.save(directory, 3, {"model": model, "optimizer": opt}, {"layout": "mesh 1x2"})
  same, same_opt = _model(), optimizers.make("sgd", 0.1)
  same_opt.build(same.trainable_variables)
  checkpoint.restore(checkpoint.latest(directory), {"model": same, "optimizer": same_opt})
  assert int(same_opt.iterations.numpy()) == 3
  x = tf_keras.Input((3,), name="x")
  deeper = tf_keras.Model({"x": x}, tf_keras.layers.Dense(1, name="e")(
      tf_keras.layers.Dense(1, name="d")(x)))
  deeper_opt = optimizers.make("sgd", 0.1)
  deeper_opt.build(deeper.trainable_variables)
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match=r"ckpt-3 \(saved by layout mesh 1x2\) does not fit this run's model "
                           r"and optimizer: "):
    checkpoint.restore(checkpoint.latest(directory), {"model": deeper, "optimizer": deeper_opt})
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match=rf"Remove {re.escape(directory)} to train from step 0"):
    checkpoint.restore(checkpoint.latest(directory), {"model": deeper, "optimizer": deeper_opt})


class _Engine:
  """The engine surface restore_checkpoint uses (engines/__init__.py), over a real
  tf_keras model and optimizer on one device."""
  chief = True
  host_blocks = None  # As FitEngine: TensorFlow's own writer.

  def __init__(self):
    self.model, self.optimizer = _trained(tf_keras.optimizers.Adam(0.1))

  def checkpointed(self):
    return {"model": self.model, "optimizer": self.optimizer}


  def describe(self):
    return {"layout": "single", "replicas": 1}


def test_a_checkpoint_of_edited_module_source_is_not_resumed_and_the_console_says_why(
    tmp_path, capsys, monkeypatch):
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import callbacks as cb  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top
  package = tmp_path / "usermods"
  package.mkdir()
  (package / "__init__.py").write_text("")
  source = "import tf_keras\ndef build_model(spec):\n  return None  # {}\n"
  (package / "helpers.py").write_text(source.format("v1"))
  (package / "m.py").write_text("from usermods.helpers import build_model  # v1\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  file_module = user_module.load(module_file=str(package / "m.py"))
  path_module = user_module.load(module_path="usermods.m")
  assert file_module.source_digest == path_module.source_digest != ""
  assert user_module.load(builtin="linear").source_digest == ""
  job = train.Job(config={}, examples_uri="", feature_keys=[], label_key="y", train_rows=8,
                  model_dir="", model_run_dir="", history_dir="",
                  checkpoint_dir=str(tmp_path / "ckpt"))
  engine = _Engine()
  state = cb.RunState(total=8, start_step=0, global_batch=8, steps_per_epoch=4,
                      learning_rate=0.1, records=[{"step": 4, "loss": 1.0}])
  train.save_checkpoint(job, engine, state, 4, path_module.source_digest)
  assert train.restore_checkpoint(job, engine, path_module)[:2] == (4, state.records)
  # Edited: the module's own source, or the helper of its package it takes build_model from.
  (package / "m.py").write_text("from usermods.helpers import build_model  # v2\n")
  assert user_module.load(module_path="usermods.m").source_digest != path_module.source_digest
  (package / "m.py").write_text("from usermods.helpers import build_model  # v1\n")
  assert user_module.load(module_path="usermods.m").source_digest == path_module.source_digest
  (package / "helpers.py").write_text(source.format("v2"))
  edited = user_module.load(module_path="usermods.m")
  assert edited.source_digest != path_module.source_digest
  capsys.readouterr()
  assert train.restore_checkpoint(job, engine, edited) == (0, [], [], 0.0, None, None)
  assert (f"[trainer] checkpoint: {job.checkpoint_dir}/ckpt-4 is not resumed: it was written "
          f"by other source of module usermods.m (sha256 {path_module.source_digest[:12]}, now "
          f"{edited.source_digest[:12]}); training starts at step 0") in capsys.readouterr().out
  assert checkpoint.latest(job.checkpoint_dir) is None  # Removed: it cannot be resumed.


def test_a_checkpoint_of_another_model_is_refused_naming_it(tmp_path):
  directory = str(tmp_path / "ckpt")
  model, opt = _trained(tf_keras.optimizers.Adam(0.1))
  checkpoint.save(directory, 5, {"model": model, "optimizer": opt}, {"layout": "single"})
  wider = _model(width=2)
  with pytest.raises(ValueError, match=r"ckpt-5 \(saved by layout single\) does not fit "
                                       r"this run's model: Received incompatible tensor"):
    checkpoint.restore(checkpoint.latest(directory), {"model": wider})


def test_checkpoints_are_named_by_what_the_run_computes_not_where_it_runs():
  """A rerun with the layout changed (mesh 2x2 -> mirrored x2 or single) finds the
  killed run's checkpoints; one that computes something else does not."""
  base = json.loads(json.dumps(dict(layout="mesh", mesh=[2, 2], devices=0, steps=16,
                                    learning_rate=0.05, steps_per_execution=4)))

  def where(**changes):
    return executor.checkpoint_dir("/root/DistributedTrainer/model/7", "/ex",
                                   checkpoint.run_identity(dict(base, **changes)))
  assert where() == where(layout="mirrored", devices=2) == where(layout="single") \
      == where(steps_per_execution=1, tf32=False, device="cpu")
  assert where() != where(steps=24) and where() != where(learning_rate=0.1)
  assert where().startswith("/root/DistributedTrainer/_checkpoints/")


def test_npz_checkpoints_of_earlier_versions_are_listed_not_read(tmp_path):
  directory = tmp_path / "ckpt"
  directory.mkdir()
  (directory / "ckpt-0000000008.npz").write_bytes(b"x")
  assert checkpoint.legacy(str(directory)) == [str(directory / "ckpt-0000000008.npz")]
  assert checkpoint.latest(str(directory)) is None


def _read_all(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def test_a_streamed_save_is_what_tensorflow_writes_one_variable_at_a_time(tmp_path):
  """With ``host_blocks`` a save after the directory's first streams the variables one
  at a time (each fetched only when its group is written) into the keys and object
  graph of TensorFlow's own first save: a reader cannot tell the two files apart, and
  the strict restore reads it."""
  model, opt = _trained(tf_keras.optimizers.Adam(0.1))
  objects = {"model": model, "optimizer": opt}
  directory = str(tmp_path / "ckpt")
  fetched = []

  def host_blocks(v):
    fetched.append(v.name)
    return [("", v.read_value())]

  first = checkpoint.save(directory, 1, objects, {}, host_blocks=host_blocks)
  assert fetched == []  # The first is TensorFlow's own writer.
  entries = checkpoint._streamable(first, objects)  # pylint: disable=protected-access
  assert entries is not None
  # Every model and optimizer variable (and the compiled model's metric state).
  streamed = [v for _, v in entries[1]]
  assert {id(v) for v in model.weights + opt.variables} <= {id(v) for v in streamed}
  second = checkpoint.save(directory, 2, objects, {}, host_blocks=host_blocks)
  assert sorted(fetched) == sorted(v.name for v in streamed)  # Each once.
  a, b = _read_all(first), _read_all(second)
  assert sorted(a) == sorted(b)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  assert checkpoint.latest(directory) == second
  fresh, fresh_opt = _model(), tf_keras.optimizers.Adam(0.1)
  fresh_opt.build(fresh.trainable_variables)
  checkpoint.restore(second, {"model": fresh, "optimizer": fresh_opt})
  for x, y in zip(_values(fresh, fresh_opt), _values(model, opt)):
    np.testing.assert_array_equal(x, y)


def test_small_variables_share_a_shard_and_a_big_one_has_its_own(tmp_path, monkeypatch):
  """GROUP_BYTES bounds what a streamed save holds in host memory at once (besides one
  variable bigger than it): at 40 bytes, the [3, 1] kernel (12 B) and its two Adam
  slots share shards, and no group exceeds 40 B."""
  model, opt = _trained(tf_keras.optimizers.Adam(0.1))
  objects = {"model": model, "optimizer": opt}
  directory = str(tmp_path / "ckpt")
  held = []

  def host_blocks(v):
    held.append(v.shape.num_elements() * v.dtype.size)
    return [("", v.read_value())]

  checkpoint.save(directory, 1, objects, {}, host_blocks=host_blocks)
  monkeypatch.setattr(checkpoint, "GROUP_BYTES", 40)
  calls = []
  real = tf.raw_ops.SaveV2

  def save_v2(prefix, tensor_names, shape_and_slices, tensors, name=None):
    calls.append(sum(np.asarray(t).nbytes for t in tensors if np.asarray(t).dtype != object))
    return real(prefix=prefix, tensor_names=tensor_names, shape_and_slices=shape_and_slices,
                tensors=tensors, name=name)

  monkeypatch.setattr(tf.raw_ops, "SaveV2", save_v2)
  second = checkpoint.save(directory, 2, objects, {}, host_blocks=host_blocks)
  # The object graph (a string) rides in the last group.
  assert 1 < len(calls) < len(held)
  assert max(calls) <= 40
  assert sum(calls) == sum(held)
  data = [f for f in os.listdir(directory) if f.startswith("ckpt-2.data-")]
  assert len(data) == len(calls)
  assert sorted(_read_all(second)) == sorted(_read_all(checkpoint._prefix(directory, 1)))  # pylint: disable=protected-access


def test_a_directory_whose_checkpoint_is_of_other_objects_gets_tensorflows_writer(tmp_path):
  """The previous checkpoint's object graph must fit the live objects; a wider model's
  does not (other shapes), so the save is TensorFlow's own, and nothing is fetched."""
  directory = str(tmp_path / "ckpt")
  model, opt = _trained(tf_keras.optimizers.Adam(0.1))
  checkpoint.save(directory, 1, {"model": model, "optimizer": opt}, {})
  wide, wide_opt = _model(2), tf_keras.optimizers.Adam(0.1)
  wide_opt.build(wide.trainable_variables)
  objects = {"model": wide, "optimizer": wide_opt}
  assert checkpoint._streamable(checkpoint.latest(directory), objects) is None  # pylint: disable=protected-access
  fetched = []
  prefix = checkpoint.save(directory, 2, objects, {},
                           host_blocks=lambda v: fetched.append(v) or [("", v.read_value())])
  assert fetched == []
  assert tf.train.load_checkpoint(prefix).get_variable_to_shape_map()[
      "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE"] == [3, 2]
