"""The trainer's one missing-value policy (missing.py) on hand-written Examples: an
absent feature (PartitionedExampleGen's empty cell) and an empty list (stock
CsvExampleGen's) parse alike, to the documented fills; a schema decides required and
multi-valued features, and both fail before training naming what and where."""
import os

import numpy as np
import pytest

import tensorflow as tf

import trainer_util as tu
from tfx.types import artifact_utils, standard_artifacts

from tfx_parallel.components.distributed_trainer.inputs import description, missing, stats
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor

ABSENT = object()  # The feature is left out of the Example.


KINDS = {"n": int, "sometimes": int, "s": str}  # Others: float. An empty list is typed,
# as stock CsvExampleGen writes it (an int64_list with no values for an int column).


def _feature(name, value):
  if value is ABSENT:
    return None
  values = value if isinstance(value, list) else [value]
  kind = type(values[0]) if values else KINDS.get(name, float)
  if kind is float:
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))
  if kind is int:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode() for v in values]))


def _example(**values) -> bytes:
  features = {k: f for k, f in ((k, _feature(k, v)) for k, v in values.items())
              if f is not None}
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


# Train split: x (float) 1, 3, -, [] -> mean 2; n (int) 4, [], 7, - -> mean 5.5 -> 6;
# s (string) "a", -, [], "b".
# c (float) is never missing: the training input parses it dense.
TRAIN = [_example(x=1.0, n=4, s="a", c=0.5, y=1.0),
         _example(x=3.0, n=[], s=ABSENT, c=1.5, y=0.0),
         _example(x=ABSENT, n=7, s=[], c=2.5, y=1.0),
         _example(x=[], n=ABSENT, s="b", c=3.5, y=0.0)]
EVAL = [_example(x=[], n=5, s="a", c=1.0, y=1.0), _example(x=2.0, n=5, s="b", c=2.0, y=0.0)]


def _prepare(root, **kwargs):
  files = {"train": [tu.write_split(root, "train", kwargs.pop("train", TRAIN))],
           "eval": [tu.write_split(root, "eval", kwargs.pop("eval", EVAL))]}
  return stats.prepare_all(str(root), ["x", "n", "c"], ["s"], "y", task=None, max_vocabulary=10,
                           hash_buckets=0, hparams={}, dtypes={"x": "float32", "n": "int64"},
                           files=files, **dict(dict(normalize=False, skip_missing_labels=False),
                                               **kwargs)), files


def test_the_fills_are_the_train_means_of_present_values_and_empty_for_strings(tmp_path):
  prepared, _ = _prepare(tmp_path)
  fills = {f.name: f.fill for f in prepared.spec.features}
  assert fills == {"x": 2.0, "n": 6, "c": 2.0, "s": ""}  # n: 5.5 rounded (half to even).
  assert {f.name: f.missing for f in prepared.spec.features} == {"x": 3, "n": 2, "c": 0, "s": 2}
  assert prepared.missing_values == {
      "n": {"train": 2, "eval": 0, "fill": 6}, "s": {"train": 2, "eval": 0, "fill": ""},
      "x": {"train": 2, "eval": 1, "fill": 2.0}}
  line = missing.summary(prepared.missing_values, prepared.rows)
  assert line == ("missing values (all splits, filled): n 2 (33.3%) -> 6, s 2 (33.3%) -> id 0, "
                  "x 3 (50.0%) -> 2")


@pytest.mark.parametrize("normalize", [False, True])
def test_absent_and_empty_parse_alike_to_the_fill(tmp_path, normalize):
  prepared, _ = _prepare(tmp_path, normalize=normalize)
  pre = Preprocessor(prepared.spec, prepared.normalization)
  rows = [_example(x=ABSENT, n=ABSENT, s=ABSENT, c=ABSENT),
          _example(x=[], n=[], s=[], c=[]),
          _example(x=2.0, n=6, s="", c=2.0)]  # The documented fills, written out.
  got = {k: v.numpy() for k, v in pre.serving_inputs(tf.constant(rows)).items()}
  for name, column in got.items():
    assert column.shape == (3, 1)
    np.testing.assert_array_equal(column[0], column[1], err_msg=name)
    np.testing.assert_array_equal(column[0], column[2], err_msg=name)
  assert got["s"][0, 0] == 0
  if normalize:  # Standardised: the float fill is exactly 0; the int fill is 6 -> (6-5.5)/std.
    assert got["x"][0, 0] == 0.0
    n_std = prepared.normalization["std"][1]
    assert got["n"][0, 0] == pytest.approx(0.5 / n_std)
  else:
    assert got["x"][0, 0] == 2.0 and got["n"][0, 0] == 6 and got["n"].dtype == np.int64


