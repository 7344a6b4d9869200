"""Quality metrics: the numpy accumulator and the tf.data + serving-signature read."""
import math

import numpy as np
import pytest

from tfx.utils import path_utils

from tfx_parallel.components.convergence_evaluator import quality
import evaluator_fixtures as testing

FEATURES = ["a", "b", "c"]


def _reference(labels, predictions):
  error = predictions - labels
  return {"mse": np.mean(error ** 2), "mae": np.mean(np.abs(error)),
          "r2": 1 - np.sum(error ** 2) / np.sum((labels - labels.mean()) ** 2)}


def test_batched_accumulation_equals_one_shot_numpy():
  rng = np.random.default_rng(1)
  labels = 1000.0 + rng.normal(size=1001)  # Large mean: R^2 needs a stable variance.
  predictions = labels + 0.1 * rng.normal(size=1001)
  accumulator = quality.QualityAccumulator()
  for start in range(0, 1001, 64):
    accumulator.update(labels[start:start + 64], predictions[start:start + 64])
  result = accumulator.result()
  expected = _reference(labels, predictions)
  assert result.examples == 1001
  assert result.mse == pytest.approx(expected["mse"], rel=1e-10)
  assert result.rmse == pytest.approx(math.sqrt(expected["mse"]), rel=1e-10)
  assert result.mae == pytest.approx(expected["mae"], rel=1e-10)
  assert result.r2 == pytest.approx(expected["r2"], rel=1e-9)
  assert not result.label_is_binary and result.accuracy == -1.0 and result.auc == -1.0


def test_binary_label_adds_accuracy_and_auc():
  labels = np.array([0, 0, 1, 1, 0, 1], np.float64)
  scores = np.array([0.1, 0.6, 0.7, 0.4, 0.2, 0.9])
  accumulator = quality.QualityAccumulator()
  accumulator.update(labels[:3], scores[:3])
  accumulator.update(labels[3:], scores[3:])
  result = accumulator.result()
  assert result.label_is_binary
  assert result.accuracy == pytest.approx(4 / 6)
  # Pairs (pos, neg) ranked correctly: 8 of 9.
  assert result.auc == pytest.approx(8 / 9)


