"""Exports gathered (unsharded) parameters as a tf_keras SavedModel for serving.

The serving signature takes serialized tf.Example (`examples`, 1-D string), so the
stock TFX Evaluator (TFMA), Pusher and TF Serving accept the model unchanged. Feature
padding is dropped and feature normalisation is folded into the first kernel.
"""
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf
import tf_keras

from tfx_parallel.components.common import keys
from tfx_parallel.components.distributed_trainer import model as model_lib


def unpad_and_fold(values: Dict[str, np.ndarray], specs: Sequence[model_lib.ParamSpec],
                   num_features: int, mean: Optional[np.ndarray] = None,
                   std: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
  """Drops padded feature rows; folds x' = (x - mean) / std into the first layer."""
  out = dict(values)
  first_k, first_b = specs[0].name, specs[1].name
  kernel = out[first_k][:num_features]
  bias = out[first_b]
  if mean is not None:
    kernel = kernel / std[:, None]
    bias = bias - mean @ kernel
  out[first_k] = kernel.astype(np.float32)
  out[first_b] = np.asarray(bias, np.float32)
  return out


def build_keras_model(values: Dict[str, np.ndarray],
                      specs: Sequence[model_lib.ParamSpec]) -> tf_keras.Model:
  n = len(specs) // 2
  inputs = tf_keras.Input(shape=(values[specs[0].name].shape[0],), name="features")
  h = inputs
  for i in range(n):
    layer = tf_keras.layers.Dense(values[specs[2 * i].name].shape[1],
                                  activation="relu" if i < n - 1 else None,
                                  name=f"dense_{i}")
    h = layer(h)
    layer.set_weights([values[specs[2 * i].name], values[specs[2 * i + 1].name]])
  return tf_keras.Model(inputs, h)


def export(path: str, values: Dict[str, np.ndarray], specs, feature_keys: Sequence[str],
           label_key: str) -> tf_keras.Model:
  model = build_keras_model(values, specs)
  feature_spec = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
                  for k in feature_keys}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve(examples):
    parsed = tf.io.parse_example(examples, feature_spec)
    x = tf.stack([parsed[k] for k in feature_keys], axis=1)
    return {"predictions": model(x)}

  model.save(path, save_format="tf", signatures={keys.SERVING_SIGNATURE: serve})
  del label_key  # The label is read by evaluators from the examples, not the model.
  return model