def test_training_batches_fill_alike(tmp_path):
  from tfx_parallel.components.distributed_trainer.inputs import tf_data  # pylint: disable=g-import-not-at-top
  prepared, files = _prepare(tmp_path, normalize=True)
  pre = Preprocessor(prepared.spec, prepared.normalization)
  x, y = next(iter(tf_data.make_dataset(files["train"], pre, 4, shuffle=False)))
  np.testing.assert_array_equal(x["x"].numpy()[2:, 0], [0.0, 0.0])  # absent, []
  np.testing.assert_array_equal(x["s"].numpy()[1:3, 0], [0, 0])
  np.testing.assert_array_equal(y.numpy()[:, 0], [1.0, 0.0, 1.0, 0.0])
  # The training parse ('c' dense, the others ragged) equals serving's (all ragged).
  assert isinstance(pre.feature_spec(with_label=True)["c"], tf.io.FixedLenFeature)
  served = pre.serving_inputs(tf.constant(TRAIN))
  for name, column in x.items():
    np.testing.assert_array_equal(column.numpy(), served[name].numpy(), err_msg=name)


def test_a_required_feature_that_is_missing_fails_naming_file_and_feature(tmp_path):
  with pytest.raises(missing.RequiredFeatureError,
                     match=r"feature 'x' is required by the schema .* 2 example\(s\) in split "
                           r"'train' file .*Split-train/data\.gz have no value"):
    _prepare(tmp_path, required=["x"])
  _prepare(tmp_path, required=["y"])  # The label follows skip_missing_labels instead.


def test_a_multi_valued_feature_in_the_data_fails_naming_it_and_the_way_out(tmp_path):
  train = TRAIN + [_example(x=[1.0, 2.0], n=1, s=["a", "b"], y=1.0)]
  with pytest.raises(missing.MultiValuedError,
                     match=r"feature\(s\) 'x', 's' hold more than one value per example \(split "
                           r"'train', file .*data\.gz\); .*TFX Transform"):
    _prepare(tmp_path, train=train)


SCHEMA = """
feature { name: "req" type: FLOAT presence { min_fraction: 1.0 min_count: 1 }
          shape { dim { size: 1 } } }
feature { name: "stock_holes" type: FLOAT presence { min_fraction: 1.0 min_count: 1 } }
feature { name: "sometimes" type: INT presence { min_count: 1 } value_count { min: 1 max: 1 } }
feature { name: "y" type: FLOAT presence { min_fraction: 1.0 } shape { dim { size: 1 } } }
"""


@pytest.mark.parametrize("extra, multi", [
    ("", None),
    ('feature { name: "tags" type: BYTES presence { min_count: 1 } value_count { min: 1 } }',
     "tags"),
    ('feature { name: "vec" type: FLOAT presence { min_fraction: 1.0 } '
     'shape { dim { size: 3 } } }', "vec"),
    ('feature { name: "pair" type: INT value_count { min: 2 max: 2 } }', "pair"),
])
def test_the_schema_decides_required_optional_and_multi_valued(tmp_path, extra, multi):
  schema_dir = tmp_path / "schema"
  schema_dir.mkdir()
  (schema_dir / description.SCHEMA_FILE).write_text(SCHEMA + extra)
  read = description.read_schema(str(schema_dir))
  assert [n for n, f in read.items() if f.required] == ["req", "y"]
  assert [n for n, f in read.items() if f.multi_valued] == ([multi] if multi else [])
  rows = [_example(req=1.0, stock_holes=[], sometimes=ABSENT, y=1.0),
          _example(req=2.0, stock_holes=1.0, sometimes=3, y=0.0)]
  examples = standard_artifacts.Examples()
  examples.uri = str(tmp_path / "examples")
  examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
  for split in ("train", "eval"):
    tu.write_split(examples.uri, split, rows)
  if multi is None:
    described = description.describe(examples, label_key="y", schema_uri=str(schema_dir))
    assert described.required == ("req",)
    return
  with pytest.raises(missing.MultiValuedError,
                     match=rf"feature\(s\) '{multi}' hold more than one value per example "
                           rf"\(schema .*schema\.pbtxt\); .*TFX Transform .*transform_graph="):
    description.describe(examples, label_key="y", schema_uri=str(schema_dir))