def test_auc_counts_ties_as_half_and_needs_both_classes():
  assert quality.auc(np.array([0, 1]), np.array([0.5, 0.5])) == 0.5
  assert quality.auc(np.array([0, 0, 1, 1]), np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
  assert math.isnan(quality.auc(np.array([1, 1]), np.array([0.1, 0.2])))


def test_non_binary_batch_later_drops_binary_metrics():
  accumulator = quality.QualityAccumulator()
  accumulator.update(np.array([0.0, 1.0]), np.array([0.2, 0.8]))
  accumulator.update(np.array([2.0]), np.array([1.5]))
  result = accumulator.result()
  assert not result.label_is_binary and result.auc == -1.0


def test_constant_label_r2_is_nan_and_empty_raises():
  accumulator = quality.QualityAccumulator()
  accumulator.update(np.ones(4), np.ones(4))
  assert math.isnan(accumulator.result().r2)
  with pytest.raises(ValueError, match="no examples"):
    quality.QualityAccumulator().result()


def test_mismatched_shapes_are_rejected():
  with pytest.raises(ValueError, match="one prediction per example"):
    quality.QualityAccumulator().update(np.ones(4), np.ones(8))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  uri = str(tmp_path_factory.mktemp("model"))
  testing.export_linear_model(uri, [1.0, -2.0, 0.5], 0.25, FEATURES)
  return path_utils.serving_model_path(uri)


def test_evaluate_reads_gzip_shards_through_the_serving_signature(model_dir, tmp_path):
  x, y = testing.synthetic_data(300, [1.0, -2.0, 0.5], 0.0, noise=0.5, seed=3)
  missing = np.zeros_like(x, bool)
  missing[::7, 1] = True  # Feature "b" absent from every 7th example: read as 0.
  records = testing.serialize_examples(x, y, FEATURES, "label", missing=missing)
  examples = testing.write_examples(str(tmp_path), {"eval": records}, FEATURES, "label",
                                    shards=3)
  result = quality.evaluate(model_dir, examples.uri, "eval", "label", batch_size=32)
  x_seen = np.where(missing, 0.0, x).astype(np.float64)
  predictions = x_seen @ np.array([1.0, -2.0, 0.5]) + 0.25
  expected = _reference(y.astype(np.float64), predictions)
  assert result.examples == 300
  assert result.mse == pytest.approx(expected["mse"], rel=1e-5)
  assert result.mae == pytest.approx(expected["mae"], rel=1e-5)
  assert result.r2 == pytest.approx(expected["r2"], rel=1e-5)


def test_evaluate_int64_binary_label(model_dir, tmp_path):
  x, _ = testing.synthetic_data(50, [1.0, 0.0, 0.0], 0.0, seed=4)
  scores = x.astype(np.float64) @ np.array([1.0, -2.0, 0.5]) + 0.25
  y = (scores > 1.0).astype(np.float32)  # Separable by the model's own score.
  records = testing.serialize_examples(x, y, FEATURES, "label", int_label=True)
  examples = testing.write_examples(str(tmp_path), {"eval": records}, FEATURES, "label")
  result = quality.evaluate(model_dir, examples.uri, "eval", "label", batch_size=16)
  assert result.label_is_binary
  assert result.auc == pytest.approx(1.0)
  assert result.accuracy == pytest.approx(np.mean((scores >= 0.5) == (y == 1)))


def test_evaluate_errors_name_what_is_missing(model_dir, tmp_path):
  with pytest.raises(FileNotFoundError, match="Split-test"):
    quality.evaluate(model_dir, str(tmp_path), "test", "label", 8)
  x, y = testing.synthetic_data(4, [1.0, 0.0, 0.0], 0.0)
  examples = testing.write_examples(
      str(tmp_path), {"eval": testing.serialize_examples(x, y, FEATURES, "y")}, FEATURES, "y")
  with pytest.raises(ValueError, match="'label' is not a feature"):
    quality.evaluate(model_dir, examples.uri, "eval", "label", 8)


# --- Classification. -------------------------------------------------------------------

def _pairwise_auc(labels, scores):
  pos, neg = scores[labels == 1], scores[labels == 0]
  diff = pos[:, None] - neg[None, :]
  return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


def test_binary_accumulator_equals_one_shot_numpy():
  rng = np.random.default_rng(2)
  logits = rng.normal(scale=3.0, size=501).astype(np.float32)
  logits[:5] = [40.0, -40.0, 0.0, 25.0, -30.0]  # P rounds to 1 / 0: log loss stays finite.
  labels = (rng.random(501) < 1 / (1 + np.exp(-logits))).astype(np.int64)
  labels[:2] = [0, 1]  # Confidently wrong: a loss of 40 each.
  probabilities = (1 / (1 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
  accumulator = quality.BinaryAccumulator()
  for start in range(0, 501, 64):
    end = start + 64
    accumulator.update(labels[start:end], probabilities[start:end, None],
                       logits[start:end, None])
  result = accumulator.result()
  z, y = logits.astype(np.float64), labels.astype(np.float64)
  predicted = probabilities > 0.5
  tp = np.sum(predicted & (labels == 1))
  assert result.examples == 501 and result.positives == labels.sum()
  assert result.log_loss == pytest.approx(np.mean(np.log1p(np.exp(-z)) + (1 - y) * z),
                                          rel=1e-12)
  assert result.log_loss > 80 / 501  # The two confident mistakes count in full.
  assert result.accuracy == np.mean(predicted == (labels == 1))
  assert result.precision == tp / predicted.sum()
  assert result.recall == tp / labels.sum()
  assert result.auc == pytest.approx(_pairwise_auc(labels, probabilities), rel=1e-12)


def test_binary_without_positives_or_predictions_reports_not_applicable():
  accumulator = quality.BinaryAccumulator()
  accumulator.update(np.zeros(3, np.int64), np.full(3, 0.2), np.full(3, -1.4))
  result = accumulator.result()
  assert (result.precision, result.recall, result.auc) == (-1.0, -1.0, -1.0)
  assert result.accuracy == 1.0
  with pytest.raises(ValueError, match=r"binary model's probabilities must be \[N, 1\]"):
    quality.BinaryAccumulator().update(np.zeros(3, np.int64), np.zeros((3, 2)), np.zeros(3))


def test_multiclass_accumulator_equals_one_shot_numpy():
  rng = np.random.default_rng(3)
  logits = rng.normal(scale=2.0, size=(300, 4))
  logits[0] = [60.0, -60.0, 0.0, 0.0]  # Softmax rounds to one-hot.
  labels = rng.integers(0, 3, size=300)  # Class 3 never occurs.
  labels[0] = 1
  probabilities = np.exp(logits - logits.max(1, keepdims=True))
  probabilities /= probabilities.sum(1, keepdims=True)
  accumulator = quality.MulticlassAccumulator()  # K from the first batch.
  for start in range(0, 300, 50):
    end = start + 50
    accumulator.update(labels[start:end], probabilities[start:end].astype(np.float32),
                       logits[start:end].astype(np.float32))
  result = accumulator.result()
  z = logits.astype(np.float32).astype(np.float64)
  log_sum = np.log(np.sum(np.exp(z - z.max(1, keepdims=True)), 1)) + z.max(1)
  predicted = probabilities.astype(np.float32).argmax(1)
  assert result.examples == 300
  assert result.log_loss == pytest.approx(np.mean(log_sum - z[np.arange(300), labels]),
                                          rel=1e-12)
  assert result.accuracy == np.mean(predicted == labels)
  for k in range(3):
    assert result.class_accuracy[k] == np.mean(predicted[labels == k] == k)
    assert result.class_examples[k] == np.sum(labels == k)
  assert result.class_accuracy[3] == -1.0 and result.class_examples[3] == 0


def test_multiclass_shape_and_range_errors():
  with pytest.raises(ValueError, match=r"logits must be \[N, K\] = \[2, 3\]"):
    quality.MulticlassAccumulator(3).update(np.array([0, 1]), np.zeros((2, 3)),
                                            np.zeros((2, 4)))
  with pytest.raises(ValueError, match="class id 3 is outside 0..2"):
    quality.MulticlassAccumulator(3).update(np.array([0, 3]), np.zeros((2, 3)),
                                            np.zeros((2, 3)))


BINARY_W, BINARY_B = [1.5, -2.0, 0.5], 0.3
MULTI_W = [[1.0, -1.0, 0.2], [0.5, 0.0, -1.5], [-0.3, 1.2, 0.4]]
MULTI_B = [0.1, 0.0, -0.2]


@pytest.fixture(scope="module")
def classifiers(tmp_path_factory):
  root = tmp_path_factory.mktemp("classifiers")
  binary = testing.export_classifier_model(str(root / "binary"), "binary", BINARY_W,
                                           BINARY_B, FEATURES)
  multi = testing.export_classifier_model(str(root / "multi"), "multiclass", MULTI_W,
                                          MULTI_B, FEATURES, ["cat", "dog", "emu"])
  return binary, multi


def test_evaluate_binary_classifier_on_float_labels(classifiers, tmp_path):
  from tfx_parallel.components.convergence_evaluator import task as task_lib  # pylint: disable=g-import-not-at-top
  x, y = testing.classification_data(400, BINARY_W, BINARY_B, seed=6)
  records = testing.serialize_examples(x, y.astype(np.float32), FEATURES, "label")
  examples = testing.write_examples(str(tmp_path), {"eval": records}, FEATURES, "label",
                                    shards=2)
  binary, _ = classifiers
  info = task_lib.resolve(task_lib.read_properties(binary), {})
  result = quality.evaluate(path_utils.serving_model_path(binary.uri), examples.uri, "eval",
                            "label", 64, info)
  z = x.astype(np.float64) @ np.float32(BINARY_W) + np.float32(BINARY_B)
  assert isinstance(result, quality.BinaryQuality) and result.examples == 400
  assert result.accuracy == np.mean((z > 0) == (y == 1))
  assert result.log_loss == pytest.approx(np.mean(np.logaddexp(0, z) - y * z), rel=1e-5)
  assert result.auc == pytest.approx(_pairwise_auc(y, z), abs=1e-6)
  assert 0.6 < result.accuracy < 0.95  # Noisy labels: neither trivial nor random.


def test_evaluate_multiclass_classifier_on_string_labels(classifiers, model_dir, tmp_path):
  from tfx_parallel.components.convergence_evaluator import task as task_lib  # pylint: disable=g-import-not-at-top
  x, ids = testing.classification_data(300, MULTI_W, MULTI_B, seed=7)
  names = np.array(["cat", "dog", "emu"])[ids]
  records = testing.serialize_examples(x, names, FEATURES, "animal", label_type="bytes")
  examples = testing.write_examples(str(tmp_path), {"eval": records}, FEATURES, "animal")
  _, multi = classifiers
  info = task_lib.resolve(task_lib.read_properties(multi), {})
  regression_dir, model_dir = model_dir, path_utils.serving_model_path(multi.uri)
  result = quality.evaluate(model_dir, examples.uri, "eval", "animal", 64, info)
  z = x.astype(np.float64) @ np.float32(MULTI_W) + np.float32(MULTI_B)
  predicted = z.argmax(1)
  assert isinstance(result, quality.MulticlassQuality) and result.examples == 300
  assert result.accuracy == pytest.approx(np.mean(predicted == ids), abs=1e-12)
  assert result.class_examples == tuple(np.bincount(ids, minlength=3))
  assert result.class_accuracy[2] == pytest.approx(np.mean(predicted[ids == 2] == 2))

  no_vocabulary = task_lib.TaskInfo("multiclass", 3)
  with pytest.raises(ValueError, match=r"label 'animal' in split 'eval' of .* holds strings"):
    quality.evaluate(model_dir, examples.uri, "eval", "animal", 64, no_vocabulary)
  with pytest.raises(ValueError, match=r"lacks the output\(s\) \['predictions'\] the regression "
                                       r"task needs"):
    quality.evaluate(model_dir, examples.uri, "eval", "animal", 64)  # No task: regression.
  with pytest.raises(ValueError, match=r"holds strings \(bytes_list\); a regression label"):
    quality.evaluate(regression_dir, examples.uri, "eval", "animal", 64)


def test_evaluate_a_regression_model_as_a_classifier_names_the_missing_outputs(model_dir,
                                                                              tmp_path):
  from tfx_parallel.components.convergence_evaluator import task as task_lib  # pylint: disable=g-import-not-at-top
  x, y = testing.classification_data(8, BINARY_W, BINARY_B)
  examples = testing.write_examples(
      str(tmp_path), {"eval": testing.serialize_examples(x, y, FEATURES, "y")}, FEATURES, "y")
  with pytest.raises(ValueError, match=r"lacks the output\(s\) \['logits', 'probabilities'\] "
                                       r"the binary task needs; it returns \['predictions'\]"):
    quality.evaluate(model_dir, examples.uri, "eval", "y", 8, task_lib.TaskInfo("binary", 2))


def test_a_missing_or_mistyped_label_later_in_the_split_is_an_error(model_dir, tmp_path):
  x, y = testing.synthetic_data(6, [1.0, 0.0, 0.0], 0.0)
  good = testing.serialize_examples(x[:4], y[:4], FEATURES, "label")
  unlabelled = testing.serialize_examples(x[4:5], y[4:5], FEATURES, "other")
  int_label = testing.serialize_examples(x[5:], y[5:], FEATURES, "label", int_label=True)
  for name, bad, reason in (("missing", unlabelled, "is required but could not be found"),
                            ("int", int_label, "")):
    examples = testing.write_examples(str(tmp_path / name), {"eval": good + bad}, FEATURES,
                                      "label")
    with pytest.raises(ValueError, match=r"reading label 'label' \(one float32 per example, "
                                         r"as in the first labelled example\) from .*Split-eval.*" + reason):
      quality.evaluate(model_dir, examples.uri, "eval", "label", 2)


def test_examples_without_a_label_are_skipped_as_the_trainer_skips_them(model_dir, tmp_path):
  """#28 left the evaluator's label parse without the trainer's missing-label rule: an
  example without a label stopped the evaluation even when the trainer had skipped it
  (skip_missing_labels). Skipped here on the same rule; without it, the error says how."""
  from tfx_parallel.components.common import task_contract  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig  # pylint: disable=g-import-not-at-top
  x, y = testing.synthetic_data(40, [1.0, -2.0, 0.5], 0.25, noise=0.5, seed=5)
  labelled = testing.serialize_examples(x[:30], y[:30], FEATURES, "label")
  unlabelled = testing.serialize_examples(x[30:], y[30:], FEATURES, "other")
  examples = testing.write_examples(str(tmp_path), {"eval": labelled[:15] + unlabelled
                                                    + labelled[15:]}, FEATURES, "label")
  skipped = quality.evaluate(model_dir, examples.uri, "eval", "label", 8,
                             skip_missing_labels=True)
  predictions = x[:30].astype(np.float64) @ np.array([1.0, -2.0, 0.5]) + 0.25
  assert skipped.examples == 30
  assert skipped.unlabelled == 10
  assert skipped.mse == pytest.approx(_reference(y[:30].astype(np.float64), predictions)["mse"],
                                      rel=1e-5)
  with pytest.raises(ValueError, match=r"is required but could not be found\. To skip the "
                                       r"examples without the label, set "
                                       r"skip_missing_labels=true"):
    quality.evaluate(model_dir, examples.uri, "eval", "label", 8)
  # Who decides: the evaluator's config, else what the trainer did, else its default.
  from tfx_parallel.components.common.run_history import RunHistory  # pylint: disable=g-import-not-at-top
  decide = executor.skip_missing_labels
  assert decide(EvaluatorConfig(), RunHistory()) is task_contract.SKIP_MISSING_LABELS is True
  assert decide(EvaluatorConfig(), RunHistory(skipped_examples=10)) is True
  # The trainer's recorded policy: it failed on missing labels, so the evaluator does too.
  assert decide(EvaluatorConfig(), RunHistory(skipped_examples=0,
                                              missing_labels={"policy": "fail"})) is False
  assert decide(EvaluatorConfig(), RunHistory(missing_labels={"policy": "skip"})) is True
  assert decide(EvaluatorConfig(skip_missing_labels=False),
                RunHistory(skipped_examples=10)) is False
  assert decide(EvaluatorConfig(skip_missing_labels=True), RunHistory()) is True
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  assert TrainerConfig().skip_missing_labels is task_contract.SKIP_MISSING_LABELS


@pytest.mark.parametrize("int_label", [False, True])
def test_an_unlabelled_first_row_in_every_eval_shard_is_skipped_and_counted(
    model_dir, tmp_path, int_label):
  """#47: a 406-row file with 8 empty labels crashed the evaluator because the first row
  of an eval shard had no label and the label's presence and type were judged from that
  one record. Every shard here starts with an unlabelled row; the label's type comes from
  the first example that has it, and the unlabelled rows are skipped and counted."""
  x, y = testing.synthetic_data(24, [1.0, -2.0, 0.5], 0.25, noise=0.5, seed=7)
  y = np.round(y) if int_label else y
  labelled = testing.serialize_examples(x[:20], y[:20], FEATURES, "label",
                                        int_label=int_label)
  unlabelled = testing.serialize_examples(x[20:], y[20:], FEATURES, "other")
  # write_examples deals records[shard::shards]: the first two (unlabelled) open shard 0
  # and shard 1, and two more sit inside them.
  records = unlabelled[:2] + labelled[:10] + unlabelled[2:] + labelled[10:]
  examples = testing.write_examples(str(tmp_path), {"eval": records}, FEATURES, "label",
                                    shards=2)
  result = quality.evaluate(model_dir, examples.uri, "eval", "label", 4,
                            skip_missing_labels=True)
  predictions = x[:20].astype(np.float64) @ np.array([1.0, -2.0, 0.5]) + 0.25
  assert (result.examples, result.unlabelled) == (20, 4)
  assert result.mse == pytest.approx(_reference(y[:20].astype(np.float64), predictions)["mse"],
                                     rel=1e-5)
  with pytest.raises(ValueError, match=r"is required but could not be found"):
    quality.evaluate(model_dir, examples.uri, "eval", "label", 4)
  with pytest.raises(ValueError, match=r"label 'nope' is not a feature of any example in "
                                       r".*Split-eval; features present: .*--label"):
    quality.evaluate(model_dir, examples.uri, "eval", "nope", 4, skip_missing_labels=True)


LABELS = np.array([0, 1, 0, 1, 1, 0, 1, 0])


def test_auc_of_nan_scores_is_not_a_number():
  """A diverged model: NaN has no rank (argsort puts it last, which scored 0.43-0.5)."""
  assert math.isnan(quality.auc(LABELS, np.full(8, np.nan, np.float32)))
  one_nan = np.linspace(0.1, 0.9, 8)
  one_nan[3] = np.nan
  assert math.isnan(quality.auc(LABELS, one_nan))


def test_a_binary_model_with_nan_scores_has_no_auc_and_no_roc():
  acc = quality.BinaryAccumulator()
  acc.update(LABELS, np.full(8, np.nan), np.full(8, np.nan))
  result = acc.result()
  assert math.isnan(result.auc) and result.roc == ()
  # NaN > 0.5 is false: every example predicted negative, as the confusion matrix says.
  assert result.confusion == ((4, 0), (4, 0))
  regression = quality.QualityAccumulator()
  regression.update(LABELS, np.full(8, np.nan))
  assert math.isnan(regression.result().auc)
