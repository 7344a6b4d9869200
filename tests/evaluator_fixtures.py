"""Builders of small input artifacts for ConvergenceEvaluator tests and benchmarks
(test-only: it lives under tests/, not in the wheel; tests/conftest.py prepares the
environment before it imports TensorFlow).

They write exactly what the upstream components promise (see the component docstring
and the task contract in components/common/keys.py): an ``Examples`` artifact of gzip
TFRecords whose custom properties are recorded by PartitionedExampleGen's own
``record_output``; a tf_keras linear ``Model`` exported with the ``serving_default``
signature (serialized ``tf.Example`` under ``examples`` -> ``{'predictions': float32
[N, 1]}``) or a linear classifier (-> ``probabilities``, ``class_ids``, ``logits``) with
the ``task`` / ``num_classes`` / ``label_vocabulary`` properties the trainer writes; and a
``TrainingHistory`` with ``history.json``. No TFX or TensorFlow behaviour is faked.
"""
import json
import math
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

import tensorflow as tf
from tfx.types import standard_artifacts
from tfx.utils import path_utils

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator import task as task_lib
from tfx_parallel.components.partitioned_example_gen import properties as example_properties
from tfx_parallel.components.partitioned_example_gen.write import IngestSummary


def synthetic_data(rows: int, true_weights: Sequence[float], true_bias: float,
                   noise: float = 0.0, seed: int = 0):
  """Returns (features [rows, F] float32, labels [rows] float32) of y = x.w + b + noise."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, len(true_weights))).astype(np.float32)
  y = x @ np.asarray(true_weights, np.float32) + np.float32(true_bias)
  y = y + noise * rng.normal(size=rows).astype(np.float32)
  return x, y.astype(np.float32)


def classification_data(rows: int, kernel, bias, noise: float = 1.0, seed: int = 0):
  """(features [rows, F] float32, class ids [rows] int64) drawn from a noisy linear model.

  ``kernel`` [F] (binary: class 1 when x.w + b + noise > 0) or [F, K] (multiclass:
  argmax of x.W + b + noise). ``noise`` scales standard logistic noise, so the true model
  is right most of the time but not always.
  """
  rng = np.random.default_rng(seed)
  kernel = np.asarray(kernel, np.float64)
  x = rng.normal(size=(rows, kernel.shape[0])).astype(np.float32)
  scores = x.astype(np.float64) @ kernel + np.asarray(bias, np.float64)
  scores = scores + noise * rng.logistic(size=scores.shape)
  ids = scores.argmax(axis=1) if scores.ndim == 2 else (scores > 0).astype(np.int64)
  return x, ids.astype(np.int64)


def _label_feature(label, label_type: str) -> "tf.train.Feature":
  if label_type == "float":
    return tf.train.Feature(float_list=tf.train.FloatList(value=[label]))
  if label_type == "int":
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
  if label_type == "bytes":
    text = label if isinstance(label, (bytes, str)) else str(label)
    return tf.train.Feature(bytes_list=tf.train.BytesList(
        value=[text.encode() if isinstance(text, str) else text]))
  raise ValueError(f"label_type must be 'float', 'int' or 'bytes'. Received: {label_type!r}")


def serialize_examples(features: np.ndarray, labels, feature_keys: Sequence[str],
                       label_key: str, missing: Optional[np.ndarray] = None,
                       int_label: bool = False,
                       label_type: Optional[str] = None) -> List[bytes]:
  """Serialized tf.Examples; ``missing[i, j]`` True leaves feature j out of row i.

  The label is a float_list (default, as PartitionedExampleGen writes float columns),
  an int64_list (``int_label`` or ``label_type="int"``) or a bytes_list
  (``label_type="bytes"``, e.g. string class names).
  """
  label_type = label_type or ("int" if int_label else "float")
  out = []
  for i, (row, label) in enumerate(zip(features, labels)):
    feature = {}
    for j, key in enumerate(feature_keys):
      if missing is not None and missing[i, j]:
        continue
      feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=[row[j]]))
    feature[label_key] = _label_feature(label, label_type)
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
  example_properties.record_output(
      examples, split_names=sorted(splits), num_shards=shards, source="testing",
      feature_keys=feature_keys, label_key=label_key,
      summary=IngestSummary({split: len(records) for split, records in splits.items()}),
      true_weights=true_weights, true_bias=true_bias)
  return examples


def _export(uri: str, model, feature_keys: Sequence[str], outputs) -> standard_artifacts.Model:
  """Saves ``model`` under the Model artifact's serving dir with the project's signature.

  The signature parses each feature as a scalar float with default 0.0 (a missing
  feature counts as 0), stacks them in ``feature_keys`` order, calls the model and
  returns ``outputs(model output)``.
  """
  feature_keys = list(feature_keys)
  spec = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0) for k in feature_keys}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve(examples):
    parsed = tf.io.parse_example(examples, spec)
    return outputs(model(tf.stack([parsed[k] for k in feature_keys], axis=1)))

  model.save(path_utils.serving_model_dir(uri), save_format="tf",
             signatures={keys.SERVING_SIGNATURE: serve})
  artifact = standard_artifacts.Model()
  artifact.uri = uri
  return artifact


def _dense(kernel, bias, activation=None):
  """A tf_keras model: Dense with the given [F, U] kernel and [U] bias."""
  kernel = np.asarray(kernel, np.float32)
  kernel = kernel.reshape(-1, 1) if kernel.ndim == 1 else kernel
  inputs = tf.keras.Input(shape=(kernel.shape[0],), name="features")
  outputs = tf.keras.layers.Dense(kernel.shape[1], activation=activation, name="dense")(inputs)
  model = tf.keras.Model(inputs, outputs)
  model.get_layer("dense").set_weights([kernel, np.asarray(bias, np.float32).reshape(-1)])
  return model


def export_linear_model(uri: str, kernel: Sequence[float], bias: float,
                        feature_keys: Sequence[str],
                        sigmoid: bool = False) -> standard_artifacts.Model:
  """Exports a tf_keras Dense(1) regression model: ``{'predictions': float32 [N, 1]}``.

  The Model artifact has no task properties (as a model from before the task contract).
  """
  model = _dense(kernel, [bias], "sigmoid" if sigmoid else None)
  return _export(uri, model, feature_keys, lambda y: {keys.PREDICTIONS_OUTPUT: y})


def classifier_outputs(logits: "tf.Tensor", task: str):
  """The serving outputs of a classifier's logits ([N, 1] binary, [N, K] multiclass)."""
  if task == task_lib.BINARY:
    probabilities = tf.sigmoid(logits)
    class_ids = tf.cast(logits > 0.0, tf.int64)  # P > 0.5.
  else:
    probabilities = tf.nn.softmax(logits, axis=-1)
    class_ids = tf.argmax(logits, axis=-1, output_type=tf.int64)[:, None]
  return {keys.PROBABILITIES_OUTPUT: probabilities, keys.CLASS_IDS_OUTPUT: class_ids,
          keys.LOGITS_OUTPUT: logits}


