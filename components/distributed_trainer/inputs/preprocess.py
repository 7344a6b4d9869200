"""Serialized tf.Examples -> the model's input dict and labels, owned by the trainer.

The same :class:`Preprocessor` runs in the tf.data input pipeline (after ``batch``: one
``parse_example`` per batch) and in the exported serving signature, so training and
serving see identical inputs. Serving parses every feature ragged: a value that is
absent or an empty list (stock CsvExampleGen's empty cell) becomes the feature's
documented fill (``FeatureSpec.fill``; missing.py), so a serving example may leave out
any feature; one with several values in a feature is read by its first. The training
input parses ragged only the features the scan found missing somewhere
(``FeatureSpec.missing``), the others dense (faster, the same values).

* float32 features: [B, 1], a missing value is the train mean; with config ``normalize``
  standardised with the train split's mean/std and clipped to +-``normalize_clip``
  standard deviations (a corrupt value far outside the training range, like the taxi
  data's 20-hour trips, otherwise makes the model extrapolate without bound);
* int64 features: [B, 1], missing is the train mean rounded; with ``normalize`` they
  are parsed as int64, cast to float32 and standardised like the floats (their spec
  dtype is then float32, raw_dtype int64), else passed as int64;
* string features: int64 ids [B, 1] -- 0 for a missing or out-of-vocabulary value, 1..V
  the vocabulary (a StaticHashTable), or 1..N a hash bucket;
* labels: float32 [B, 1] (regression; binary 0/1), int64 class ids [B, 1] (multiclass);
  string labels are mapped to class ids by components/common/label_encoding.py, as the
  evaluator maps them and the serving signature names them;
* derived features (``FeatureSpec.source``, inputs/columns.py): float32 [B, 1] computed
  from a raw string feature: a date part (year, month, day, day_of_week, hour) of an ISO
  date, or the number a text cell holds; a value that is not a date / number, or is
  missing, becomes ``fill`` (the part's train mean). Then standardised like any float.
"""
from typing import Dict, List, Mapping, Optional, Tuple

import tensorflow as tf

from tfx_parallel.components.common import label_encoding
from tfx_parallel.components.common import column_rules
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer.inputs import columns as columns_lib

_DTYPES = {ms.FLOAT32: tf.float32, ms.INT64: tf.int64, ms.STRING: tf.string}


def _table(vocabulary, first_id: int, default: int) -> tf.lookup.StaticHashTable:
  keys = tf.constant(list(vocabulary), tf.string)
  ids = tf.range(first_id, first_id + len(vocabulary), dtype=tf.int64)
  return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, ids), default)


def _label_table(label_vocabulary) -> tf.lookup.StaticHashTable:
  """Class name -> class id, by the one label encoding (label_encoding.class_index)."""
  index = label_encoding.class_index(label_vocabulary)
  keys = tf.constant(list(index), tf.string)
  ids = tf.constant(list(index.values()), tf.int64)
  return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, ids), -1)


def _fill(f: ms.FeatureSpec):
  """``f.fill`` in the parsed column's dtype (0 or "" when the spec has none)."""
  if f.is_string:
    return "" if f.fill is None else str(f.fill)
  if f.example_dtype == ms.INT64:
    return int(f.fill or 0)
  return float(f.fill or 0.0)


def _dense(f: ms.FeatureSpec, x) -> tf.Tensor:
  """A parsed (ragged) feature as [B, 1]: no value -> ``f.fill``; a dense column (a
  FixedLenFeature, or the transform graph's output) passes unchanged."""
  if not isinstance(x, tf.RaggedTensor):
    return x
  return x.to_tensor(default_value=_fill(f), shape=[None] + list(f.shape))


def _days_from_civil(y, m, d):
  """Days since 1970-01-01 of int64 tensors (H. Hinnant's days_from_civil, years >= 0)."""
  y = y - tf.cast(m <= 2, tf.int64)
  era = y // 400
  yoe = y - era * 400
  doy = (153 * ((m + 9) % 12) + 2) // 5 + d - 1
  doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468


