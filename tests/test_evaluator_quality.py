"""Quality metrics: the numpy accumulator and the tf.data + serving-signature read."""
import math
import os

import numpy as np
import pytest

import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
from tfx.utils import path_utils

from tfx_parallel.components.convergence_evaluator import quality
from tfx_parallel.components.convergence_evaluator import testing

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