def export_classifier_model(uri: str, task: str, kernel, bias, feature_keys: Sequence[str],
                            label_vocabulary: Optional[Sequence[str]] = None,
                            with_properties: bool = True) -> standard_artifacts.Model:
  """Exports a linear classifier as the trainer does for ``task`` binary or multiclass.

  ``kernel`` [F] and scalar ``bias`` (binary: one logit) or [F, K] and [K] (multiclass).
  The Model artifact gets the trainer's ``task`` / ``num_classes`` / ``label_vocabulary``
  properties unless ``with_properties`` is False.
  """
  if task not in (task_lib.BINARY, task_lib.MULTICLASS):
    raise ValueError(f"task must be 'binary' or 'multiclass'. Received: {task!r}")
  model = _dense(kernel, bias)
  artifact = _export(uri, model, feature_keys, lambda z: classifier_outputs(z, task))
  if with_properties:
    num_classes = 1 if task == task_lib.BINARY else int(np.shape(kernel)[1])
    task_lib.write_properties(artifact, task, num_classes, label_vocabulary)
  return artifact


def linear_history(losses: Sequence[float], log_every: int = 10,
                   kernel: Optional[Sequence[float]] = None, bias: Optional[float] = None,
                   layout: str = "mesh", mesh_shape=(2, 2), replicas: int = 2,
                   steps_per_epoch: int = 0, seconds_per_step: float = 0.01) -> dict:
  """A history.json dict with one record per ``log_every`` steps."""
  records = []
  for i, loss in enumerate(losses):
    step = (i + 1) * log_every
    records.append({
        "step": step, "loss": float(loss), "learning_rate": 0.1,
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


def write_history(uri: str, history: dict, task: Optional[str] = None, num_classes: int = 1,
                  label_vocabulary: Optional[Sequence[str]] = None
                  ) -> artifacts.TrainingHistory:
  """Writes ``history.json`` (python json: NaN/Infinity allowed) and returns the artifact.

  With ``task``, the artifact gets the trainer's task properties.
  """
  os.makedirs(uri, exist_ok=True)
  with open(os.path.join(uri, keys.HISTORY_FILE), "w") as f:
    json.dump(history, f)
  artifact = artifacts.TrainingHistory()
  artifact.uri = uri
  if task is not None:
    task_lib.write_properties(artifact, task, num_classes, label_vocabulary)
  return artifact
