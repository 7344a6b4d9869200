"""The mesh parity model and the checks run inside one process per mesh shape.

``python tests/mesh_cases.py B M`` splits the CPU into max(2, B*M) logical devices,
trains the parity model (an Embedding of a string feature given as int64 ids, two
Dense layers and a 3-class head) for STEPS steps with each optimizer twice: with plain
tf_keras ``model.fit`` on one device (the reference) and with ``MeshTrainer`` on a BxM
mesh, on the same global batches, one step per call and then 3 + 2 steps per call; on
1x2 it also reads the shards, the optimizer-slot layouts, round-trips ``state()`` and
exports. It prints one ``RESULT{json}`` line.
"""
import json
import sys

from tfx_parallel.components.common import tfenv

GLOBAL_BATCH, STEPS, LR, VOCAB = 8, 5, 0.1, 6
OPTIMIZERS = ("sgd", "adam")


def build_model():
  """The parity model; seeded initialisers, so every build starts from the same weights."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  init = tf_keras.initializers
  color = tf_keras.Input((1,), dtype="int64", name="color")
  x = tf_keras.Input((1,), dtype="float32", name="x")
  e = tf_keras.layers.Embedding(VOCAB + 1, 4, name="color_embedding",
                                embeddings_initializer=init.RandomUniform(seed=1))(color)
  h = tf_keras.layers.Concatenate()([tf_keras.layers.Flatten()(e), x])
  h = tf_keras.layers.Dense(8, activation="relu", name="hidden_1",
                            kernel_initializer=init.GlorotUniform(seed=2))(h)
  h = tf_keras.layers.Dense(4, activation="relu", name="hidden_2",
                            kernel_initializer=init.GlorotUniform(seed=3))(h)
  out = tf_keras.layers.Dense(3, name="head", kernel_initializer=init.GlorotUniform(seed=4))(h)
  return tf_keras.Model({"color": color, "x": x}, out)


def build_unseeded_model():
  """Same shapes, default (unseeded) initialisers: drawn from the global seed."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  color = tf_keras.Input((1,), dtype="int64", name="color")
  x = tf_keras.Input((1,), dtype="float32", name="x")
  e = tf_keras.layers.Flatten()(tf_keras.layers.Embedding(VOCAB + 1, 4)(color))
  h = tf_keras.layers.Dense(8, activation="relu")(tf_keras.layers.Concatenate()([e, x]))
  return tf_keras.Model({"color": color, "x": x}, tf_keras.layers.Dense(3)(h))


def build_wide_deep_model():
  """A column-split Dense whose output is concatenated with the raw features (not a
  Megatron hand-off): its activations must be gathered before the concat."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  init = tf_keras.initializers
  color = tf_keras.Input((1,), dtype="int64", name="color")
  x = tf_keras.Input((1,), dtype="float32", name="x")
  deep = tf_keras.layers.Dense(8, activation="relu", name="deep",
                               kernel_initializer=init.GlorotUniform(seed=5))(x)
  wide = tf_keras.layers.Concatenate()([deep, x, tf_keras.layers.Flatten()(
      tf_keras.layers.Embedding(VOCAB + 1, 2, name="wide_embedding",
                                embeddings_initializer=init.RandomUniform(seed=6))(color))])
  out = tf_keras.layers.Dense(3, name="head", kernel_initializer=init.GlorotUniform(seed=7))(wide)
  return tf_keras.Model({"color": color, "x": x}, out)


def batches(steps=STEPS, seed=0):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  return [({"color": rng.integers(0, VOCAB + 1, (GLOBAL_BATCH, 1)).astype(np.int64),
            "x": rng.normal(size=(GLOBAL_BATCH, 1)).astype(np.float32)},
           rng.integers(0, 3, (GLOBAL_BATCH, 1)).astype(np.int64)) for _ in range(steps)]


def loss_fn():
  import tf_keras  # pylint: disable=g-import-not-at-top
  return tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def reference(optimizer, data, build=build_model):
  """Single device, plain tf_keras ``model.fit`` on the same global batches."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import optimizers  # pylint: disable=g-import-not-at-top
  model = build()
  model.compile(optimizer=optimizers.make(optimizer, LR), loss=loss_fn())
  features = {k: np.concatenate([f[k] for f, _ in data]) for k in data[0][0]}
  labels = np.concatenate([y for _, y in data])
  hist = model.fit(features, labels, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False,
                   verbose=0)
  return model, hist


def _tolist(values):
  return [v.tolist() for v in values]