_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def date_part(strings: tf.Tensor, part: str) -> Tuple[tf.Tensor, tf.Tensor]:
  """(float32 value, valid) of a date part of ISO date strings, as
  column_rules.date_parts computes it (checked against it in tests)."""
  ok = tf.strings.regex_full_match(strings, column_rules.DATE_PATTERN)
  safe = tf.where(ok, strings, "2000-01-01")

  def num(pos, length):
    return tf.strings.to_number(tf.strings.substr(safe, pos, length), tf.int64)

  y, m, d = num(0, 4), num(5, 2), num(8, 2)
  leap = tf.logical_or(tf.logical_and(y % 4 == 0, y % 100 != 0), y % 400 == 0)
  days_in = (tf.gather(tf.constant(_MONTH_DAYS, tf.int64), tf.clip_by_value(m - 1, 0, 11))
             + tf.cast(tf.logical_and(m == 2, leap), tf.int64))
  timed = tf.strings.length(safe) > 10
  hour = tf.strings.to_number(tf.strings.substr(tf.where(timed, safe, "0000-00-00T00"),
                                                11, 2), tf.int64)
  ok = (ok & (m >= 1) & (m <= 12) & (d >= 1) & (d <= days_in)
        & tf.logical_or(tf.logical_not(timed), hour <= 23))
  if part == column_rules.HOUR:
    ok = ok & timed
    value = hour
  else:
    value = {"year": y, "month": m, "day": d,
             "day_of_week": (_days_from_civil(y, m, d) + 3) % 7}[part]
  return tf.cast(value, tf.float32), ok


def derive(f: ms.FeatureSpec, strings: tf.Tensor) -> tf.Tensor:
  """A derived feature (``f.source``) from its raw strings [B, 1] ("" where missing)."""
  if f.part == columns_lib.NUMBER:
    ok = tf.strings.regex_full_match(strings, columns_lib.NUMBER_PATTERN)
    value = tf.strings.to_number(tf.where(ok, strings, "0"), tf.float32)
  else:
    value, ok = date_part(strings, f.part)
  return tf.where(ok, value, tf.fill(tf.shape(value), float(f.fill or 0.0)))


