"""What a user module's ``build_model(spec)`` is told about its inputs and task (pure).

A :class:`ModelSpec` lists the input features (name, dtype, shape; for string features
their vocabulary or hash buckets and ``num_ids``), the label, the task and its classes,
and the user's ``hparams``. The trainer builds it from the Examples artifact and one scan
of the data (:mod:`stats`), then hands the same spec to every training process.

String features reach the model as **int64 ids**: 0 means out of vocabulary or missing,
1..V the vocabulary (most frequent first), or 1..N a hash bucket. The lookup runs in the
input pipeline and in the exported serving signature, never inside the model, so every
layout (DTensor included, which cannot run hash tables) trains the same model.

Task inference from the label (when config ``task`` is not set):

* string label: ``binary`` with exactly 2 distinct values, else ``multiclass``; the
  classes are the sorted distinct values of the train and eval splits
  (``label_vocabulary``: components/common/label_encoding.py, the one encoding that
  training, evaluation and serving share);
* numeric label with values only in {0, 1}: ``binary``;
* whole numbers that are exactly 0..K-1, 3 <= K <= MAX_INFERRED_CLASSES: ``multiclass``;
* anything else: ``regression``.
"""
import collections
import dataclasses
import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.common import keys
from tfx_parallel.components.common import label_encoding

REGRESSION, BINARY, MULTICLASS = keys.TASKS
FLOAT32, INT64, STRING = "float32", "int64", "string"
DTYPES = (FLOAT32, INT64, STRING)
LABEL_DTYPES = {"float": FLOAT32, "int": INT64, "bytes": STRING}  # tf.Example list kind.
MAX_INFERRED_CLASSES = 20   # More distinct whole numbers than this: inferred regression.
MAX_LABEL_VALUES = 1000     # Distinct label values kept by a scan (string labels: classes).


class SpecError(ValueError):
  """The data or config cannot give a model spec; the message names the split/feature."""


