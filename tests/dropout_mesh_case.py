"""A tf_keras Dropout model on the mesh, run in one process of 4 logical CPUs.

``python tests/dropout_mesh_case.py`` builds ``MeshTrainer`` on meshes 1x2, 2x1 and 2x2
for a model with ``Dropout(RATE)`` and no call of tf_keras's
``enable_tf_random_generator`` in the module (the mesh turns it on for its builds), and
prints one ``RESULT{json}`` line: each mesh's losses, the dropout masks each device
drew, the generator state's layout, whether the flag is off again after each build;
rate 0.0 against the same model without Dropout; evaluation (training=False) of the
rate-RATE model against the model without Dropout. With the argument ``lazy``: a Dropout
the model's build leaves unbuilt (:func:`lazy`).
"""
import json
import sys

from tfx_parallel.components.common import tfenv

RATE, STEPS, GLOBAL_BATCH, WIDTH = 0.5, 20, 8, 8
MESHES = ((1, 2), (2, 1), (2, 2))


def build(rate):
  """x (4 floats) -> Dense(WIDTH) -> Dropout(rate) (none when None) -> Dense(1); seeded
  initialisers, so every build starts from the same weights."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  init = tf_keras.initializers
  x = tf_keras.Input((4,), name="x")
  h = tf_keras.layers.Dense(WIDTH, activation="relu", name="hidden",
                            kernel_initializer=init.GlorotUniform(seed=1))(x)
  if rate is not None:
    h = tf_keras.layers.Dropout(rate, name="drop")(h)
  out = tf_keras.layers.Dense(1, name="head", kernel_initializer=init.GlorotUniform(seed=2))(h)
  return tf_keras.Model({"x": x}, out)


def build_unseeded():
  """Dense -> Dropout -> Dense, default (unseeded) initialisers: drawn from the global seed."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  x = tf_keras.Input((4,), name="x")
  h = tf_keras.layers.Dropout(RATE)(tf_keras.layers.Dense(WIDTH, activation="relu")(x))
  return tf_keras.Model({"x": x}, tf_keras.layers.Dense(1)(h))


