"""Model quality on an Examples split: a tf.data read, the serving signature, numpy sums.

:func:`evaluate` streams the gzip TFRecords of one split in batches, parses only the
label, and feeds the *serialized* batch to the model's ``serving_default`` signature
(the same entry point TFMA and TF Serving use). Features are therefore parsed by the
model's own signature: a feature missing from an example gets whatever default the
trainer's parse spec gives it (0.0 by the trainer contract). The label is required in
every example (float_list or int64_list, one value).

:class:`QualityAccumulator` is the pure-numpy part: float64 running sums merged per batch
(Chan's parallel update for the label variance), so 1M rows cost no more memory than a
batch -- except for a binary {0, 1} label, whose scores are kept for the exact AUC.
"""
import dataclasses
import math
import time
from typing import Iterator, List, Tuple

import numpy as np

from tfx_parallel.pipeline import tfenv

tfenv.prepare()

# pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf

from tfx_parallel.components.common import keys
from tfx_parallel.components.common.splits import split_files

PREDICTION_KEY = "predictions"
ACCURACY_THRESHOLD = 0.5


@dataclasses.dataclass(frozen=True)
class Quality:
  """Eval metrics; ``accuracy``/``auc`` are -1 unless the label is binary."""
  examples: int
  mse: float
  rmse: float
  mae: float
  r2: float
  label_is_binary: bool
  accuracy: float
  auc: float
  seconds: float = 0.0


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
  """Exact ROC AUC (Mann-Whitney U, tied scores count 1/2); NaN without both classes."""
  labels = np.asarray(labels) > 0.5
  positives = int(labels.sum())
  negatives = labels.size - positives
  if positives == 0 or negatives == 0:
    return math.nan
  order = np.argsort(scores, kind="mergesort")
  sorted_scores = np.asarray(scores)[order]
  ranks = np.empty(labels.size, np.float64)
  # Average 1-based rank within each run of equal scores.
  starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
  ends = np.r_[starts[1:], labels.size]
  average = (starts + ends + 1) / 2.0
  ranks[order] = np.repeat(average, ends - starts)
  u = ranks[labels].sum() - positives * (positives + 1) / 2.0
  return float(u / (positives * negatives))


class QualityAccumulator:
  """Streaming MSE / MAE / R^2 (+ accuracy and AUC for a binary label)."""

  def __init__(self):
    self.count = 0
    self._sum_sq = 0.0
    self._sum_abs = 0.0
    self._label_mean = 0.0
    self._label_m2 = 0.0  # sum of squared deviations from the mean (Chan et al.).
    self._binary = True
    self._labels: List[np.ndarray] = []
    self._scores: List[np.ndarray] = []

  def update(self, labels: np.ndarray, predictions: np.ndarray):
    labels = np.asarray(labels, np.float64).reshape(-1)
    predictions = np.asarray(predictions, np.float64).reshape(-1)
    if labels.shape != predictions.shape:
      raise ValueError(f"labels and predictions differ in size. Received: "
                       f"{labels.shape} labels, {predictions.shape} predictions "
                       f"(the model must return one prediction per example)")
    n = labels.size
    if n == 0:
      return
    error = predictions - labels
    self._sum_sq += float(np.dot(error, error))
    self._sum_abs += float(np.abs(error).sum())
    mean = float(labels.mean())
    m2 = float(np.dot(labels - mean, labels - mean))
    total = self.count + n
    delta = mean - self._label_mean
    self._label_m2 += m2 + delta * delta * self.count * n / total
    self._label_mean += delta * n / total
    self.count = total
    if self._binary:
      self._binary = bool(np.all((labels == 0) | (labels == 1)))
      if self._binary:
        self._labels.append(labels.astype(np.int8))
        self._scores.append(predictions.astype(np.float32))
      else:
        self._labels, self._scores = [], []

  def result(self, seconds: float = 0.0) -> Quality:
    if self.count == 0:
      raise ValueError("no examples were evaluated")
    mse = self._sum_sq / self.count
    r2 = 1.0 - self._sum_sq / self._label_m2 if self._label_m2 > 0 else math.nan
    accuracy = area = -1.0
    if self._binary:
      labels = np.concatenate(self._labels)
      scores = np.concatenate(self._scores)
      accuracy = float(np.mean((scores >= ACCURACY_THRESHOLD) == (labels == 1)))
      area = auc(labels, scores)
      area = -1.0 if math.isnan(area) else area
    return Quality(examples=self.count, mse=mse, rmse=math.sqrt(mse),
                   mae=self._sum_abs / self.count, r2=r2, label_is_binary=self._binary,
                   accuracy=accuracy, auc=area, seconds=seconds)


def _label_dtype(files: List[str], label_key: str) -> tf.DType:
  """float32 or int64, from the first example's label feature."""
  for record in tf.data.TFRecordDataset(files[:1], compression_type="GZIP").take(1):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    if label_key not in feature:
      raise ValueError(f"label {label_key!r} is not a feature of the examples in "
                       f"{files[0]}; features present: {sorted(feature)}")
    return tf.int64 if feature[label_key].WhichOneof("kind") == "int64_list" else tf.float32
  raise ValueError(f"{files[0]} holds no examples")


def predict_batches(model_dir: str, files: List[str], label_key: str,
                    batch_size: int) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
  """Yields (labels [B], predictions [B]) for every batch of the files, in any order."""
  loaded = tf.saved_model.load(model_dir)  # Must outlive the signature (owns variables).
  if keys.SERVING_SIGNATURE not in loaded.signatures:
    raise ValueError(f"the SavedModel at {model_dir} has no {keys.SERVING_SIGNATURE!r} "
                     f"signature; it has {sorted(loaded.signatures)}")
  signature = loaded.signatures[keys.SERVING_SIGNATURE]
  label_spec = {label_key: tf.io.FixedLenFeature([], _label_dtype(files, label_key))}

  def predict(serialized):
    label = tf.cast(tf.io.parse_example(serialized, label_spec)[label_key], tf.float32)
    prediction = signature(examples=serialized)[PREDICTION_KEY]
    return label, tf.reshape(prediction, [-1])

  options = tf.data.Options()
  options.deterministic = False
  dataset = (tf.data.TFRecordDataset(files, compression_type="GZIP",
                                     num_parallel_reads=min(len(files), 4))
             .batch(batch_size)
             .map(predict, num_parallel_calls=tf.data.AUTOTUNE)
             .prefetch(2)
             .with_options(options))
  for labels, predictions in dataset.as_numpy_iterator():
    yield labels, predictions


def evaluate(model_dir: str, examples_uri: str, split: str, label_key: str,
             batch_size: int) -> Quality:
  """Quality of the SavedModel at ``model_dir`` on ``split`` of the Examples."""
  start = time.perf_counter()
  accumulator = QualityAccumulator()
  for labels, predictions in predict_batches(model_dir, split_files(examples_uri, split),
                                             label_key, batch_size):
    accumulator.update(labels, predictions)
  return accumulator.result(seconds=time.perf_counter() - start)
