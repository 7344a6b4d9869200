"""One scan of the train and eval splits, before training: the model spec's facts.

Per file it counts examples whose label is missing (or has more than one value) and,
per feature, examples without a value (missing.py: absent or an empty list); over the
train split it counts the values of each string feature (vocabularies) and sums the
present values of the numeric features (normalisation and fill values); over both splits
it collects the label's distinct values (task inference, label vocabulary). A feature
with more than one value in an example stops the scan (missing.MultiValuedError). The
scan reads serialized batches and parses them with one ``parse_example`` per batch,
every feature ragged.
"""
import collections
import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tfx_parallel.components.common import label_encoding
from tfx_parallel.components.common import task_contract
from tfx_parallel.components.common import na_values as na_lib
from tfx_parallel.components.common.splits import split_files
from tfx_parallel.components.distributed_trainer.inputs import columns as columns_lib
from tfx_parallel.components.distributed_trainer.inputs import missing as missing_lib
from tfx_parallel.components.distributed_trainer import model_spec as ms

SCAN_BATCH = 4096
_KIND_DTYPE = {"float": tf.float32, "int": tf.int64, "bytes": tf.string}


class MissingLabelError(ValueError):
  """Examples lack their label; the message names the split, file and count."""


@dataclasses.dataclass
class ScanResult:
  label: ms.LabelStats
  string_counts: Dict[str, collections.Counter]
  numeric_mean: np.ndarray          # per numeric feature, of its present train values
  numeric_std: np.ndarray
  missing_labels: Dict[str, Dict[str, int]]  # split -> file -> examples without one label
  rows: Dict[str, int]
  # feature -> split -> file -> examples without a value (absent or an empty list).
  missing_values: Dict[str, Dict[str, Dict[str, int]]] = dataclasses.field(
      default_factory=dict)


def label_kind(files: Sequence[str], label_key: str) -> str:
  """"float" | "int" | "bytes": the list type of the label in the first labelled example."""
  for path in files:
    for record in tf.data.TFRecordDataset(path, compression_type="GZIP").take(1000):
      feature = tf.train.Example.FromString(record.numpy()).features.feature
      if label_key in feature:
        kind = feature[label_key].WhichOneof("kind")
        return {"float_list": "float", "int64_list": "int", "bytes_list": "bytes"}[kind]
  raise MissingLabelError(f"label {label_key!r} is not a feature of the first examples of "
                          f"{list(files)[:3]}")


def _row_lengths(ragged) -> np.ndarray:
  """Values per example of a parsed ragged feature, in NumPy: ``RaggedTensor.row_lengths()``
  runs eager TensorFlow ops, about 2 ms a call here, 0.9 s of a 200,000-row scan of 9
  features (benchmarks/results/trainer_child.md)."""
  return np.diff(ragged.row_splits.numpy())


