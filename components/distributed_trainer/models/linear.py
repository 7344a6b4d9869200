"""Built-in ``linear`` model: one Dense layer over the numeric features plus, for each
string feature, a per-id weight (an Embedding of width ``spec.output_units``, i.e. a
one-hot linear term). Zero-initialised, so training from scratch is deterministic.

Works for every task: 1 output (regression value, binary logit) or K logits.
"""
import tf_keras

from tfx_parallel.components.distributed_trainer import models

LINEAR_LAYER = "linear"  # The Dense layer over the numeric features (history "weights").


def build_model(spec) -> tf_keras.Model:
  inputs = models.inputs(spec)
  units = spec.output_units
  terms = []
  numeric = models.numeric_block(spec, inputs)
  if numeric is not None:
    terms.append(tf_keras.layers.Dense(units, kernel_initializer="zeros",
                                       name=LINEAR_LAYER)(numeric))
  for f in spec.string_features:
    weights = tf_keras.layers.Embedding(f.num_ids, units, embeddings_initializer="zeros",
                                        name=f"{f.name}_weights")(inputs[f.name])
    terms.append(tf_keras.layers.Reshape((units,), name=f"{f.name}_term")(weights))
  out = terms[0] if len(terms) == 1 else tf_keras.layers.Add(name="sum")(terms)
  return tf_keras.Model(inputs, out, name="linear")
