"""Built-in ``mlp`` model: numeric features and an embedding per string feature,
concatenated, then ReLU layers ``hidden_1``, ``hidden_2``, ... and a linear ``output``.

hparams: ``hidden_units`` (list of widths; the trainer passes config ``hidden_units``,
whose default applies here too),
``embedding_dim`` (default 8). Works for every task (``spec.output_units`` outputs).
The executor checks their types before training (hyperparameters.BUILTIN_HPARAMS): a
tuned ``hidden_units`` int is named there, not a TypeError here.
"""
import tf_keras

from tfx_parallel.components.distributed_trainer import models
from tfx_parallel.components.distributed_trainer.config import TrainerConfig

DEFAULT_EMBEDDING_DIM = 8


def build_model(spec) -> tf_keras.Model:
  inputs = models.inputs(spec)
  hidden = list(spec.hparams.get("hidden_units", TrainerConfig.hidden_units))
  dim = int(spec.hparams.get("embedding_dim", DEFAULT_EMBEDDING_DIM))
  parts = []
  numeric = models.numeric_block(spec, inputs)
  if numeric is not None:
    parts.append(numeric)
  for f in spec.string_features:
    emb = tf_keras.layers.Embedding(f.num_ids, dim, name=f"{f.name}_embedding")(inputs[f.name])
    parts.append(tf_keras.layers.Reshape((dim,), name=f"{f.name}_vector")(emb))
  h = parts[0] if len(parts) == 1 else tf_keras.layers.Concatenate(name="features")(parts)
  for i, width in enumerate(hidden, 1):
    h = tf_keras.layers.Dense(width, activation="relu", name=f"hidden_{i}")(h)
  out = tf_keras.layers.Dense(spec.output_units, name="output")(h)
  return tf_keras.Model(inputs, out, name="mlp")
