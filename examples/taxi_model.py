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
0.25, at most 16), ``dropout`` (default 0.0).
"""
import tf_keras


def build_model(spec) -> tf_keras.Model:
  """A dict of tf_keras.Inputs keyed by feature name -> embeddings + MLP -> the task's head."""
  hidden = spec.hparams.get("hidden_units", [64, 32])
  dropout = float(spec.hparams.get("dropout", 0.0))
  inputs, parts, numeric = {}, [], []
  for f in spec.features:
    if f.is_string:
      inputs[f.name] = tf_keras.Input(shape=f.shape, name=f.name, dtype="int64")
      dim = int(spec.hparams.get("embedding_dim", min(16, round(4 * f.num_ids ** 0.25))))
      emb = tf_keras.layers.Embedding(f.num_ids, dim, name=f"{f.name}_embedding")(inputs[f.name])
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
  """Mesh layouts: Megatron pairs for the hidden layers, embeddings split by columns."""
  rules = {r".*_embedding/embeddings": (None, "model")}
  for i in range(1, len(spec.hparams.get("hidden_units", [64, 32])) + 1):
    rules[rf".*hidden_{i}/kernel"] = (None, "model") if i % 2 else ("model", None)
  return rules