class SingleClassError(SpecError):
  """A classifier's label holds one class: in all the scanned data (``split`` None), or
  in the train split ``split`` only. The message names the label, the value and the rows;
  the trainer's executor prefixes the data's file (it knows the Examples' source)."""

  def __init__(self, message: str, split: Optional[str] = None):
    self.split = split
    super().__init__(message)


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
  """One input of the model.

  Attributes:
    name: the tf.Example feature name (the key of the model's input dict).
    dtype: "float32", "int64" or "string". The model receives float32 for "float32",
      int64 for "int64", and int64 ids for "string". An int feature standardised by
      config ``normalize`` is "float32" here (its ``raw_dtype`` is "int64").
    shape: per-example shape of the model input (always (1,) today).
    vocabulary: string features: the values with ids 1..V (None when hashed).
    num_ids: string features: ids are 0..num_ids-1 (size an Embedding with it).
    hash_buckets: string features hashed into ids 1..hash_buckets (0: vocabulary).
    raw_dtype: the feature's type in the tf.Examples when it differs from ``dtype``
      (None: the same).
    fill: what a missing value becomes, in the Examples' units (missing.py): the train
      mean of a numeric feature, "" (id 0) for a string; None: 0.
    missing: examples of the scanned splits without a value (0: the training input
      may parse the feature as a dense column; serving always accepts a missing one).
    source: a feature derived in the graph (inputs/columns.py): the string feature of
      the tf.Examples it is computed from (``raw_dtype`` "string"); None: ``name``.
    part: of a derived feature: a date part ("year", "month", ...) or "number".
  """
  name: str
  dtype: str
  shape: Tuple[int, ...] = (1,)
  vocabulary: Optional[Tuple[str, ...]] = None
  num_ids: int = 0
  hash_buckets: int = 0
  raw_dtype: Optional[str] = None
  fill: Any = None
  missing: int = 0
  source: Optional[str] = None
  part: Optional[str] = None

  @property
  def is_string(self) -> bool:
    return self.dtype == STRING

  @property
  def example_key(self) -> str:
    """The tf.Example feature this input is read from."""
    return self.source or self.name

  @property
  def example_dtype(self) -> str:
    """The feature's type in the tf.Examples (what the parser reads)."""
    return self.raw_dtype or self.dtype


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """Inputs, label and task of the model (see the module docstring).

  Attributes:
    features: the model's inputs, in a fixed order (numeric first, then strings).
    label_key: the label feature.
    task: "regression" | "binary" | "multiclass".
    num_classes: 1 for regression and binary (one output), K for multiclass.
    label_vocabulary: class id -> label string (string labels only).
    hparams: the user's hyperparameters from config (a JSON object).
    label_dtype: of the raw label: "float32", "int64" or "string".
  """
  features: Tuple[FeatureSpec, ...]
  label_key: str
  task: str = REGRESSION
  num_classes: int = 1
  label_vocabulary: Optional[Tuple[str, ...]] = None
  hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  label_dtype: str = FLOAT32

  @property
  def output_units(self) -> int:
    """Width of the model output the task needs: 1, 1 (one logit) or K logits."""
    return self.num_classes if self.task == MULTICLASS else 1

  @property
  def feature_names(self) -> Tuple[str, ...]:
    return tuple(f.name for f in self.features)

  @property
  def numeric_features(self) -> Tuple[FeatureSpec, ...]:
    return tuple(f for f in self.features if not f.is_string)

  @property
  def string_features(self) -> Tuple[FeatureSpec, ...]:
    return tuple(f for f in self.features if f.is_string)

  def feature(self, name: str) -> FeatureSpec:
    for f in self.features:
      if f.name == name:
        return f
    raise KeyError(f"no feature {name!r}; the spec has {list(self.feature_names)}")

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "ModelSpec":
    features = tuple(FeatureSpec(**dict(f, shape=tuple(f["shape"]),
                                        vocabulary=_tuple_or_none(f.get("vocabulary"))))
                     for f in data["features"])
    return cls(features=features, label_key=data["label_key"], task=data["task"],
               num_classes=int(data["num_classes"]),
               label_vocabulary=_tuple_or_none(data.get("label_vocabulary")),
               hparams=dict(data.get("hparams") or {}),
               label_dtype=data.get("label_dtype", FLOAT32))

  def describe(self) -> str:
    parts = []
    for f in self.features:
      if f.is_string:
        how = f"hash {f.hash_buckets}" if f.hash_buckets else f"vocab {len(f.vocabulary or ())}"
        parts.append(f"{f.name}:string({how})")
      else:
        parts.append(f"{f.name}:{f.dtype}" + (f"(from {f.raw_dtype})" if f.raw_dtype else ""))
    classes = f", {self.num_classes} classes" if self.task == MULTICLASS else ""
    return f"task {self.task}{classes}, label {self.label_key!r}, features " + ", ".join(parts)


def _tuple_or_none(value) -> Optional[Tuple[str, ...]]:
  return None if value is None else tuple(value)


# ------------------------------------------------------------------------- statistics


@dataclasses.dataclass
class LabelStats:
  """What a scan saw of the label: its kind and (up to MAX_LABEL_VALUES) distinct values.

  ``kind``: "float" | "int" | "bytes" (the tf.Example list type). ``values``: distinct
  values (float for numeric, str for bytes); ``overflow``: more distinct values existed.
  ``counts``: split -> value -> examples (kept until ``overflow``; then empty).
  """
  kind: str
  values: set = dataclasses.field(default_factory=set)
  overflow: bool = False
  counts: Dict[str, collections.Counter] = dataclasses.field(default_factory=dict)

  def add(self, values: Iterable, counts: Optional[Iterable[int]] = None,
          split: Optional[str] = None):
    """Adds distinct ``values`` (and, with ``split``, their ``counts`` in that split)."""
    if self.overflow:
      return
    values = list(values)
    self.values.update(values)
    if split is not None:
      per_split = self.counts.setdefault(split, collections.Counter())
      per_split.update(dict(zip(values, counts if counts is not None else [1] * len(values))))
    if len(self.values) > MAX_LABEL_VALUES:
      self.overflow = True
      self.counts = {}

  def class_counts(self, task: str, vocabulary: Optional[Sequence[str]] = None
                   ) -> Optional[Dict[str, Dict[str, int]]]:
    """split -> class name -> examples for a classifier (names: the label vocabulary's,
    else the class id's text, label_encoding.class_names); None for regression or when
    more than MAX_LABEL_VALUES values stopped the counting."""
    if task == REGRESSION or self.overflow or not self.counts:
      return None
    out = {}
    for split, counter in self.counts.items():
      named = {(str(v) if vocabulary is not None else f"{float(v):g}"): int(n)
               for v, n in counter.items()}
      out[split] = dict(sorted(named.items()))
    return out


