"""Model quality on an Examples split: a tf.data read, the serving signature, numpy sums.

:func:`evaluate` streams the gzip TFRecords of one split in batches, parses only the
label, and feeds the *serialized* batch to the model's ``serving_default`` signature
(the same entry point TFMA and TF Serving use). Features are therefore parsed by the
model's own signature: a feature missing from an example gets whatever default the
trainer's parse spec gives it. The label is one value (float_list, int64_list, or for a
classifier with a label vocabulary bytes_list), its type that of the first example that
has it; an example without it is skipped and counted (``unlabelled``) as the trainer
skips it (skip_missing_labels), else an error.

What is measured depends on the task (task.py; outputs: components/common/keys.py):

* regression (output ``predictions``): :class:`QualityAccumulator`, float64 running
  sums merged per batch (Chan's parallel update for the label variance) -- plus accuracy
  and AUC of the prediction as a score when every label is 0 or 1;
* binary (``probabilities`` = P(class 1), ``logits``): :class:`BinaryAccumulator`,
  accuracy, precision and recall at P > 0.5 (as Keras and TFMA count), exact ROC AUC of
  the probabilities, and log loss from the logits (exact even where the probability
  rounds to 0 or 1);
* multiclass (``probabilities`` [N, K], ``logits``): :class:`MulticlassAccumulator`,
  accuracy of argmax(probabilities), per-class accuracy (the fraction of each class's
  examples predicted as that class) and log loss from the logits.

Only the exact AUC keeps per-example values (the binary scores); everything else is a
running sum, so 1M rows cost no more memory than a batch.
"""
import dataclasses
import math
import os
import re
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

import tensorflow as tf

from tfx_parallel.components.common import keys
from tfx_parallel.components.common.splits import split_files
from tfx_parallel.components.convergence_evaluator import signature
from tfx_parallel.components.convergence_evaluator.report import roc_points
from tfx_parallel.components.convergence_evaluator import task as task_lib

PREDICTION_KEY = keys.PREDICTIONS_OUTPUT
ACCURACY_THRESHOLD = 0.5  # Regression fallback on a 0/1 label: score >= 0.5 counts as 1.
BINARY_THRESHOLD = 0.5    # Binary classifier: P(class 1) > 0.5 predicts 1 (Keras, TFMA).


@dataclasses.dataclass(frozen=True)
class Quality:
  """Eval metrics; ``accuracy``/``auc`` are -1 unless the label is binary (``auc`` -1
  without both classes, NaN when a prediction is NaN)."""
  examples: int
  mse: float
  rmse: float
  mae: float
  r2: float
  label_is_binary: bool
  accuracy: float
  auc: float
  seconds: float = 0.0
  label_variance: float = math.nan  # Population variance of the label on the split.
  unlabelled: int = 0  # Examples left out: no label (skip_missing_labels).


def both_classes(labels: np.ndarray) -> bool:
  """Whether the 0/1 labels hold both classes (an AUC is defined only then)."""
  labels = np.asarray(labels) > 0.5
  return bool(labels.any() and not labels.all())


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
  """Exact ROC AUC (Mann-Whitney U, tied scores count 1/2); NaN without both classes,
  and NaN when any score is NaN (a diverged model: NaN has no rank, and sorting it
  last would score it as the most confident positive)."""
  labels = np.asarray(labels) > 0.5
  positives = int(labels.sum())
  negatives = labels.size - positives
  if positives == 0 or negatives == 0 or np.isnan(np.asarray(scores, np.float64)).any():
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
      area = auc(labels, scores) if both_classes(labels) else -1.0
    return Quality(examples=self.count, mse=mse, rmse=math.sqrt(mse),
                   mae=self._sum_abs / self.count, r2=r2, label_is_binary=self._binary,
                   accuracy=accuracy, auc=area, seconds=seconds,
                   label_variance=self._label_m2 / self.count)


@dataclasses.dataclass(frozen=True)
class BinaryQuality:
  """Eval metrics of a binary classifier; precision is -1 when nothing is predicted
  positive, recall -1 when no label is positive, auc -1 without both classes and NaN
  when a score is NaN (then ``roc`` is () too)."""
  examples: int
  accuracy: float
  auc: float
  log_loss: float
  precision: float
  recall: float
  positives: int  # examples whose label is class 1.
  seconds: float = 0.0
  unlabelled: int = 0  # Examples left out: no label (skip_missing_labels).
  confusion: Tuple[Tuple[int, ...], ...] = ()  # [[tn, fp], [fn, tp]]: rows label, cols predicted.
  # (threshold, recall, fpr); () with one class or a NaN score.
  roc: Tuple[Tuple[float, float, float], ...] = ()