def main(b: int, m: int):
  tfenv.split_cpu(max(2, b * m))
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # On GPUs (create_mesh picks them when present) parity needs full float32 matmuls.
  tf.config.experimental.enable_tensor_float_32_execution(False)
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import sharding  # pylint: disable=g-import-not-at-top

  def trainer(optimizer, build=build_model, rules=None):
    return mesh_runtime.MeshTrainer(build, mesh_shape=(b, m), rules=rules, loss_fn=loss_fn(),
                                    optimizer=optimizer, learning_rate=LR,
                                    global_batch=GLOBAL_BATCH, module_name="parity_model")

  data = batches()
  result = {"parity": {}, "devices": list(trainer("sgd").mesh.local_devices())}
  for optimizer in OPTIMIZERS:
    ref, hist = reference(optimizer, data)
    tr = trainer(optimizer)
    initial = tr.full_weights()
    losses = [tr.step(f, y) for f, y in data]
    result["parity"][optimizer] = {
        "initial": _tolist(initial), "reference_initial": _tolist(build_model().get_weights()),
        "weights": _tolist(tr.full_weights()), "reference": _tolist(ref.get_weights()),
        "losses": losses, "reference_mean_loss": hist.history["loss"][-1],
        "names": [w.name for w in ref.weights],
        "optimizer_state": sorted(k for k in tr.state() if k.startswith("optimizer/"))}
  # Several steps per call (steps_per_execution, as MeshEngine runs them): executions of
  # 3 then 2 steps, each one DTensor call over the stacked batches.
  for optimizer in OPTIMIZERS:
    ref, hist = reference(optimizer, data)
    tr = trainer(optimizer)
    losses = []
    for chunk in (data[:3], data[3:]):
      losses += tr.fetch([tr.steps_async(
          {k: np.stack([f[k] for f, _ in chunk]) for k in chunk[0][0]},
          np.stack([y for _, y in chunk]))])
    result["parity_per_call"] = dict(result.get("parity_per_call", {}), **{optimizer: {
        "weights": _tolist(tr.full_weights()), "reference": _tolist(ref.get_weights()),
        "losses": losses, "reference_mean_loss": hist.history["loss"][-1]}})
  if (b, m) != (1, 2):
    return result

  # Sharding is real: shard shapes, the blocks themselves, slot layouts.
  tr = trainer("adam")
  full = dict(zip([sharding.variable_path(v) for v in tr.model.weights], tr.full_weights()))
  blocks = {}
  for v in tr.model.weights:
    layout = dtensor.fetch_layout(v)
    parts = [p.numpy() for p in dtensor.unpack(v.read_value())]
    axis = [i for i, s in enumerate(layout.sharding_specs) if s == "model"]
    joined = np.concatenate(parts, axis=axis[0]) if axis else parts[0]
    blocks[sharding.variable_path(v)] = {
        "global": v.shape.as_list(), "local": list(parts[0].shape),
        "local_from_layout": list(layout.local_shape_from_global_shape(v.shape.as_list())),
        "joined_equals_full": bool(np.array_equal(joined, full[sharding.variable_path(v)])),
        "distinct_blocks": bool(axis) and not np.array_equal(parts[0], parts[1])}
  result["blocks"] = blocks
  result["shard_shapes"] = {k: list(v) for k, v in tr.shard_shapes().items()}
  result["layouts"] = {k: list(v) for k, v in tr.layouts().items()}
  result["rules"] = {k: list(v) for k, v in tr.rules.items()}
  result["gathered"] = tr.gathered

  # Split activations feeding a concat (not a Megatron hand-off) still train correctly.
  ref, _ = reference("sgd", data, build_wide_deep_model)
  wide = trainer("sgd", build_wide_deep_model)
  for f, y in data:
    wide.step(f, y)
  result["wide_deep"] = {"weights": _tolist(wide.full_weights()),
                         "reference": _tolist(ref.get_weights()),
                         "rules": {k: list(v) for k, v in wide.rules.items()},
                         "gathered": wide.gathered}

  # state() / load_state(): 3 steps, save, 2 more; a fresh trainer loads and does the 2.
  more = batches(steps=5, seed=1)
  for f, y in more[:3]:
    tr.step(f, y)
  saved = tr.state()
  continued = [tr.step(f, y) for f, y in more[3:]]
  resumed = trainer("adam")
  fresh_equals_saved = all(np.array_equal(a, saved["model/" + sharding.variable_path(v)])
                           for a, v in zip(resumed.full_weights(), resumed.model.weights))
  resumed.load_state(saved)
  result["resume"] = {
      "losses": continued, "resumed_losses": [resumed.step(f, y) for f, y in more[3:]],
      "weights": _tolist(tr.full_weights()), "resumed_weights": _tolist(resumed.full_weights()),
      "state_keys": sorted(saved), "fresh_equals_saved": fresh_equals_saved}

  # Export: a plain model built outside any mesh takes the unsharded weights.
  plain = build_model()
  plain.set_weights(tr.full_weights())
  f, _ = data[0]
  result["export"] = {
      "plain_is_dtensor": any(isinstance(v, dtensor.DVariable) for v in plain.weights),
      "mesh_is_dtensor": all(isinstance(v, dtensor.DVariable) for v in tr.model.weights),
      "plain_outputs": plain(f).numpy().tolist(),
      "mesh_outputs": dtensor.unpack(dtensor.relayout(
          tr.model({k: tr._pack(v) for k, v in f.items()}),  # pylint: disable=protected-access
          dtensor.Layout.replicated(tr.mesh, 2)))[0].numpy().tolist()}

  # A mesh model starts from the weights a plain build would have from the same seed.
  tf_keras.utils.set_random_seed(7)
  plain_seeded = build_unseeded_model().get_weights()
  tf_keras.utils.set_random_seed(7)
  result["seeded_start_equal"] = all(
      np.array_equal(a, c) for a, c in zip(plain_seeded, trainer("sgd", build_unseeded_model)
                                           .full_weights()))

  # A bad rule is rejected when the trainer is built, before any step.
  try:
    trainer("sgd", rules={r"head/kernel": (None, "model")})
    result["bad_rule"] = None
  except sharding.ShardingError as e:
    result["bad_rule"] = {"message": str(e), "module": e.module, "variable": e.variable,
                          "rule": e.rule}
  return result


if __name__ == "__main__":
  print("RESULT" + json.dumps(main(int(sys.argv[1]), int(sys.argv[2]))))
