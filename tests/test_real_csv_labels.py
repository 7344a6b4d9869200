"""Issue 38 items 1, 3 and 10: real-shaped CSVs through `tfx-parallel run` with nothing but
``--data`` and ``--label``: string labels (3 classes, and 5 imbalanced ones) and a
regression file with 8 empty labels (the files: tests/real_csv.py).

Each case is one CLI run (slow). It asserts the exit code, the console lines a user reads,
the record in ML Metadata (read with plain ``ml_metadata``), the verdict, and a quality
floor against the trivial predictor and a scikit-learn peer (LogisticRegression / Ridge)
fitted here on the very train rows the pipeline wrote and scored on its eval rows. The
string-label cases also call the exported model's TF Serving ``classification`` signature
on the eval rows: its class names are the recorded vocabulary, and its accuracy is the
evaluator's (one label encoding in training, evaluation and serving).

No ``--epochs``: the default length is chosen from the data (a floor on steps, early
stopping on the eval loss with the best weights kept: plan/length.py), which is what a
user who types only ``--data`` and ``--label`` gets.
"""
import json
import os

import numpy as np
import pandas as pd
import pytest

import real_csv
from test_pipeline_console import _cli

pytestmark = pytest.mark.slow

# How far below the scikit-learn peer the pipeline's default model may land on eval.
ACCURACY_MARGIN = 0.08
R2_MARGIN = 0.10


def _store(home):
  from ml_metadata import metadata_store  # pylint: disable=g-import-not-at-top
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = os.path.join(str(home), "metadata.sqlite")
  cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
  return metadata_store.MetadataStore(cfg)


def _artifact(store, type_name):
  """The newest artifact of ``type_name``: (uri, {custom property: value})."""
  found = store.get_artifacts_by_type(type_name)
  assert found, f"no {type_name} artifact in ML Metadata"
  a = max(found, key=lambda x: x.id)
  props = {k: getattr(v, v.WhichOneof("value")) for k, v in a.custom_properties.items()}
  return a.uri, props


def _frame(examples_uri, split):
  """The rows of one split of the Examples artifact as a DataFrame (NaN / None: absent)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  paths = sorted(tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*.gz")))
  rows = []
  for record in tf.data.TFRecordDataset(paths, compression_type="GZIP"):
    example = tf.train.Example.FromString(record.numpy())
    row = {}
    for name, feature in example.features.feature.items():
      kind = feature.WhichOneof("kind")
      values = getattr(feature, kind).value if kind else []
      if values:
        row[name] = values[0].decode() if kind == "bytes_list" else float(values[0])
    rows.append(row)
  return pd.DataFrame(rows)


def _design(train, evaluate, label):
  """One-hot strings, mean-imputed numbers: the peer's inputs, from the train columns."""
  from sklearn.impute import SimpleImputer  # pylint: disable=g-import-not-at-top
  from sklearn.preprocessing import StandardScaler  # pylint: disable=g-import-not-at-top
  both = pd.get_dummies(pd.concat([train.drop(columns=[label]), evaluate.drop(columns=[label])],
                                  keys=["train", "eval"]), dtype=float)
  impute, scale = SimpleImputer(), StandardScaler()
  x_train = scale.fit_transform(impute.fit_transform(both.loc["train"]))
  x_eval = scale.transform(impute.transform(both.loc["eval"]))
  return x_train, x_eval


def _run(home, path, label):
  proc = _cli(home, "--data", path, "--label", label)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return proc


def _classifier_case(tmp_path, make, label):
  path, written = make(tmp_path / f"{label}.csv")
  home = tmp_path / "home"
  proc = _run(home, path, label)
  assert "[trainer] length: " in proc.stdout  # What was chosen and why.
  store = _store(home)
  examples_uri, ex_props = _artifact(store, "Examples")
  model_uri, model_props = _artifact(store, "Model")
  _, hist = _artifact(store, "TrainingHistory")
  _, metrics = _artifact(store, "ConvergenceMetrics")
  classes = sorted(written[label].dropna().unique())
  return dict(proc=proc, examples_uri=examples_uri, ex_props=ex_props, model=model_props,
              history=hist, metrics=metrics, model_uri=model_uri, classes=classes)