@dataclasses.dataclass(frozen=True)
class MulticlassQuality:
  """Eval metrics of a K-class classifier; ``class_accuracy[k]`` is -1 when class k has
  no example in the split."""
  examples: int
  accuracy: float
  log_loss: float
  class_accuracy: Tuple[float, ...]
  class_examples: Tuple[int, ...]
  seconds: float = 0.0
  unlabelled: int = 0  # Examples left out: no label (skip_missing_labels).
  confusion: Tuple[Tuple[int, ...], ...] = ()  # K x K: rows label, columns argmax.


AnyQuality = Union[Quality, BinaryQuality, MulticlassQuality]


def _ratio(numerator: float, denominator: float) -> float:
  return float(numerator / denominator) if denominator else -1.0


class BinaryAccumulator:
  """Streaming confusion counts and log loss; the probabilities are kept for the exact AUC."""

  def __init__(self):
    self.count = 0
    self._log_loss = 0.0
    self._tp = self._fp = self._fn = self._tn = 0
    self._labels: List[np.ndarray] = []
    self._scores: List[np.ndarray] = []

  def update(self, ids: np.ndarray, probabilities: np.ndarray, logits: np.ndarray):
    """ids: class ids 0/1 [N]; probabilities: P(class 1) [N] or [N, 1]; logits likewise."""
    ids = np.asarray(ids).reshape(-1)
    probabilities = _column(probabilities, "probabilities", ids.size)
    logits = _column(logits, "logits", ids.size)
    if ids.size == 0:
      return
    y = ids.astype(np.float64)
    z = logits.astype(np.float64)
    # -[y log(sigmoid(z)) + (1 - y) log(1 - sigmoid(z))] = softplus(z) - y z, stable.
    self._log_loss += float(np.sum(np.logaddexp(0.0, z) - y * z))
    predicted = probabilities > BINARY_THRESHOLD
    positive = ids == 1
    self._tp += int(np.sum(predicted & positive))
    self._fp += int(np.sum(predicted & ~positive))
    self._fn += int(np.sum(~predicted & positive))
    self._tn += int(np.sum(~predicted & ~positive))
    self.count += ids.size
    self._labels.append(ids.astype(np.int8))
    self._scores.append(probabilities.astype(np.float32))

  def result(self, seconds: float = 0.0) -> BinaryQuality:
    if self.count == 0:
      raise ValueError("no examples were evaluated")
    labels, scores = np.concatenate(self._labels), np.concatenate(self._scores)
    area = auc(labels, scores) if both_classes(labels) else -1.0
    curve = roc_points(labels, scores)
    return BinaryQuality(
        examples=self.count, accuracy=(self._tp + self._tn) / self.count,
        auc=area, log_loss=self._log_loss / self.count,
        precision=_ratio(self._tp, self._tp + self._fp),
        recall=_ratio(self._tp, self._tp + self._fn), positives=self._tp + self._fn,
        seconds=seconds, confusion=((self._tn, self._fp), (self._fn, self._tp)),
        roc=tuple(zip(*(curve[k] for k in ("thresholds", "recall", "false_positive_rate"))))
        if curve else ())