def vocabulary_from_counts(counts: Mapping[str, int], max_size: int) -> Tuple[str, ...]:
  """Most frequent first (ties: by value), at most ``max_size``; "" (missing) excluded."""
  ranked = sorted(((v, c) for v, c in counts.items() if v != ""), key=lambda vc: (-vc[1], vc[0]))
  return tuple(v for v, _ in ranked[:max_size])


def infer_task(label: LabelStats, label_key: str, configured: Optional[str] = None
               ) -> Tuple[str, int, Optional[Tuple[str, ...]]]:
  """(task, num_classes, label_vocabulary) from the label's values and config ``task``.

  Raises SpecError naming the label when the configured task cannot fit the values.
  """
  if configured is not None and configured not in keys.TASKS:
    raise SpecError(f"task must be one of {list(keys.TASKS)}. Received: {configured!r}")
  if label.kind == "bytes":
    if label.overflow:
      raise SpecError(f"label {label_key!r} holds strings with more than "
                      f"{MAX_LABEL_VALUES} distinct values; that is not a class label")
    classes = label_encoding.vocabulary(label.values)
    if configured == REGRESSION:
      raise SpecError(f"task 'regression' needs a numeric label, but label {label_key!r} "
                      f"holds strings (e.g. {classes[:3]!r})")
    if configured == BINARY and len(classes) != 2:
      raise SpecError(f"task 'binary' needs exactly 2 label values; label {label_key!r} "
                      f"has {len(classes)}: {list(classes[:10])!r}")
    if len(classes) < 2:
      check_classes(label, label_key, configured or MULTICLASS, inferred=not configured)
    task = configured or (BINARY if len(classes) == 2 else MULTICLASS)
    return task, (1 if task == BINARY else len(classes)), classes
  values = sorted(label.values)
  finite = all(math.isfinite(v) for v in values)
  whole = finite and all(float(v).is_integer() for v in values)
  if configured == REGRESSION:
    return REGRESSION, 1, None
  if configured == BINARY:
    if label.overflow or not set(values) <= {0.0, 1.0}:
      raise SpecError(f"task 'binary' needs a label of 0 or 1; label {label_key!r} has "
                      f"{_show_values(values, label.overflow)}")
    return BINARY, 1, None
  if configured == MULTICLASS:
    if label.overflow or not whole or (values and values[0] < 0):
      raise SpecError(f"task 'multiclass' needs labels 0..K-1 (whole numbers); label "
                      f"{label_key!r} has {_show_values(values, label.overflow)}")
    k = int(values[-1]) + 1 if values else 0
    if k < 2:
      raise SpecError(f"task 'multiclass' needs at least 2 classes; label {label_key!r} "
                      f"has {_show_values(values, label.overflow)}")
    return MULTICLASS, k, None
  if not label.overflow and values and set(values) <= {0.0, 1.0}:
    return BINARY, 1, None
  k = len(values)
  if (not label.overflow and whole and 3 <= k <= MAX_INFERRED_CLASSES
      and values == [float(i) for i in range(k)]):
    return MULTICLASS, k, None
  return REGRESSION, 1, None