def _check_classifier(case, label):
  """The checks every string-label case shares (module docstring)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  out = case["proc"].stdout + case["proc"].stderr
  assert "is not numeric" not in out and "column_types." + label not in out
  # The label is a string label: recorded, sorted, with counts per split.
  assert json.loads(case["ex_props"]["column_types"])[label] == "string"
  vocabulary = json.loads(case["model"]["label_vocabulary"])
  assert vocabulary == case["classes"] == sorted(vocabulary)
  counts = json.loads(case["history"]["label_counts"])
  train, evaluate = (_frame(case["examples_uri"], "train"),
                     _frame(case["examples_uri"], "eval"))
  assert counts == {"train": train[label].value_counts().sort_index().to_dict(),
                    "eval": evaluate[label].value_counts().sort_index().to_dict()}
  assert "[trainer] label classes in 'train': " in out
  # Verdict and quality: a floor set by the trivial predictor and LogisticRegression.
  m = case["metrics"]
  assert m["convergence_state"] == "converged", m["convergence_reason"]
  x_train, x_eval = _design(train, evaluate, label)
  peer = LogisticRegression(max_iter=2000).fit(x_train, train[label]).score(
      x_eval, evaluate[label])
  trivial = evaluate[label].value_counts(normalize=True).max()
  accuracy = m["eval_accuracy"]
  assert accuracy >= peer - ACCURACY_MARGIN and accuracy > trivial + 0.2, (
      accuracy, peer, trivial)
  # TF Serving's classify signature on the eval rows: the class names, and the accuracy
  # the evaluator recorded (the same encoding in training, evaluation and serving).
  model_dir = os.path.join(case["model_uri"], "Format-Serving")
  classify = tf.saved_model.load(model_dir).signatures["classification"]
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      sorted(tf.io.gfile.glob(os.path.join(case["examples_uri"], "Split-eval", "*.gz"))),
      compression_type="GZIP")]
  result = classify(inputs=tf.constant(records))
  names = result["classes"].numpy()
  assert names.tolist() == [[c.encode() for c in vocabulary]] * len(records)
  predicted = names[np.arange(len(records)), result["scores"].numpy().argmax(1)]
  truth = [tf.train.Example.FromString(r).features.feature[label].bytes_list.value[0]
           for r in records]
  assert np.mean(predicted == np.array(truth)) == pytest.approx(accuracy, abs=1e-6)
  return accuracy, peer, trivial


def test_penguins_344_rows_three_string_classes(tmp_path):
  """palmerpenguins' shape: ``--label species`` trains a 3-class classifier."""
  case = _classifier_case(tmp_path, real_csv.penguins, "species")
  assert case["classes"] == ["Adelie", "Chinstrap", "Gentoo"]
  _check_classifier(case, "species")
  assert case["history"]["skipped_examples"] == 0


def test_five_imbalanced_string_classes(tmp_path):
  """A 5-class label with 7 % in the rarest class."""
  case = _classifier_case(tmp_path, real_csv.five_classes, "weather")
  assert case["classes"] == sorted(real_csv.FIVE_CLASSES)
  _check_classifier(case, "weather")
  out = case["proc"].stdout
  assert "labels     5 classes in train (cloudy " in out  # The summary, from ML Metadata.


def test_regression_with_eight_empty_labels_skips_and_records_them(tmp_path):
  """auto-mpg's shape: 8 of 406 labels empty. They are skipped by default, and said so on
  the console, in the summary and in ML Metadata; the model clears Ridge's floor."""
  from sklearn.linear_model import Ridge  # pylint: disable=g-import-not-at-top
  path, written = real_csv.auto_mpg(tmp_path / "auto-mpg.csv")
  assert written["mpg"].isna().sum() == 8
  home = tmp_path / "home"
  proc = _run(home, path, "mpg")
  store = _store(home)
  examples_uri, _ = _artifact(store, "Examples")
  _, hist = _artifact(store, "TrainingHistory")
  _, m = _artifact(store, "ConvergenceMetrics")
  train, evaluate = _frame(examples_uri, "train"), _frame(examples_uri, "eval")
  per_split = {"train": int(train["mpg"].isna().sum()), "eval": int(evaluate["mpg"].isna().sum())}
  assert sum(per_split.values()) == 8
  shown = ", ".join(f"{s} {n}" for s, n in per_split.items() if n)
  assert (f"[trainer] missing labels: 8 of 406 examples (2.0%; {shown}) have no value for "
          f"the label 'mpg'; skipped in training and evaluation "
          f"(trainer.skip_missing_labels=false makes this an error)") in proc.stdout
  assert "labels     8 of 406 examples without a label (2.0%) skipped" in proc.stdout
  assert json.loads(hist["missing_labels"]) == {
      "count": 8, "rows": 406, "share": round(8 / 406, 6), "splits": per_split,
      "policy": "skip"}
  assert hist["skipped_examples"] == 8
  assert "label_counts" not in hist  # Regression: no classes.
  assert m["convergence_state"] == "converged", m["convergence_reason"]
  assert m["eval_examples"] == len(evaluate) - per_split["eval"]
  train, evaluate = train.dropna(subset=["mpg"]), evaluate.dropna(subset=["mpg"])
  x_train, x_eval = _design(train, evaluate, "mpg")
  peer = Ridge().fit(x_train, train["mpg"]).score(x_eval, evaluate["mpg"])
  assert m["eval_r2"] >= peer - R2_MARGIN and m["eval_r2"] > 0.5, (m["eval_r2"], peer)
  assert m["eval_mse"] < m["trivial_loss"]  # The trivial predictor: the eval label's variance.
