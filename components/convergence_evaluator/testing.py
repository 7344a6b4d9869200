"""Builders of small input artifacts for ConvergenceEvaluator tests and benchmarks.

They write exactly what the upstream components promise (see the component docstring):
an ``Examples`` artifact of gzip TFRecords with the synthetic-data custom properties,
a tf_keras linear ``Model`` exported with the ``serving_default`` signature (serialized
``tf.Example`` under ``examples`` -> ``{'predictions': float32 [N, 1]}``), and a
``TrainingHistory`` with ``history.json``. No TFX or TensorFlow behaviour is faked.
"""
import json
import math
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from tfx_parallel.pipeline import tfenv

tfenv.prepare()

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf
from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.utils import path_utils

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.common import keys


def synthetic_data(rows: int, true_weights: Sequence[float], true_bias: float,
                   noise: float = 0.0, seed: int = 0):
  """Returns (features [rows, F] float32, labels [rows] float32) of y = x.w + b + noise."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, len(true_weights))).astype(np.float32)
  y = x @ np.asarray(true_weights, np.float32) + np.float32(true_bias)
  y = y + noise * rng.normal(size=rows).astype(np.float32)
  return x, y.astype(np.float32)


def serialize_examples(features: np.ndarray, labels: np.ndarray,
                       feature_keys: Sequence[str], label_key: str,
                       missing: Optional[np.ndarray] = None,
                       int_label: bool = False) -> List[bytes]:
  """Serialized tf.Examples; ``missing[i, j]`` True leaves feature j out of row i."""
  out = []
  for i, (row, label) in enumerate(zip(features, labels)):
    feature = {}
    for j, key in enumerate(feature_keys):
      if missing is not None and missing[i, j]:
        continue
      feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=[row[j]]))
    if int_label:
      feature[label_key] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
    else:
      feature[label_key] = tf.train.Feature(float_list=tf.train.FloatList(value=[label]))
    out.append(tf.train.Example(features=tf.train.Features(feature=feature))
               .SerializeToString())
  return out


def write_examples(uri: str, splits: Dict[str, List[bytes]], feature_keys: Sequence[str],
                   label_key: str, true_weights: Optional[Sequence[float]] = None,
                   true_bias: Optional[float] = None,
                   shards: int = 1) -> standard_artifacts.Examples:
  """Writes ``Split-<name>/data_tfrecord-*.gz`` files and returns the Examples artifact."""
  for split, records in splits.items():
    split_dir = os.path.join(uri, f"Split-{split}")
    os.makedirs(split_dir, exist_ok=True)
    for shard in range(shards):
      name = f"{keys.TFRECORD_PREFIX}-{shard:05d}-of-{shards:05d}.gz"
      with tf.io.TFRecordWriter(os.path.join(split_dir, name), options="GZIP") as writer:
        for record in records[shard::shards]:
          writer.write(record)
  examples = standard_artifacts.Examples()
  examples.uri = uri
  examples.split_names = artifact_utils.encode_split_names(sorted(splits))
  examples.set_string_custom_property(keys.FEATURE_KEYS, json.dumps(list(feature_keys)))
  examples.set_string_custom_property(keys.LABEL_KEY, label_key)
  if true_weights is not None:
    examples.set_string_custom_property(keys.TRUE_WEIGHTS,
                                        json.dumps([float(w) for w in true_weights]))
  if true_bias is not None:
    examples.set_float_custom_property(keys.TRUE_BIAS, float(true_bias))
  return examples


def export_linear_model(uri: str, kernel: Sequence[float], bias: float,
                        feature_keys: Sequence[str],
                        sigmoid: bool = False) -> standard_artifacts.Model:
  """Exports a tf_keras Dense(1) model with the project's serving signature.

  The signature parses each feature as a scalar float with default 0.0 (a missing
  feature counts as 0), stacks them in ``feature_keys`` order and calls the model.
  """
  feature_keys = list(feature_keys)
  inputs = tf.keras.Input(shape=(len(feature_keys),), name="features")
  outputs = tf.keras.layers.Dense(
      1, activation="sigmoid" if sigmoid else None, name="dense")(inputs)
  model = tf.keras.Model(inputs, outputs)
  model.get_layer("dense").set_weights(
      [np.asarray(kernel, np.float32).reshape(-1, 1), np.asarray([bias], np.float32)])
  spec = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0) for k in feature_keys}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve(examples):
    parsed = tf.io.parse_example(examples, spec)
    x = tf.stack([parsed[k] for k in feature_keys], axis=1)
    return {"predictions": model(x)}

  model.save(path_utils.serving_model_dir(uri), save_format="tf",
             signatures={keys.SERVING_SIGNATURE: serve})
  artifact = standard_artifacts.Model()
  artifact.uri = uri
  return artifact


def linear_history(losses: Sequence[float], log_every: int = 10,
                   kernel: Optional[Sequence[float]] = None, bias: Optional[float] = None,
                   layout: str = "mesh", mesh_shape=(2, 2), replicas: int = 2,
                   steps_per_epoch: int = 0, seconds_per_step: float = 0.01,
                   grad_norms: Optional[Sequence[float]] = None) -> dict:
  """A history.json dict with one record per ``log_every`` steps."""
  records = []
  for i, loss in enumerate(losses):
    step = (i + 1) * log_every
    records.append({
        "step": step, "loss": float(loss), "learning_rate": 0.1,
        "grad_norm": float(grad_norms[i]) if grad_norms is not None else 1.0 / (i + 1),
        "examples_per_sec": 1000.0, "wall_time": step * seconds_per_step,
    })
  epochs = []
  if steps_per_epoch:
    for epoch, record in enumerate(r for r in records if r["step"] % steps_per_epoch == 0):
      epochs.append({"epoch": epoch + 1, "step": record["step"],
                     "train_loss": record["loss"], "eval_loss": record["loss"] * 1.1})
  history = {
      "layout": layout, "replicas": replicas, "mesh_shape": list(mesh_shape),
      "devices": [f"/job:localhost/replica:0/task:0/device:CPU:{i}"
                  for i in range(int(np.prod(mesh_shape)))],
      "global_batch_size": 64, "total_steps": len(losses) * log_every, "model": "linear",
      "records": records, "epochs": epochs, "examples_per_sec": 1500.0,
      "diverged": any(not math.isfinite(l) for l in losses), "stopped_early": False,
  }
  if kernel is not None:
    history["weights"] = {"kernel": [[float(w)] for w in kernel], "bias": [float(bias)]}
  return history


def write_history(uri: str, history: dict) -> artifacts.TrainingHistory:
  """Writes ``history.json`` (python json: NaN/Infinity allowed) and returns the artifact."""
  os.makedirs(uri, exist_ok=True)
  with open(os.path.join(uri, keys.HISTORY_FILE), "w") as f:
    json.dump(history, f)
  artifact = artifacts.TrainingHistory()
  artifact.uri = uri
  return artifact
