"""The data scan and the trainer-owned preprocessing: missing labels, vocabularies and ids,
string labels, and the exported serving signature (raw tf.Examples in, task outputs out)."""
import os

import numpy as np
import pytest

import trainer_util as tu
import tensorflow as tf

from tfx_parallel.components.common import keys
from tfx_parallel.components.distributed_trainer.inputs import stats, tf_data
from tfx_parallel.components.distributed_trainer.run import export
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor


def _prepare(root, **kw):
  args = dict(task=None, max_vocabulary=100, hash_buckets=0, hparams={},
              skip_missing_labels=False, normalize=False)
  args.update(kw)
  return stats.prepare(root, ["x"], ["color"], "y", **args)


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("cls"))
  tu.write_classification_examples(root, rows=700, eval_rows=140)
  return root


def test_a_missing_label_is_rejected_naming_split_and_file(tmp_path):
  root = str(tmp_path)
  tu.write_classification_examples(root, rows=200, eval_rows=50, drop_label_every=40)
  with pytest.raises(stats.MissingLabelError,
                     match=r"^\d+ example\(s\) in split 'train' file .*Split-train/"
                           r"data_tfrecord-0000[01]-of-00002.gz have no value \(or more than "
                           r"one\) for the label 'y'; 6 of 250 in all \(2\.4%\)\. A missing "
                           r"label is never read as 0, and trainer.skip_missing_labels=false "
                           r"makes it an error"):
    _prepare(root)
  # With skip_missing_labels they are counted and skipped, never read as 0.
  spec, _, skipped = _prepare(root, skip_missing_labels=True)
  assert skipped == 6 and spec.task == "multiclass"
  pre = Preprocessor(spec)
  files = sorted(tf.io.gfile.glob(os.path.join(root, "Split-train", "*")))
  ds = tf_data.make_dataset(files, pre, 64, shuffle=False, drop_remainder=False,
                         skip_missing_labels=True)
  assert sum(int(y.shape[0]) for _, y in ds) == 200 - 5


def test_string_feature_ids_follow_the_vocabulary(classes):
  spec, _, _ = _prepare(classes)
  color = spec.feature("color")
  assert sorted(color.vocabulary) == sorted(tu.COLORS) and color.num_ids == 6
  pre = Preprocessor(spec)
  ids = pre.inputs({"x": tf.zeros([4, 1]),
                    "color": tf.constant([[color.vocabulary[0]], [color.vocabulary[4]],
                                          ["mauve"], [""]])})["color"]
  assert ids.dtype == tf.int64
  assert ids.numpy().ravel().tolist() == [1, 5, 0, 0]  # OOV and missing are 0
  spec_small, _, _ = _prepare(classes, max_vocabulary=2)
  assert spec_small.feature("color").num_ids == 3
  hashed, _, _ = _prepare(classes, hash_buckets=16)
  ids = Preprocessor(hashed).inputs({"x": tf.zeros([2, 1]),
                                      "color": tf.constant([["red"], [""]])})["color"]
  assert 1 <= ids.numpy()[0, 0] <= 16 and ids.numpy()[1, 0] == 0


@pytest.mark.parametrize("label_type", ["int", "bytes"])
def test_labels_become_class_ids(tmp_path, label_type):
  root = str(tmp_path)
  tu.write_classification_examples(root, rows=300, eval_rows=60, label_type=label_type)
  spec, _, _ = _prepare(root)
  assert spec.task == "multiclass" and spec.num_classes == 3
  assert spec.label_vocabulary == (("c0", "c1", "c2") if label_type == "bytes" else None)
  files = sorted(tf.io.gfile.glob(os.path.join(root, "Split-train", "*")))
  _, y = next(iter(tf_data.make_dataset(files, Preprocessor(spec), 300, shuffle=False,
                                     drop_remainder=False)))
  assert y.dtype == tf.int64 and set(y.numpy().ravel().tolist()) == {0, 1, 2}