def scan(examples_uri: str, label_key: str, numeric: Sequence[Tuple[str, str]],
         string_keys: Sequence[str], splits: Sequence[str] = ("train", "eval"),
         files: Optional[Mapping[str, Sequence[str]]] = None,
         na_values: Optional[Sequence[str]] = None) -> ScanResult:
  """Scans ``splits`` (the first one is the train split for counts and moments).

  ``files``: split -> files (description.describe lists them with TFX's split helpers); None
  reads ``Split-<name>/`` under ``examples_uri``. A string value in ``na_values`` (None:
  pandas' set, common/na_values.py) is counted as a missing value of its feature; the
  train counts keep it (columns.decide takes it out of the vocabulary).
  """
  na_bytes = {t.encode("utf-8") for t in na_lib.token_set(na_values)}
  if files is None:
    files = {split: split_files(examples_uri, split) for split in splits}
  kind = label_kind(files[splits[0]], label_key)
  label = ms.LabelStats(kind)
  spec = {label_key: tf.io.RaggedFeature(_KIND_DTYPE[kind])}
  for name in string_keys:
    spec[name] = tf.io.RaggedFeature(tf.string)
  for name, dtype in numeric:
    spec[name] = tf.io.RaggedFeature(tf.as_dtype(dtype))
  parse = tf.function(lambda s: tf.io.parse_example(s, spec))
  counts = {name: collections.Counter() for name in string_keys}
  n_num = len(numeric)
  total = np.zeros(n_num, np.float64)
  total_sq = np.zeros(n_num, np.float64)
  present = np.zeros(n_num, np.int64)
  missing: Dict[str, Dict[str, int]] = {}
  holes: Dict[str, Dict[str, Dict[str, int]]] = {
      name: {} for name in [n for n, _ in numeric] + list(string_keys)}
  rows: Dict[str, int] = {}
  for split in splits:
    missing[split] = {}
    rows[split] = 0
    train = split == splits[0]
    for path in files[split]:
      bad = 0
      empty = collections.Counter()
      ds = tf.data.TFRecordDataset(path, compression_type="GZIP").batch(SCAN_BATCH)
      for batch in ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2):
        lab = batch[label_key]
        lengths = _row_lengths(lab)
        bad += int(np.sum(lengths != 1))
        rows[split] += len(lengths)
        values, value_counts = np.unique(lab.flat_values.numpy(), return_counts=True)
        label.add([v.decode("utf-8", "replace") if kind == "bytes" else float(v)
                   for v in values.tolist()], value_counts.tolist(), split)
        multi = []
        for name in holes:
          per_row = _row_lengths(batch[name])
          empty[name] += int(np.sum(per_row == 0))
          if name in counts:  # A string feature: its missing-value tokens are missing.
            empty[name] += sum(v in na_bytes for v in batch[name].flat_values.numpy().tolist())
          if np.any(per_row > 1):
            multi.append(name)
        if multi:
          raise missing_lib.MultiValuedError(missing_lib.multi_valued_message(
              multi, f"split {split!r}, file {path}"))
        if not train:
          continue
        for name in string_keys:
          flat = batch[name].flat_values.numpy()
          if flat.size:
            uniq, cnt = np.unique(flat, return_counts=True)
            counts[name].update({u.decode("utf-8", "replace"): int(c)
                                 for u, c in zip(uniq.tolist(), cnt.tolist())})
        for i, (name, _) in enumerate(numeric):
          x = batch[name].flat_values.numpy().astype(np.float64)  # Present values only.
          total[i] += x.sum()
          total_sq[i] += np.square(x).sum()
          present[i] += x.size
      if bad:
        missing[split][path] = bad
      for name in holes:
        holes[name].setdefault(split, {})[path] = empty[name]
  n = np.maximum(present, 1)
  mean = total / n
  std = np.sqrt(np.maximum(total_sq / n - np.square(mean), 0.0))
  return ScanResult(label=label, string_counts=counts,
                    numeric_mean=mean.astype(np.float32),
                    numeric_std=np.maximum(std, 1e-6).astype(np.float32),
                    missing_labels=missing, rows=rows, missing_values=holes)


def missing_label_record(result: ScanResult, label_key: str, skip: bool,
                         max_share: float = task_contract.MAX_MISSING_LABEL_SHARE
                         ) -> Dict[str, Any]:
  """The run record's ``missing_labels`` (examples without exactly one label value), or
  raises MissingLabelError: when there are some and ``skip`` is off (naming the split and
  file), or when they are more than ``max_share`` of the scanned examples.

  Record: {"count", "rows", "share", "splits": {split: count}, "policy": "skip" | "fail"}.
  """
  per_split = {split: int(sum(per_file.values()))
               for split, per_file in result.missing_labels.items()}
  count = sum(per_split.values())
  rows = int(sum(result.rows.values()))
  share = count / rows if rows else 0.0
  record = {"count": count, "rows": rows, "share": round(share, 6),
            "splits": per_split, "policy": "skip" if skip else "fail"}
  if not count:
    return record
  if not skip:
    split, per_file = next((s, f) for s, f in result.missing_labels.items() if f)
    path, n = next(iter(per_file.items()))
    raise MissingLabelError(
        f"{n} example(s) in split {split!r} file {path} have no value (or more than one) "
        f"for the label {label_key!r}; {count} of {rows} in all ({100 * share:.1f}%). A "
        f"missing label is never read as 0, and trainer.skip_missing_labels=false makes "
        f"it an error: fix the data, or set trainer.skip_missing_labels=true (the default) "
        f"to skip and count them")
  if share > max_share:
    shown = ", ".join(f"{split} {n}" for split, n in per_split.items() if n)
    raise MissingLabelError(
        f"{count} of {rows} examples ({100 * share:.1f}%: {shown}) have no value (or more "
        f"than one) for the label {label_key!r}, more than "
        f"trainer.max_missing_label_share={max_share:g} allows: a label this sparse is "
        f"more likely the wrong column or a broken file than a few unlabelled rows. Check "
        f"the label column (--label) and the data; to train on the {rows - count} "
        f"labelled examples anyway, raise trainer.max_missing_label_share")
  return record


