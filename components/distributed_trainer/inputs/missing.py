"""The trainer's one missing-value policy, whatever wrote the Examples (pure).

A value is **missing** when its feature is absent from a tf.Example (PartitionedExampleGen
leaves an empty CSV cell out) or present with no values (stock CsvExampleGen writes an
empty cell as an empty list). Both are read the same way, with or without a schema, in
training, evaluation and the exported serving signature (preprocess.Preprocessor):

=======  ================================================  ==============================
type     a missing value becomes (``fill``)                  the model sees
=======  ================================================  ==============================
float    the mean of the train split's present values        0.0 after ``normalize``
int      that mean rounded to an int (a value it can hold)   ~0 after ``normalize``
string   "" (empty)                                          id 0, shared with OOV
=======  ================================================  ==============================

The fill values are in the model spec (``FeatureSpec.fill``) and, with the counts, in
history.json's ``missing_values``.

A schema (SchemaGen / ImportSchemaGen) is read, not just accepted:

* a feature the schema promises in every example (``presence.min_fraction`` 1 and a
  ``shape``, as TF Transform reads a schema; description.read_schema) is **required**: an
  example without it fails the run before the first step, naming the split, file and
  feature (:class:`RequiredFeatureError`). Stock SchemaGen gives a column with empty
  cells no shape, so it is optional;
* a feature with more than one value per example (schema ``shape`` or ``value_count``,
  or found so in the data) is rejected before training, naming it and the way out
  (:class:`MultiValuedError`): reduce it to one value with TFX Transform, or read it in
  a user module of your own.

The label is not filled: a missing label follows config ``skip_missing_labels``.
"""
from typing import Any, Dict, Mapping, Optional, Sequence

WAY_OUT = ("reduce it to one value per example with TFX Transform (a preprocessing_fn; "
           "pass transform_graph= to the trainer), or leave it out of the schema/columns "
           "and read it in a model module of your own")


class RequiredFeatureError(ValueError):
  """A feature the schema requires is missing; the message names split, file, feature."""


class MultiValuedError(ValueError):
  """A feature holds more than one value per example; the message names it and the way
  out."""


def multi_valued_message(names: Sequence[str], where: str) -> str:
  """The message of a MultiValuedError for ``names`` found in ``where``."""
  shown = ", ".join(repr(n) for n in names)
  return (f"feature(s) {shown} hold more than one value per example ({where}); the "
          f"trainer reads one value per feature: {WAY_OUT}")


def check_required(missing: Mapping[str, Mapping[str, Mapping[str, int]]],
                   required: Sequence[str], label_key: str = "") -> None:
  """Raises RequiredFeatureError for the first required feature with a missing value.

  ``missing``: feature -> split -> file -> examples without a value (stats.scan)."""
  for name in required:
    if name == label_key:
      continue  # The label follows skip_missing_labels.
    for split, per_file in (missing.get(name) or {}).items():
      for path, n in per_file.items():
        if n:
          raise RequiredFeatureError(
              f"feature {name!r} is required by the schema (presence.min_fraction 1 and a "
              f"shape) but {n} example(s) in split {split!r} file {path} have no value "
              f"for it. Fix the data, or make it optional in the schema (drop its shape, "
              f"or presence.min_fraction < 1) to fill it by the trainer's missing-value "
              f"policy")


def fill_value(dtype: str, mean: float) -> Any:
  """The documented fill of a numeric feature: the mean of its present train values,
  rounded for an int feature (so a tf.Example can carry the same value)."""
  if dtype == "int64":
    return int(round(mean))
  return float(mean)


def counts(missing: Mapping[str, Mapping[str, Mapping[str, int]]]) -> Dict[str, Dict[str, int]]:
  """feature -> split -> missing values (summed over files), features with any only."""
  out = {}
  for name, per_split in missing.items():
    totals = {split: int(sum(per_file.values())) for split, per_file in per_split.items()}
    if any(totals.values()):
      out[name] = totals
  return out


def record(missing: Mapping[str, Mapping[str, Mapping[str, int]]],
           fills: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
  """history.json's ``missing_values``: feature -> {split: count, ..., "fill": value}."""
  return {name: dict(totals, fill=fills.get(name))
          for name, totals in sorted(counts(missing).items())}


def summary(recorded: Mapping[str, Mapping[str, Any]], rows: Optional[Mapping[str, int]] = None
            ) -> str:
  """One line: each feature with missing values, how many, and what fills them."""
  if not recorded:
    return "missing values: none"
  total_rows = sum((rows or {}).values())
  parts = []
  for name, entry in recorded.items():
    n = sum(v for k, v in entry.items() if k != "fill")
    share = f" ({100.0 * n / total_rows:.1f}%)" if total_rows else ""
    fill = entry.get("fill")
    if isinstance(fill, dict):  # A date: each derived part's train mean.
      how = "each part's mean"
    else:
      how = "id 0" if isinstance(fill, str) else f"{fill:.6g}"
    parts.append(f"{name} {n}{share} -> {how}")
  return "missing values (all splits, filled): " + ", ".join(parts)