def test_a_float_label_is_regression_with_normalisation_stats(tmp_path):
  root = str(tmp_path)
  keys_, _, _ = tu.write_examples(root, rows=64, eval_rows=16)
  spec, norm, _ = stats.prepare(root, keys_, [], "y", task=None, max_vocabulary=10,
                                hash_buckets=0, hparams={}, skip_missing_labels=False,
                                normalize=True)
  assert spec.task == "regression" and len(norm["mean"]) == 2


def _example(x, color=None):
  feats = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=[x]))}
  if color is not None:
    feats["color"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[color.encode()]))
  return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


@pytest.mark.parametrize("task", ["multiclass", "binary", "regression"])
def test_exported_signature_parses_raw_examples_and_returns_the_task_outputs(
    classes, tmp_path, task):
  spec, _, _ = _prepare(classes, task=task) if task != "binary" else (None, None, None)
  if task == "binary":
    import dataclasses  # pylint: disable=g-import-not-at-top
    spec, _, _ = _prepare(classes, task="multiclass")
    spec = dataclasses.replace(spec, task="binary", num_classes=1)
  pre = Preprocessor(spec)
  model = user_module.build(user_module.load(builtin="mlp"), spec)
  path = str(tmp_path / "model")
  export.export(path, model, pre)
  loaded = tf.saved_model.load(path)
  fn = loaded.signatures[keys.SERVING_SIGNATURE]
  raw = [_example(0.5, "red"), _example(-1.0, "mauve"), _example(2.0)]
  out = fn(examples=tf.constant(raw))
  direct = model(pre.serving_inputs(tf.constant(raw)))
  if task == "regression":
    assert sorted(out) == [keys.PREDICTIONS_OUTPUT]
    # float32: the SavedModel's graph may sum in another order than the eager call (seen:
    # 7.5e-9 apart on a prediction of 0.0016), so an absolute floor as for the logits.
    np.testing.assert_allclose(out[keys.PREDICTIONS_OUTPUT], direct, rtol=1e-6, atol=1e-6)
    return
  assert sorted(out) == sorted([keys.PROBABILITIES_OUTPUT, keys.CLASS_IDS_OUTPUT,
                                keys.LOGITS_OUTPUT, keys.CLASSES_OUTPUT, keys.SCORES_OUTPUT])
  np.testing.assert_allclose(out[keys.LOGITS_OUTPUT], direct, rtol=1e-6, atol=1e-6)
  k = 3 if task == "multiclass" else 1
  assert out[keys.PROBABILITIES_OUTPUT].shape == (3, k)
  assert out[keys.CLASS_IDS_OUTPUT].shape == (3, 1)
  names = [b"0", b"1", b"2"] if task == "multiclass" else [b"0", b"1"]
  assert out[keys.CLASSES_OUTPUT].numpy().tolist() == [names] * 3
  scores = out[keys.SCORES_OUTPUT].numpy()
  np.testing.assert_allclose(scores.sum(1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(scores[:, -1], out[keys.PROBABILITIES_OUTPUT].numpy()[:, -1],
                             rtol=1e-6)
  if task == "multiclass":
    np.testing.assert_allclose(out[keys.PROBABILITIES_OUTPUT].numpy().sum(1), 1.0, rtol=1e-5)


def test_a_string_label_is_encoded_alike_in_training_and_in_both_serving_signatures(tmp_path):
  """The label vocabulary is sorted; training's class ids, serving_default's ``classes``
  and the TF Serving ``classification`` signature (valid by TF's own check) agree."""
  root = str(tmp_path / "ex")
  tu.write_classification_examples(root, rows=300, eval_rows=60, label_type="bytes")
  spec, _, _ = _prepare(root)
  assert spec.label_vocabulary == ("c0", "c1", "c2")
  pre = Preprocessor(spec)
  labels = pre.labels({"y": tf.constant([["c2"], ["c0"], ["c1"]])})
  assert labels.numpy().ravel().tolist() == [2, 0, 1]
  model = user_module.build(user_module.load(builtin="mlp"), spec)
  path = str(tmp_path / "model")
  export.export(path, model, pre)
  raw = tf.constant([_example(0.5, "red"), _example(-1.0)])
  loaded = tf.saved_model.load(path)
  served = loaded.signatures[keys.SERVING_SIGNATURE](examples=raw)
  classify = loaded.signatures[keys.CLASSIFY_SIGNATURE]
  classified = classify(**{tf.saved_model.CLASSIFY_INPUTS: raw})
  assert sorted(classified) == [tf.saved_model.CLASSIFY_OUTPUT_CLASSES,
                                tf.saved_model.CLASSIFY_OUTPUT_SCORES]
  assert classified["classes"].numpy().tolist() == [[b"c0", b"c1", b"c2"]] * 2
  np.testing.assert_allclose(classified["scores"], served[keys.PROBABILITIES_OUTPUT],
                             rtol=1e-6)
  # The signature as TF Serving reads it from saved_model.pb: method classify, valid.
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  saved = saved_model_pb2.SavedModel()
  with open(os.path.join(path, "saved_model.pb"), "rb") as f:
    saved.ParseFromString(f.read())
  defs = saved.meta_graphs[0].signature_def
  assert defs[keys.CLASSIFY_SIGNATURE].method_name == tf.saved_model.CLASSIFY_METHOD_NAME
  assert tf.compat.v1.saved_model.is_valid_signature(defs[keys.CLASSIFY_SIGNATURE])
  assert defs[keys.SERVING_SIGNATURE].method_name == tf.saved_model.PREDICT_METHOD_NAME
  # Binary: two class names; scores are [1 - p, p] with p = P(class 1) = P("yes").
  import dataclasses  # pylint: disable=g-import-not-at-top
  binary = dataclasses.replace(spec, task="binary", num_classes=1,
                               label_vocabulary=("no", "yes"))
  pre = Preprocessor(binary)
  assert pre.labels({"y": tf.constant([["yes"], ["no"]])}).numpy().ravel().tolist() == [1, 0]
  model = user_module.build(user_module.load(builtin="mlp"), binary)
  export.export(str(tmp_path / "binary"), model, pre)
  loaded = tf.saved_model.load(str(tmp_path / "binary"))
  served = loaded.signatures[keys.SERVING_SIGNATURE](examples=raw)
  classified = loaded.signatures[keys.CLASSIFY_SIGNATURE](inputs=raw)
  assert classified["classes"].numpy().tolist() == [[b"no", b"yes"]] * 2
  p = served[keys.PROBABILITIES_OUTPUT].numpy()[:, 0]
  np.testing.assert_allclose(classified["scores"].numpy(), np.stack([1 - p, p], 1), rtol=1e-6)


@pytest.mark.parametrize("clip, expected", [(5.0, [0.0, 1.0, 5.0, -5.0]),
                                            (0.0, [0.0, 1.0, 100.0, -100.0])])
def test_normalised_features_are_clipped_alike_in_training_and_serving(classes, clip, expected):
  """A corrupt value far outside the training range (the taxi data's 20-hour trips) is
  clipped to +-normalize_clip standard deviations on both paths; 0 turns clipping off."""
  spec, _, _ = _prepare(classes)
  pre = Preprocessor(spec, {"mean": [10.0], "std": [2.0], "clip": clip})
  raw = [_example(x, "red") for x in (10.0, 12.0, 210.0, -190.0)]
  labelled = [tf.train.Example.FromString(r) for r in raw]
  assert spec.label_dtype == "float32", spec.label_dtype
  for ex in labelled:
    ex.features.feature["y"].float_list.value.append(0.0)
  served = pre.serving_inputs(tf.constant(raw))["x"].numpy().ravel().tolist()
  trained, _ = pre.parse_batch(tf.constant([e.SerializeToString() for e in labelled]))
  assert served == expected
  assert trained["x"].numpy().ravel().tolist() == expected


def test_normalize_clip_is_validated_before_any_work():
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="normalize_clip"):
    TrainerConfig(normalize_clip=-1).validate()