def build_train_only_dropout():
  """A subclassed Dense -> Dropout -> Dense whose Dropout runs only when training, so
  ``model.build`` (training unset) leaves it unbuilt: tf_keras would build it, and create
  its generator's state, at the first training step."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  init = tf_keras.initializers

  class Model(tf_keras.Model):

    def __init__(self):
      super().__init__()
      self.hidden = tf_keras.layers.Dense(WIDTH, kernel_initializer=init.GlorotUniform(seed=1))
      self.drop = tf_keras.layers.Dropout(RATE)
      self.head = tf_keras.layers.Dense(1, kernel_initializer=init.GlorotUniform(seed=2))

    def call(self, inputs, training=None):
      h = self.hidden(inputs["x"])
      if training:
        h = self.drop(h, training=True)
      return self.head(h)

  model = Model()
  model.build({"x": (None, 4)})
  return model


def lazy() -> dict:
  """A Dropout the model's build leaves unbuilt (build_train_only_dropout), on mesh 2x2:
  its generator's state is a replicated DVariable made by the mesh's builds, the devices
  of the model axis apply one mask, and two trainers from one seed train alike."""
  tfenv.split_cpu(4)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  x = rng.normal(size=(GLOBAL_BATCH, 4)).astype("float32")
  features, labels = {"x": tf.constant(x)}, tf.constant(x[:, :1] * 2.0)
  result = {"losses": []}
  for _ in range(2):
    tf_keras.utils.set_random_seed(3)
    tr = mesh_runtime.MeshTrainer(build_train_only_dropout, mesh_shape=(2, 2), rules=None,
                                  loss_fn=tf_keras.losses.MeanSquaredError(), optimizer="sgd",
                                  learning_rate=0.05, global_batch=GLOBAL_BATCH)
    result["losses"].append([tr.step(features, labels) for _ in range(3)])
  generator = tr.model.drop._random_generator._generator  # pylint: disable=protected-access
  result["state_is_dvariable"] = isinstance(generator.state, dtensor.DVariable)
  ones = dtensor.call_with_layout(
      tf.ones, dtensor.Layout([mesh_runtime.BATCH_AXIS, dtensor.UNSHARDED], tr.mesh),
      shape=(GLOBAL_BATCH, WIDTH))
  result["masks"] = [(p.numpy() != 0).astype(int).tolist() for p in dtensor.unpack(
      tf.function(lambda t: tr.model.drop(t, training=True))(ones))]
  return result


def main() -> dict:
  tfenv.split_cpu(4)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  x = rng.normal(size=(GLOBAL_BATCH, 4)).astype("float32")
  y = (x @ np.array([[1.0], [2.0], [-1.0], [0.5]], "float32") + 3.0).astype("float32")
  features, labels = {"x": tf.constant(x)}, tf.constant(y)
  mse = tf_keras.losses.MeanSquaredError()

  def trainer(mesh, rate):
    tf_keras.utils.set_random_seed(3)
    return mesh_runtime.MeshTrainer(lambda: build(rate), mesh_shape=mesh, rules=None,
                                    loss_fn=mse, optimizer="sgd", learning_rate=0.05,
                                    global_batch=GLOBAL_BATCH)

  result = {"meshes": {}}
  for mesh in MESHES:
    tr = trainer(mesh, RATE)
    flag_after_build = tf_keras.backend.experimental.is_tf_random_generator_enabled()
    generator = tr.model.get_layer("drop")._random_generator._generator  # pylint: disable=protected-access
    before = None if generator is None else generator.state.numpy().tolist()
    losses = [tr.step(features, labels) for _ in range(STEPS)]
    state = generator.state
    # The masks the layer draws on a batch of ones split over the batch axis, per device.
    ones = dtensor.call_with_layout(
        tf.ones, dtensor.Layout([mesh_runtime.BATCH_AXIS, dtensor.UNSHARDED], tr.mesh),
        shape=(GLOBAL_BATCH, WIDTH))
    drop = tr.model.get_layer("drop")
    masks = [(p.numpy() != 0).astype(int).tolist() for p in dtensor.unpack(
        tf.function(lambda t, _drop=drop: _drop(t, training=True))(ones))]
    # And on activations split over the model axis too (a column-split Dense's output):
    # each device draws its own block's mask.
    split = dtensor.call_with_layout(
        tf.ones, dtensor.Layout([mesh_runtime.BATCH_AXIS, mesh_runtime.MODEL_AXIS], tr.mesh),
        shape=(GLOBAL_BATCH, WIDTH))
    split_masks = [(p.numpy() != 0).astype(int).tolist() for p in dtensor.unpack(
        tf.function(lambda t, _drop=drop: _drop(t, training=True))(split))]
    result["meshes"]["x".join(map(str, mesh))] = {
        "split_masks": split_masks,
        "losses": losses, "masks": masks, "flag_after_build": flag_after_build,
        "state_is_dvariable": isinstance(state, dtensor.DVariable),
        "state_layout": list(dtensor.fetch_layout(state).sharding_specs),
        "state_advanced": state.numpy().tolist() != before,
        "gathered": tr.gathered, "rules": {k: list(v) for k, v in tr.rules.items()}}

  # A checkpoint of the 2x2 trainer (model and optimizer; the generator's state is in
  # neither) is written twice, as a run does (DTensor's own save, then streamed blocks),
  # and a fresh trainer restores it strictly and continues as the saved one does.
  import tempfile  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import checkpoint  # pylint: disable=g-import-not-at-top
  directory = tempfile.mkdtemp()
  saved = trainer((2, 2), RATE)
  saved.step(features, labels)
  objects = lambda t: {"model": t.model, "optimizer": t.optimizer}  # pylint: disable=unnecessary-lambda-assignment
  checkpoint.save(directory, 1, objects(saved), {}, host_blocks=saved.host_blocks)
  saved.step(features, labels)
  checkpoint.save(directory, 2, objects(saved), {}, host_blocks=saved.host_blocks)
  resumed = trainer((2, 2), RATE)
  checkpoint.restore(checkpoint.latest(directory), objects(resumed))
  result["restored_equal"] = all(np.array_equal(a, b) for a, b in zip(
      resumed.full_weights(), saved.full_weights()))
  result["restored_losses"] = [resumed.step(features, labels) for _ in range(5)]

  # Rate 0.0 trains exactly as the model without Dropout; the rate-RATE model evaluates
  # (training=False) as the model without Dropout with the same weights.
  zero, plain = trainer((2, 2), 0.0), trainer((2, 2), None)
  result["rate_zero_losses"] = [zero.step(features, labels) for _ in range(3)]
  result["plain_losses"] = [plain.step(features, labels) for _ in range(3)]
  dropped, plain = trainer((2, 2), RATE), trainer((2, 2), None)
  per_example = lambda t, o: tf.reduce_mean(tf.square(t - o), axis=-1)  # pylint: disable=unnecessary-lambda-assignment
  result["eval_dropout"] = list(dropped.evaluation_sums(per_example)(features, labels))
  result["eval_plain"] = list(plain.evaluation_sums(per_example)(features, labels))
  # Unseeded initialisers: the mesh starts from the weights a plain build draws from the
  # same seed with the generator on (the probe's draws from tf_keras's seed sequence
  # are undone before the real build).
  tf_keras.backend.experimental.enable_tf_random_generator()
  tf_keras.utils.set_random_seed(5)
  plain = build_unseeded().get_weights()
  tf_keras.backend.experimental.disable_tf_random_generator()
  tf_keras.utils.set_random_seed(5)
  placed = mesh_runtime.MeshTrainer(build_unseeded, mesh_shape=(1, 2), rules=None, loss_fn=mse,
                                    optimizer="sgd", learning_rate=0.05,
                                    global_batch=GLOBAL_BATCH).full_weights()
  result["unseeded_start_equal"] = [bool(np.array_equal(a, b)) for a, b in zip(plain, placed)]
  result["flag_at_end"] = tf_keras.backend.experimental.is_tf_random_generator_enabled()
  return result


if __name__ == "__main__":
  print("RESULT" + json.dumps(lazy() if sys.argv[1:] == ["lazy"] else main(), default=float))
  sys.stdout.flush()