def test_a_label_hole_follows_skip_missing_labels_naming_split_and_file(tmp_path):
  """Stock CsvExampleGen's empty label cell (an empty list) is a missing label, never 0."""
  holes = [_example(x=1.0, n=1, s="a", c=1.0, y=[]), _example(x=2.0, n=2, s="b", c=2.0)]
  with pytest.raises(stats.MissingLabelError,
                     match=r"2 example\(s\) in split 'eval' file .*Split-eval/data\.gz have "
                           r"no value .* for the label 'y'; 2 of 8 in all \(25\.0%\).*"
                           r"set trainer\.skip_missing_labels=true \(the default\)"):
    _prepare(tmp_path, eval=EVAL + holes)
  prepared, _ = _prepare(tmp_path, eval=EVAL + holes, skip_missing_labels=True)
  assert prepared.skipped == 2
  assert prepared.missing_labels == {"count": 2, "rows": 8, "share": 0.25,
                                     "splits": {"train": 0, "eval": 2}, "policy": "skip"}
  assert stats.missing_label_line(prepared.missing_labels, "y") == (
      "missing labels: 2 of 8 examples (25.0%; eval 2) have no value for the label 'y'; "
      "skipped in training and evaluation (trainer.skip_missing_labels=false makes this an "
      "error)")
  # Above the stated share the skip is an error too, naming the setting.
  with pytest.raises(stats.MissingLabelError,
                     match=r"^2 of 8 examples \(25\.0%: eval 2\) have no value \(or more than "
                           r"one\) for the label 'y', more than "
                           r"trainer\.max_missing_label_share=0\.2 allows: .*Check the label "
                           r"column \(--label\).*raise trainer\.max_missing_label_share$"):
    _prepare(tmp_path, eval=EVAL + holes, skip_missing_labels=True,
             max_missing_label_share=0.2)


def test_string_label_classes_are_counted_per_split_and_an_eval_only_class_is_named(tmp_path):
  """The classes are sorted (one encoding: label_encoding.py) and counted per split; a
  class with eval examples but none in train keeps its id and is named, not hidden."""
  train = [_example(x=float(i), n=i, s="a", c=1.0, y=name)
           for i, name in enumerate(["dog", "cat", "dog", "ant", "dog", "cat"])]
  evaluate = [_example(x=1.0, n=1, s="a", c=1.0, y=name)
              for name in ["cat", "dog", "emu", "emu", "ant"]]
  prepared, _ = _prepare(tmp_path, train=train, eval=evaluate)
  assert prepared.spec.label_vocabulary == ("ant", "cat", "dog", "emu")
  assert prepared.spec.task == "multiclass" and prepared.spec.num_classes == 4
  assert prepared.label_counts == {"train": {"ant": 1, "cat": 2, "dog": 3},
                                   "eval": {"ant": 1, "cat": 1, "dog": 1, "emu": 2}}
  assert prepared.unseen_classes == {"emu": {"eval": 2}}
  labels = Preprocessor(prepared.spec).labels({"y": tf.constant([["emu"], ["ant"], ["dog"]])})
  assert labels.numpy().ravel().tolist() == [3, 0, 2]
  # Numbered classes are counted under their numbers' text.
  numbered, _ = _prepare(tmp_path / "numbered")
  assert numbered.label_counts == {"train": {"0": 2, "1": 2}, "eval": {"0": 1, "1": 1}}
  assert numbered.unseen_classes == {}


def test_examples_without_one_label_are_dropped_in_order_streamed_and_cached(tmp_path,
                                                                             monkeypatch):
  """A chunk at a time (Preprocessor.labelled; tf_data.drop_unlabelled) keeps exactly
  what the per-example rule has_label keeps, in order, across chunk boundaries, in the
  streamed input and the in-memory cache."""
  from tfx_parallel.components.distributed_trainer.inputs import memory_cache, tf_data  # pylint: disable=g-import-not-at-top
  holes = [_example(x=9.0, n=1, s="a", c=9.0, y=[]), _example(x=8.0, n=1, s="a", c=8.0),
           _example(x=7.0, n=1, s="a", c=7.0, y=[1.0, 0.0])]
  train = [TRAIN[0], holes[0], TRAIN[1], holes[1], holes[2], TRAIN[2], TRAIN[3]]
  prepared, files = _prepare(tmp_path, train=train, skip_missing_labels=True)
  pre = Preprocessor(prepared.spec, prepared.normalization)
  kept = [c for c, has in zip([0.5, 9.0, 1.5, 8.0, 7.0, 2.5, 3.5],
                              (bool(pre.has_label(tf.constant(e))) for e in train)) if has]
  assert kept == [0.5, 1.5, 2.5, 3.5]  # The rule itself: no label, or two, is dropped.
  monkeypatch.setattr(tf_data, "FILTER_CHUNK", 3)  # Chunk edges inside the holes.
  monkeypatch.setattr(memory_cache, "LOAD_CHUNK", 2)
  x, y = next(iter(tf_data.make_dataset(files["train"], pre, 4, shuffle=False,
                                        skip_missing_labels=True)))
  assert x["c"].numpy()[:, 0].tolist() == kept
  np.testing.assert_array_equal(y.numpy()[:, 0], [1.0, 0.0, 1.0, 0.0])
  cached = memory_cache.load(files["train"], pre, skip_missing_labels=True)
  assert cached.rows == 4 and cached.features["c"].numpy()[:, 0].tolist() == kept