class MulticlassAccumulator:
  """Streaming K x K confusion counts (rows: label, columns: argmax) and log loss.

  ``num_classes`` 0 takes K from the width of the first batch's probabilities.
  """

  def __init__(self, num_classes: int = 0):
    self.num_classes = num_classes
    self.count = 0
    self._log_loss = 0.0
    self._confusion: Optional[np.ndarray] = None

  def update(self, ids: np.ndarray, probabilities: np.ndarray, logits: np.ndarray):
    """ids: class ids [N]; probabilities and logits: [N, K]."""
    ids = np.asarray(ids).reshape(-1)
    probabilities = np.asarray(probabilities)
    logits = np.asarray(logits, np.float64)
    if not self.num_classes:
      self.num_classes = int(probabilities.shape[-1]) if probabilities.ndim == 2 else 0
    k = self.num_classes
    for name, value in (("probabilities", probabilities), ("logits", logits)):
      if value.shape != (ids.size, k):
        raise ValueError(f"a multiclass model's {name} must be [N, K] = [{ids.size}, {k}] "
                         f"for this batch. Received shape: {list(value.shape)}")
    if ids.size and (ids.min() < 0 or ids.max() >= k):
      raise ValueError(f"class id {int(ids.max())} is outside 0..{k - 1}: the labels have "
                       f"more classes than the model's {k} outputs")
    if self._confusion is None:
      self._confusion = np.zeros((k, k), np.int64)
    if ids.size == 0:
      return
    top = logits.max(axis=1)
    log_sum = top + np.log(np.sum(np.exp(logits - top[:, None]), axis=1))
    self._log_loss += float(np.sum(log_sum - logits[np.arange(ids.size), ids]))
    predicted = np.argmax(probabilities, axis=1)
    self._confusion += np.bincount(ids * k + predicted, minlength=k * k).reshape(k, k)
    self.count += ids.size

  def result(self, seconds: float = 0.0) -> MulticlassQuality:
    if self.count == 0:
      raise ValueError("no examples were evaluated")
    per_class = self._confusion.sum(axis=1)
    correct = np.diag(self._confusion)
    return MulticlassQuality(
        examples=self.count, accuracy=float(correct.sum() / self.count),
        log_loss=self._log_loss / self.count,
        class_accuracy=tuple(_ratio(c, n) for c, n in zip(correct, per_class)),
        class_examples=tuple(int(n) for n in per_class), seconds=seconds,
        confusion=tuple(tuple(int(v) for v in row) for row in self._confusion))


def _column(value: np.ndarray, name: str, n: int) -> np.ndarray:
  value = np.asarray(value)
  if value.shape not in ((n,), (n, 1)):
    raise ValueError(f"a binary model's {name} must be [N, 1] (for class 1) = [{n}, 1] for "
                     f"this batch. Received shape: {list(value.shape)}")
  return value.reshape(-1)


def _label_dtype(files: List[str], label_key: str) -> tf.DType:
  """float32, int64 or string: the kind of the first example that holds the label, in
  file order. An example without the label says nothing about its type (the trainer
  skips it), so it is read past; only a split where no example has the label is an
  error."""
  first_features = None
  for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    if first_features is None:
      first_features = sorted(feature)
    if label_key in feature and feature[label_key].WhichOneof("kind"):
      kind = feature[label_key].WhichOneof("kind")
      return {"int64_list": tf.int64, "bytes_list": tf.string}.get(kind, tf.float32)
  if first_features is None:
    raise ValueError(f"{files[0]} holds no examples")
  raise ValueError(f"label {label_key!r} is not a feature of any example in "
                   f"{os.path.dirname(files[0])}; features present: {first_features}. Set "
                   f"the label with --label COL (evaluator.label_key)")


def _outputs_of(info: task_lib.TaskInfo) -> Tuple[str, ...]:
  if info.is_classification:
    return (keys.PROBABILITIES_OUTPUT, keys.LOGITS_OUTPUT)
  return (PREDICTION_KEY,)