def check_classes(label: LabelStats, label_key: str, task: str,
                  train_split: Optional[str] = None, inferred: bool = False) -> None:
  """Raises SingleClassError when ``task`` is a classifier's (binary or multiclass) and
  the label holds one value: in every scanned split, or in ``train_split`` (None: not
  checked per split). A regression label is not checked: one value there is a constant
  to predict (the evaluator's R^2 is then undefined), not a model that cannot be built.

  Reads the scan's per-split counts (``label.counts``); without them only ``values``.
  ``inferred``: the task was inferred from the label (config ``task`` unset)."""
  if task == REGRESSION or label.overflow:
    return
  numeric = label.kind != "bytes"
  what = f"a classifier (task {task}{', inferred from the label' if inferred else ''})"
  show = (lambda v: f"{float(v):g}") if numeric else repr
  total = collections.Counter()
  for counter in label.counts.values():
    total.update(counter)
  values = set(total) or set(label.values)
  if len(values) < 2:
    value = show(next(iter(values))) if values else "none"
    rows = sum(total.values())
    where = ", ".join(f"{s} {sum(c.values())}" for s, c in label.counts.items())
    in_rows = f"in all {rows} rows ({where})" if rows else "in every example"
    regression = (f"; or, if {label_key!r} is a number to predict rather than a class, "
                  f"set trainer.task=regression" if numeric else "")
    raise SingleClassError(
        f"label {label_key!r} has a single value [{value}] {in_rows}: {what} needs at "
        f"least 2 classes, and nothing was trained. Are these the first rows of a file "
        f"sorted by the label? Use the whole file; or choose another label column "
        f"(set example_gen.label=<column>){regression}")
  train = label.counts.get(train_split) if train_split is not None else None
  if train is not None and len(train) < 2:
    value = show(next(iter(train))) if train else "none"
    rows = sum(train.values())
    seen = ", ".join(f"{show(v)}: {n} rows" for v, n in sorted(total.items()))
    raise SingleClassError(
        f"the {train_split!r} split has a single value [{value}] of label {label_key!r} "
        f"in its {rows} rows, while all the data has {len(total)} classes ({seen}): "
        f"{what} trained on one class only ever predicts it, and nothing was trained. "
        f"The data is too small (or too unevenly split) for its split: use more rows, or "
        f"another row split (set example_gen.seed=<n>)", split=train_split)


def _show_values(values: Sequence[float], overflow: bool) -> str:
  shown = ", ".join(f"{v:g}" for v in values[:10])
  more = " ..." if overflow or len(values) > 10 else ""
  return f"values [{shown}{more}]"


def build_spec(numeric: Sequence[Tuple[str, str]], string_keys: Sequence[str],
               string_counts: Mapping[str, Mapping[str, int]], label_key: str,
               label: LabelStats, *, task: Optional[str] = None, max_vocabulary: int = 10_000,
               hash_buckets: int = 0, hparams: Optional[Mapping[str, Any]] = None) -> ModelSpec:
  """The ModelSpec from the features' types, the scan's counts and the label's values.

  ``numeric``: (name, "float32" | "int64") per numeric feature; ``string_counts``:
  string feature -> value -> count in the train split.
  """
  task, num_classes, label_vocabulary = infer_task(label, label_key, task)
  features: List[FeatureSpec] = [FeatureSpec(name, dtype) for name, dtype in numeric]
  for name in string_keys:
    if hash_buckets:
      features.append(FeatureSpec(name, STRING, hash_buckets=hash_buckets,
                                  num_ids=hash_buckets + 1))
    else:
      vocab = vocabulary_from_counts(string_counts.get(name, {}), max_vocabulary)
      features.append(FeatureSpec(name, STRING, vocabulary=vocab, num_ids=len(vocab) + 1))
  return ModelSpec(features=tuple(features), label_key=label_key, task=task,
                   num_classes=num_classes, label_vocabulary=label_vocabulary,
                   hparams=dict(hparams or {}), label_dtype=LABEL_DTYPES[label.kind])


def merge_counts(into: Dict[str, collections.Counter], new: Mapping[str, Mapping[str, int]]):
  for name, counts in new.items():
    into.setdefault(name, collections.Counter()).update(counts)