def missing_label_line(record: Mapping[str, Any], label_key: str) -> str:
  """The console line of a ``missing_labels`` record with skipped examples."""
  shown = ", ".join(f"{split} {n}" for split, n in record["splits"].items() if n)
  return (f"missing labels: {record['count']} of {record['rows']} examples "
          f"({100 * record['share']:.1f}%; {shown}) have no value for the label "
          f"{label_key!r}; skipped in training and evaluation "
          f"(trainer.skip_missing_labels=false makes this an error)")


def check_labels(result: ScanResult, label_key: str, skip: bool,
                 max_share: float = task_contract.MAX_MISSING_LABEL_SHARE) -> int:
  """Raises MissingLabelError as :func:`missing_label_record` does; returns the count."""
  return missing_label_record(result, label_key, skip, max_share)["count"]


@dataclasses.dataclass
class Prepared:
  """What :func:`prepare_all` finds: the spec, normalisation, skipped and counted rows,
  and the missing values (missing.record: feature -> {split: count, "fill": value})."""
  spec: ms.ModelSpec
  normalization: Optional[Dict[str, List[float]]]
  skipped: int
  rows: Dict[str, int]
  missing_values: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
  # missing_label_record: {"count", "rows", "share", "splits", "policy"}.
  missing_labels: Dict[str, Any] = dataclasses.field(default_factory=dict)
  # Classifiers: split -> class name -> examples (None: regression).
  label_counts: Optional[Dict[str, Dict[str, int]]] = None
  # Classes with eval examples but none in train: class -> {split: examples}.
  unseen_classes: Dict[str, Dict[str, int]] = dataclasses.field(default_factory=dict)
  columns: Optional[columns_lib.Columns] = None