def predict_batches(model_dir: str, files: List[str], label_key: str, batch_size: int,
                    outputs: Sequence[str] = (PREDICTION_KEY,), numeric_label: bool = True,
                    task: str = task_lib.REGRESSION, skip_missing_labels: bool = False,
                    unlabelled: Optional[tf.Variable] = None
                    ) -> Iterator[Tuple[np.ndarray, Dict[str, np.ndarray]]]:
  """Yields (labels [B], {output: [B, ...]}) for every batch of the files, in any order.

  Labels are float32 when ``numeric_label``, else as stored (float32, int64 or bytes).
  ``task`` only names the task in errors. ``skip_missing_labels``: leave out the examples
  without exactly one label value (the trainer's rule, preprocess.has_label), counted
  in ``unlabelled`` (an int64 variable) when given; else the first one is an error
  naming the label and the directory.
  """
  loaded = tf.saved_model.load(model_dir)  # Must outlive the signature (owns variables).
  if keys.SERVING_SIGNATURE not in loaded.signatures:
    raise ValueError(f"the SavedModel at {model_dir} has no {keys.SERVING_SIGNATURE!r} "
                     f"signature; it has {sorted(loaded.signatures)}")
  signature = loaded.signatures[keys.SERVING_SIGNATURE]
  missing = sorted(set(outputs) - set(signature.structured_outputs))
  if missing:
    raise ValueError(f"the {keys.SERVING_SIGNATURE!r} signature of the SavedModel at "
                     f"{model_dir} lacks the output(s) {missing} the {task} task needs; it "
                     f"returns {sorted(signature.structured_outputs)} (is the Model's "
                     f"{keys.TASK!r} property missing or wrong?)")
  dtype = _label_dtype(files, label_key)
  if numeric_label and dtype == tf.string:
    raise ValueError(f"label {label_key!r} in {files[0]} holds strings (bytes_list); a "
                     f"regression label must be a number. Is the model a classifier "
                     f"without its 'task' property? Then set evaluator.task=binary (or "
                     f"multiclass), as the trainer's --task")
  label_spec = {label_key: tf.io.FixedLenFeature([], dtype)}

  def labelled(serialized):  # A batch at a time: a per-example filter costs ~25 us each.
    values = tf.io.parse_example(
        serialized, {label_key: tf.io.RaggedFeature(dtype)})[label_key]
    keep = tf.equal(values.row_lengths(), 1)
    if unlabelled is not None:
      unlabelled.assign_add(tf.reduce_sum(tf.cast(tf.logical_not(keep), tf.int64)))
    return tf.boolean_mask(serialized, keep)

  def predict(serialized):
    label = tf.io.parse_example(serialized, label_spec)[label_key]
    if numeric_label:
      label = tf.cast(label, tf.float32)
    result = signature(examples=serialized)
    return label, {name: result[name] for name in outputs}

  options = tf.data.Options()
  options.deterministic = False
  dataset = tf.data.TFRecordDataset(files, compression_type="GZIP",
                                    num_parallel_reads=min(len(files), 4))
  if skip_missing_labels:
    dataset = dataset.batch(batch_size).map(labelled).unbatch()
  dataset = (dataset
             .batch(batch_size)
             .map(predict, num_parallel_calls=tf.data.AUTOTUNE)
             .prefetch(2)
             .with_options(options))
  try:
    yield from dataset.as_numpy_iterator()
  except tf.errors.InvalidArgumentError as e:
    # TF's text: "{{function_node ...}} Name: <unknown>, Feature: y ... found.\n\t [[...]]".
    reason = re.sub(r"^\{\{[^}]*\}\}\s*", "", e.message.split("\n")[0]).strip()
    hint = (" To skip the examples without the label, set skip_missing_labels=true "
            "(as the trainer's skip_missing_labels)"
            if "could not be found" in reason and not skip_missing_labels else "")
    raise ValueError(f"reading label {label_key!r} (one {dtype.name} per example, as in "
                     f"the first labelled example) from {os.path.dirname(files[0])}: "
                     f"{reason}{hint}") from None


def evaluate(model_dir: str, examples_uri: str, split: str, label_key: str,
             batch_size: int, info: task_lib.TaskInfo = task_lib.TaskInfo(),
             files: Optional[Sequence[str]] = None,
             output_map: Optional["signature.OutputMap"] = None,
             skip_missing_labels: bool = False) -> AnyQuality:
  """Quality of the SavedModel at ``model_dir`` on ``split`` of the Examples, by task.

  ``files``: the split's files (default ``Split-<split>/`` under ``examples_uri``);
  ``output_map``: which signature outputs to read (signature.py; default the contract
  outputs of the task); ``skip_missing_labels``: see :func:`predict_batches`.
  """
  start = time.perf_counter()
  files = list(files) if files else split_files(examples_uri, split)
  names = output_map.names if output_map is not None else _outputs_of(info)
  unlabelled = tf.Variable(0, dtype=tf.int64, trainable=False)
  batches = predict_batches(model_dir, files, label_key, batch_size, names,
                            numeric_label=not info.is_classification, task=info.task,
                            skip_missing_labels=skip_missing_labels,
                            unlabelled=unlabelled)
  if output_map is not None:
    batches = ((labels, output_map.values(out, info.task)) for labels, out in batches)
  if info.task == task_lib.REGRESSION:
    accumulator = QualityAccumulator()
    for labels, outputs in batches:
      accumulator.update(labels, outputs[PREDICTION_KEY])
  else:
    where = f"split {split!r} of {examples_uri}"
    accumulator = (BinaryAccumulator() if info.task == task_lib.BINARY
                   else MulticlassAccumulator(info.num_classes))
    for labels, outputs in batches:
      accumulator.update(task_lib.class_ids(labels, info, label_key, where),
                         outputs[keys.PROBABILITIES_OUTPUT], outputs[keys.LOGITS_OUTPUT])
  return dataclasses.replace(accumulator.result(seconds=time.perf_counter() - start),
                             unlabelled=int(unlabelled.numpy()))