class Preprocessor:
  """Parses and transforms batches for ``spec`` (see the module docstring).

  ``tables`` holds the lookup tables; the exporter attaches it to the saved model so the
  serving signature owns them.
  """

  def __init__(self, spec: ms.ModelSpec,
               normalization: Optional[Mapping[str, List[float]]] = None):
    self.spec = spec
    self.tables: Dict[str, tf.lookup.StaticHashTable] = {}
    for f in spec.string_features:
      if not f.hash_buckets and f.vocabulary:
        self.tables[f.name] = _table(f.vocabulary, 1, 0)
    if spec.label_vocabulary is not None:
      self.tables["__label__"] = _label_table(spec.label_vocabulary)
    self.mean = self.std = None
    self.clip = 0.0
    if normalization is not None:
      self.mean = tf.constant(normalization["mean"], tf.float32)
      self.std = tf.constant(normalization["std"], tf.float32)
      self.clip = float(normalization.get("clip") or 0.0)

  def feature_spec(self, with_label: bool) -> Dict[str, object]:
    out = {}
    for f in self.spec.features:
      dtype = _DTYPES[f.example_dtype]
      if f.source:  # Derived in the graph from a string feature: always ragged.
        out[f.source] = tf.io.RaggedFeature(tf.string)
      elif with_label and not f.missing:
        # Training input: no scanned example lacks it, so a dense parse reads the same
        # values, faster (benchmarks/results/missing_parse.md).
        out[f.name] = tf.io.FixedLenFeature(list(f.shape), dtype, default_value=_fill(f))
      else:
        out[f.name] = tf.io.RaggedFeature(dtype)
    if with_label:
      out[self.spec.label_key] = tf.io.FixedLenFeature([1], _DTYPES[self.spec.label_dtype])
    return out

  def inputs(self, parsed: Mapping[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    """The model's input dict from parsed raw features."""
    raw = parsed
    parsed = {}
    for f in self.spec.features:
      if f.source:
        strings = raw[f.source]
        if isinstance(strings, tf.RaggedTensor):
          strings = strings.to_tensor(default_value="", shape=[None] + list(f.shape))
        parsed[f.name] = derive(f, strings)
      else:
        parsed[f.name] = _dense(f, raw[f.name])
    out = {}
    for i, f in enumerate(self.spec.numeric_features):  # Normalisation: one per numeric.
      if f.dtype != ms.FLOAT32:
        continue
      x = tf.cast(parsed[f.name], tf.float32)  # A standardised int64 feature.
      if self.mean is not None:
        x = (x - self.mean[i]) / self.std[i]
        if self.clip:
          x = tf.clip_by_value(x, -self.clip, self.clip)
      out[f.name] = x
    for f in self.spec.features:
      if f.dtype == ms.INT64:
        out[f.name] = parsed[f.name]
      elif f.is_string:
        out[f.name] = self._ids(f, parsed[f.name])
    return {f.name: out[f.name] for f in self.spec.features}

  def _ids(self, f: ms.FeatureSpec, values: tf.Tensor) -> tf.Tensor:
    if f.hash_buckets:
      ids = tf.strings.to_hash_bucket_fast(values, f.hash_buckets) + 1
      return tf.where(tf.equal(values, ""), tf.zeros_like(ids), ids)
    if f.name not in self.tables:  # Empty vocabulary: everything is out of vocabulary.
      return tf.zeros(tf.shape(values), tf.int64)
    return self.tables[f.name].lookup(values)

  def labels(self, parsed: Mapping[str, tf.Tensor]) -> tf.Tensor:
    y = parsed[self.spec.label_key]
    if self.spec.label_vocabulary is not None:
      y = self.tables["__label__"].lookup(y)
    if self.spec.task == ms.MULTICLASS:
      return tf.cast(y, tf.int64)
    return tf.cast(y, tf.float32)

  def parse_batch(self, serialized: tf.Tensor):
    """(inputs, labels) of a batch of serialized tf.Examples (input pipeline)."""
    parsed = tf.io.parse_example(serialized, self.feature_spec(with_label=True))
    return self.inputs(parsed), self.labels(parsed)

  def serving_inputs(self, serialized: tf.Tensor) -> Dict[str, tf.Tensor]:
    """The model's inputs from serialized tf.Examples that need not carry the label."""
    return self.inputs(tf.io.parse_example(serialized, self.feature_spec(with_label=False)))

  def has_label(self, serialized: tf.Tensor) -> tf.Tensor:
    """True if one serialized example has exactly one label value (skip_missing_labels)."""
    parsed = tf.io.parse_single_example(
        serialized, {self.spec.label_key: tf.io.VarLenFeature(_DTYPES[self.spec.label_dtype])})
    return tf.equal(tf.size(parsed[self.spec.label_key].values), 1)

  def labelled(self, serialized: tf.Tensor) -> tf.Tensor:
    """The examples of a batch of serialized tf.Examples that :meth:`has_label`, in order.

    One ``parse_example`` for the whole batch: a per-example ``Dataset.filter`` with
    :meth:`has_label` costs about 25 us per example on this machine, 4.3 s of a
    160,000-row load (benchmarks/results/trainer_child.md)."""
    label = self.spec.label_key
    values = tf.io.parse_example(
        serialized, {label: tf.io.RaggedFeature(_DTYPES[self.spec.label_dtype])})[label]
    return tf.boolean_mask(serialized, tf.equal(values.row_lengths(), 1))