def prepare_all(examples_uri: str, feature_keys: Sequence[str],
                string_feature_keys: Sequence[str], label_key: str, *, task: Optional[str],
                max_vocabulary: int, hash_buckets: int, hparams: Mapping[str, Any],
                skip_missing_labels: bool, normalize: bool, normalize_clip: float = 0.0,
                max_missing_label_share: float = task_contract.MAX_MISSING_LABEL_SHARE,
                dtypes: Optional[Mapping[str, str]] = None,
                files: Optional[Mapping[str, Sequence[str]]] = None,
                splits: Sequence[str] = ("train", "eval"),
                vocabularies: Optional[Mapping[str, Sequence[str]]] = None,
                required: Sequence[str] = (), na_values: Optional[Sequence[str]] = None,
                id_like_ratio: Optional[float] = columns_lib.column_rules.ID_LIKE_RATIO,
                keep_as_category: Sequence[str] = ()) -> Prepared:
  """The scan and the spec. ``dtypes``: numeric feature -> "float32" | "int64" (default
  float32); ``vocabularies``: string feature -> fixed vocabulary (a schema's string
  domain) instead of the counted one. With ``normalize`` every numeric feature is
  standardised, int64 ones too: the spec then lists them as float32 inputs (raw_dtype
  int64), so a model never declares an int64 Input for a standardised value. Without
  it, int64 features reach the model as ints. ``required``: features an example must
  have (a schema's presence); one missing is a missing.RequiredFeatureError. Every other
  missing value is filled (missing.py; ``FeatureSpec.fill``). Examples without a label
  are skipped and counted under ``skip_missing_labels`` while they are at most
  ``max_missing_label_share`` of the examples (missing_label_record). ``na_values``,
  ``id_like_ratio``, ``keep_as_category``: what becomes of each string feature
  (columns.py: missing-value tokens, dates, numbers written as text, ID-like)."""
  dtypes = dict(dtypes or {})
  numeric = [(k, dtypes.get(k, ms.FLOAT32)) for k in feature_keys]
  result = scan(examples_uri, label_key, numeric, list(string_feature_keys), splits, files,
                na_values)
  labels = missing_label_record(result, label_key, skip_missing_labels,
                                max_missing_label_share)
  missing_lib.check_required(result.missing_values, required, label_key)
  na = na_lib.token_set(na_values)
  cols = columns_lib.decide(result.string_counts, list(string_feature_keys), na,
                            id_like_ratio, keep_as_category,
                            taken=[n for n, _ in numeric] + [label_key])
  counts = dict(cols.counts)
  for name, vocab in (vocabularies or {}).items():
    # A fixed vocabulary keeps its order: rank by position (most "frequent" first).
    vocab = [v for v in vocab if v not in na]
    if name in counts:
      counts[name] = {v: len(vocab) - i for i, v in enumerate(vocab)}
  spec = ms.build_spec(numeric, cols.categories, counts, label_key,
                       result.label, task=task, max_vocabulary=max_vocabulary,
                       hash_buckets=hash_buckets, hparams=hparams)
  ms.check_classes(result.label, label_key, spec.task, splits[0], inferred=task is None)
  derived = [ms.FeatureSpec(name, ms.FLOAT32, raw_dtype=ms.STRING, source=d.source,
                            part=part, fill=mean, missing=1)
             for d in cols.derived.values()
             for name, part, mean in zip(d.names, d.parts, d.mean)]
  spec = dataclasses.replace(spec, features=(
      spec.features[:len(numeric)] + tuple(derived) + spec.features[len(numeric):]))
  derived_mean = [m for d in cols.derived.values() for m in d.mean]
  derived_std = [s for d in cols.derived.values() for s in d.std]
  norm = None
  if normalize and (numeric or derived):
    norm = {"mean": result.numeric_mean.tolist() + derived_mean,
            "std": result.numeric_std.tolist() + derived_std,
            "clip": float(normalize_clip)}
    spec = dataclasses.replace(spec, features=tuple(
        dataclasses.replace(f, dtype=ms.FLOAT32, raw_dtype=ms.INT64)
        if f.dtype == ms.INT64 else f for f in spec.features))
  fills = {name: missing_lib.fill_value(dtype, float(result.numeric_mean[i]))
           for i, (name, dtype) in enumerate(numeric)}
  fills.update({name: "" for name in string_feature_keys})
  for d in cols.derived.values():  # The train mean of each part (a dict for a date).
    fills[d.source] = d.mean[0] if d.parts == (columns_lib.NUMBER,) else dict(
        zip(d.parts, d.mean))
  holes = missing_lib.counts(result.missing_values)
  spec = dataclasses.replace(spec, features=tuple(
      f if f.source else
      dataclasses.replace(f, fill=fills[f.name], missing=sum(holes.get(f.name, {}).values()))
      for f in spec.features))
  label_counts = result.label.class_counts(spec.task, spec.label_vocabulary)
  return Prepared(spec, norm, labels["count"], dict(result.rows),
                  missing_lib.record(result.missing_values, fills), missing_labels=labels,
                  label_counts=label_counts,
                  unseen_classes=label_encoding.unseen_in_train(label_counts or {}, splits[0]),
                  columns=cols)


def prepare(examples_uri: str, feature_keys: Sequence[str], string_feature_keys: Sequence[str],
            label_key: str, **kwargs
            ) -> Tuple[ms.ModelSpec, Optional[Dict[str, List[float]]], int]:
  """(ModelSpec, normalisation {"mean", "std", "clip"} or None, skipped examples); the
  keyword arguments are :func:`prepare_all`'s."""
  p = prepare_all(examples_uri, feature_keys, string_feature_keys, label_key, **kwargs)
  return p.spec, p.normalization, p.skipped
