"""The parity tests' user module: an embedding of a string feature, two Dense layers and
a multiclass head (issue #12)."""
import tf_keras


def build_model(spec):
  x = tf_keras.Input((1,), name="x")
  color = tf_keras.Input((1,), name="color", dtype="int64")
  emb = tf_keras.layers.Embedding(spec.feature("color").num_ids, 4, name="color_embedding")(color)
  h = tf_keras.layers.Concatenate()([x, tf_keras.layers.Flatten()(emb)])
  h = tf_keras.layers.Dense(8, activation="relu", name="hidden_1")(h)
  h = tf_keras.layers.Dense(8, activation="relu", name="hidden_2")(h)
  out = tf_keras.layers.Dense(spec.output_units, name="head")(h)
  return tf_keras.Model({"x": x, "color": color}, out)
