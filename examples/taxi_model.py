"""A complete user module for DistributedTrainer: the Chicago taxi columns, strings included.

    tfx-parallel run --data FILE.csv --label COL [--task binary] \
        --module-file examples/taxi_model.py [--hparams '{"hidden_units": [64, 32]}'] \
        --layout single|mirrored|multi_worker|mesh

The trainer scans the data, builds a ``ModelSpec`` and calls ``build_model(spec)``. String
columns (``payment_type``, ``company``) arrive as int64 ids (0 = missing or unseen, then
the vocabulary, most frequent first): the lookup runs in the input pipeline and in the
exported serving signature, so this file has no preprocessing, no strategy and no mesh
code. The same model trains for regression (1 value), binary (1 logit) and multiclass
(``spec.num_classes`` logits): ``spec.output_units`` says which.

hparams: ``hidden_units`` (default [64, 32]), ``embedding_dim`` (default: 4 * num_ids **
0.25 rounded up to a multiple of 8, at most 16), ``dropout`` (default 0.0).

On a mesh, ``layout_rules`` splits each embedding table by its columns over the model
axis, which must divide the width: the default widths (8 or 16) divide by a model axis
of 1, 2, 4 or 8, whatever the CSV's columns. An ``embedding_dim`` you set must too (the
trainer's error names the hparam and the multiple it needs).
"""
import math

import tf_keras

EMBEDDING_MULTIPLE = 8  # Default widths divide by any model axis up to 8.


def embedding_width(spec, num_ids: int) -> int:
  """hparams ``embedding_dim``, else 4 * num_ids ** 0.25 rounded up to a multiple of
  :data:`EMBEDDING_MULTIPLE`, at most 16 (a 2-value column: 8; 1,000 values: 16)."""
  if "embedding_dim" in spec.hparams:
    return int(spec.hparams["embedding_dim"])
  width = EMBEDDING_MULTIPLE * math.ceil(4 * num_ids ** 0.25 / EMBEDDING_MULTIPLE)
  return min(16, width)


def build_model(spec) -> tf_keras.Model:
  """A dict of tf_keras.Inputs keyed by feature name -> embeddings + MLP -> the task's head."""
  hidden = spec.hparams.get("hidden_units", [64, 32])
  dropout = float(spec.hparams.get("dropout", 0.0))
  inputs, parts, numeric = {}, [], []
  for f in spec.features:
    if f.is_string:
      inputs[f.name] = tf_keras.Input(shape=f.shape, name=f.name, dtype="int64")
      emb = tf_keras.layers.Embedding(f.num_ids, embedding_width(spec, f.num_ids),
                                      name=f"{f.name}_embedding")(inputs[f.name])
      parts.append(tf_keras.layers.Flatten(name=f"{f.name}_vector")(emb))
    else:  # float32 (int64 inputs are cast to the Input's dtype by tf_keras).
      inputs[f.name] = tf_keras.Input(shape=f.shape, name=f.name, dtype="float32")
      numeric.append(inputs[f.name])
  if numeric:  # Standardised by the trainer when config normalize is on (the CLI's default).
    parts.append(numeric[0] if len(numeric) == 1
                 else tf_keras.layers.Concatenate(name="numeric")(numeric))
  h = parts[0] if len(parts) == 1 else tf_keras.layers.Concatenate(name="features")(parts)
  for i, width in enumerate(hidden, 1):
    h = tf_keras.layers.Dense(width, activation="relu", name=f"hidden_{i}")(h)
    if dropout:
      h = tf_keras.layers.Dropout(dropout, name=f"dropout_{i}")(h)
  out = tf_keras.layers.Dense(spec.output_units, name="output")(h)
  return tf_keras.Model(inputs, out, name="taxi_model")


def layout_rules(spec):
  """Mesh layouts: Megatron pairs for the hidden layers, embeddings split by columns (a
  CSV without string columns has no embedding, and no rule for one)."""
  rules = {}
  if any(f.is_string for f in spec.features):
    rules[r".*_embedding/embeddings"] = (None, "model")
  for i in range(1, len(spec.hparams.get("hidden_units", [64, 32])) + 1):
    rules[rf".*hidden_{i}/kernel"] = (None, "model") if i % 2 else ("model", None)
  return rules
