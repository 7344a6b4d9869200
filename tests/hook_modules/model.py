"""The model every hook module of the parity tests trains (tests/hook_cases.py)."""
import tf_keras


def build_model(spec):
  """4 numeric inputs, a hidden Dense of 4 and one output; seeded initialisers."""
  init = tf_keras.initializers
  inputs = {f.name: tf_keras.Input((1,), name=f.name) for f in spec.features}
  x = tf_keras.layers.Concatenate()([inputs[f.name] for f in spec.features])
  h = tf_keras.layers.Dense(4, activation="tanh", name="hidden",
                            kernel_initializer=init.GlorotUniform(seed=1),
                            bias_initializer=init.RandomUniform(seed=2))(x)
  out = tf_keras.layers.Dense(1, name="head", kernel_initializer=init.GlorotUniform(seed=3))(h)
  return tf_keras.Model(inputs, out)
