"""Model spec (pure): task inference from the label, vocabularies, JSON round trip."""
import pytest

from tfx_parallel.components.distributed_trainer import model_spec as ms


def _label(kind, values, overflow=False):
  stats = ms.LabelStats(kind)
  stats.add(values)
  stats.overflow = stats.overflow or overflow
  return stats


@pytest.mark.parametrize("kind,values,expected", [
    ("float", [0.0, 1.0], ("binary", 1, None)),
    ("int", [0.0, 1.0], ("binary", 1, None)),
    ("float", [0.0, 1.0, 2.0], ("multiclass", 3, None)),
    ("float", [0.0, 1.0, 2.0, 3.0, 4.0], ("multiclass", 5, None)),
    ("float", [1.0, 2.0, 3.0], ("regression", 1, None)),      # not 0..K-1
    ("float", [0.0, 1.0, 3.0], ("regression", 1, None)),      # a gap
    ("float", [0.5, 1.0, 2.0], ("regression", 1, None)),
    ("float", [float(i) for i in range(25)], ("regression", 1, None)),  # too many classes
    ("bytes", ["no", "yes"], ("binary", 1, ("no", "yes"))),
    ("bytes", ["b", "a", "c"], ("multiclass", 3, ("a", "b", "c"))),
])
def test_task_is_inferred_from_the_label(kind, values, expected):
  assert ms.infer_task(_label(kind, values), "y") == expected


def test_configured_task_wins_when_the_values_fit():
  assert ms.infer_task(_label("float", [0.0, 1.0]), "y", "regression") == ("regression", 1, None)
  assert ms.infer_task(_label("float", [0.0, 2.0]), "y", "multiclass") == ("multiclass", 3, None)
  assert ms.infer_task(_label("bytes", ["a", "b", "c"]), "y", "multiclass")[1] == 3


@pytest.mark.parametrize("kind,values,task,match", [
    ("float", [0.0, 2.0], "binary", r"task 'binary' needs a label of 0 or 1; label 'y' has "
                                    r"values \[0, 2\]"),
    ("float", [0.5, 1.0], "multiclass", r"labels 0..K-1 .* label 'y' has values \[0.5, 1\]"),
    ("bytes", ["a", "b"], "regression", r"needs a numeric label, but label 'y' holds strings"),
    ("bytes", ["a", "b", "c"], "binary", r"exactly 2 label values; label 'y' has 3"),
    ("bytes", ["a"], None, r"label 'y' has a single value \['a'\]"),
])
def test_a_task_that_cannot_fit_the_label_is_an_error_naming_it(kind, values, task, match):
  with pytest.raises(ms.SpecError, match=match):
    ms.infer_task(_label(kind, values), "y", task)


def test_vocabulary_is_most_frequent_first_capped_without_the_empty_string():
  counts = {"cash": 5, "card": 9, "": 50, "mobile": 5, "other": 1}
  assert ms.vocabulary_from_counts(counts, 10) == ("card", "cash", "mobile", "other")
  assert ms.vocabulary_from_counts(counts, 2) == ("card", "cash")


def test_build_spec_sizes_string_features_and_round_trips_through_json():
  spec = ms.build_spec([("x", "float32")], ["pay", "co"],
                       {"pay": {"cash": 3, "card": 5}, "co": {"a": 1}}, "tip",
                       _label("float", [0.0, 1.0]), max_vocabulary=1, hparams={"k": 2})
  assert spec.task == "binary" and spec.output_units == 1
  pay = spec.feature("pay")
  assert pay.vocabulary == ("card",) and pay.num_ids == 2  # 0 = missing / OOV
  assert spec.feature_names == ("x", "pay", "co")
  assert ms.ModelSpec.from_dict(spec.to_dict()) == spec
  hashed = ms.build_spec([], ["pay"], {}, "tip", _label("float", [0.0, 1.0]), hash_buckets=7)
  assert hashed.feature("pay").num_ids == 8 and hashed.feature("pay").vocabulary is None
  with pytest.raises(KeyError, match=r"no feature 'nope'"):
    spec.feature("nope")
