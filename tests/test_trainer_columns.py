"""Issue 38 items 2 and 5 in the trainer (inputs/columns.py): on Examples as stock
CsvExampleGen writes a CSV with NA cells, a date and an ID column (string features),
missing-value tokens are missing values, a numeric column typed string for its NA cells
is read as a number with one warning, dates become numeric parts computed in the graph,
and an ID-like feature is left out with a line saying how to keep it."""
import collections
import datetime
import os

import numpy as np
import pytest

import tensorflow as tf

import trainer_util as tu

from tfx_parallel.components.common import column_rules
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.inputs import columns, missing, stats
from tfx_parallel.components.distributed_trainer.inputs import preprocess
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor
from tfx_parallel.components.common import na_values as na_lib

NA = na_lib.token_set()


def test_decide_takes_tokens_out_and_classifies():
  counts = {
      "island": {"Biscoe": 30, "Dream": 20, "NA": 4},
      "bill": dict({f"{40 + i / 10:.1f}": 1 for i in range(50)}, NA=3),
      "day": {f"2020-01-{d:02d}": 2 for d in range(1, 29)},
      "id": {f"row_{i:05d}": 1 for i in range(54)},
      "kept_id": {f"k{i}": 1 for i in range(54)},
  }
  got = columns.decide(counts, list(counts), NA, keep=["kept_id"], taken=["x", "y"])
  assert got.counts["island"] == {"Biscoe": 30, "Dream": 20}  # NA is no category
  assert got.na_tokens == {"island": {"NA": 4}, "bill": {"NA": 3}}
  assert got.derived["bill"].parts == (columns.NUMBER,)
  assert got.derived["bill"].mean[0] == pytest.approx(np.mean([40 + i / 10 for i in range(50)]))
  assert got.derived["day"].names == ("day_year", "day_month", "day_day", "day_day_of_week")
  assert got.derived["day"].mean[2] == pytest.approx(14.5)
  assert "ratio 1.00 >= trainer.id_like_ratio 0.5" in got.left_out["id"]
  assert sorted(got.categories) == ["island", "kept_id"]
  # One warning, naming the feature, the token and the fix.
  assert len(got.warnings) == 1
  assert ("string feature 'bill' holds numbers" in got.warnings[0]
          and "'NA'" in got.warnings[0] and "PartitionedExampleGen" in got.warnings[0]
          and "trainer.keep_as_category=['bill']" in got.warnings[0])
  assert any("leaving out string feature 'id'" in m and "keep_as_category=['id']" in m
             for m in got.messages)
  assert got.record()["left_out"].keys() == {"id"}
  assert got.record()["dates"] == {"day": list(got.derived["day"].names)}
  # id_like_ratio None embeds every string feature; without tokens no number is read.
  assert "id" in columns.decide(counts, ["id"], NA, id_like_ratio=None).counts
  assert "bill" not in columns.decide(counts, ["bill"], {""}).derived


def test_a_derived_name_avoids_a_taken_one():
  got = columns.decide({"d": {"2020-01-01": 1}}, ["d"], NA, taken=["d_year"])
  assert got.derived["d"].names[0] == "d__year"


def test_graph_date_parts_equal_pythons():
  start = datetime.date(1999, 12, 25)
  texts = [(start + datetime.timedelta(days=k)).isoformat() for k in range(0, 3000, 7)]
  texts += ["2016-02-29", "2015-02-29", "2020-13-01", "2020-04-31", "not a date", "",
            "2021-07-04T13:45:00Z", "2021-07-04 25:00", "2021-07-04 09:30"]
  strings = tf.constant([[t] for t in texts])
  for part in column_rules.DATE_PARTS + (column_rules.HOUR,):
    value, ok = preprocess.date_part(strings, part)
    want = [column_rules.date_parts(t) for t in texts]
    np.testing.assert_array_equal(ok.numpy()[:, 0],
                                  [w is not None and part in w for w in want], err_msg=part)
    got = value.numpy()[:, 0]
    for t, w, v in zip(texts, want, got):
      if w is not None and part in w:
        assert v == w[part], (part, t)


def test_config_keys_are_validated():
  with pytest.raises(ConfigError, match=r"id_like_ratio: must be in \(0, 1\].*Received: 2"):
    TrainerConfig(id_like_ratio=2).validate()
  with pytest.raises(ConfigError, match=r"keep_as_category: must be a list.*Received: 'id'"):
    TrainerConfig(keep_as_category="id").validate()
  with pytest.raises(ConfigError, match=r"na_values: must be a list of strings"):
    TrainerConfig(na_values="NA").validate()


# ------------------------------------------------------------- Examples as stock writes them

def _bytes(v):
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()] if v else []))


def _example(i, with_label=True):
  bill = "NA" if i % 9 == 0 else f"{35 + (i % 20) / 2:.1f}"
  day = (datetime.date(2021, 1, 1) + datetime.timedelta(days=5 * i)).isoformat()
  feature = {"bill": _bytes(bill), "island": _bytes("NA" if i % 11 == 0 else "ABC"[i % 3]),
             "day": _bytes(day), "id": _bytes(f"row_{i:05d}")}
  if with_label:
    feature["y"] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(i % 2)]))
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def test_stock_shaped_examples_end_to_end(tmp_path):
  files = {"train": [tu.write_split(tmp_path, "train", [_example(i) for i in range(60)])],
           "eval": [tu.write_split(tmp_path, "eval", [_example(i) for i in range(60, 80)])]}
  prepared = stats.prepare_all(
      str(tmp_path), [], ["bill", "island", "day", "id"], "y", task=None, max_vocabulary=10,
      hash_buckets=0, hparams={}, skip_missing_labels=False, normalize=True, files=files)
  spec = prepared.spec
  names = [f.name for f in spec.features]
  assert "id" not in names  # ID-like: left out
  assert names == ["bill", "day_year", "day_month", "day_day", "day_day_of_week", "island"]
  assert spec.feature("island").vocabulary == ("A", "B", "C")  # 'NA' is not a category
  assert spec.feature("bill").dtype == ms.FLOAT32 and spec.feature("bill").source == "bill"
  # NA tokens are counted as missing: never "missing values: none".
  bill_na = sum(1 for i in range(80) if i % 9 == 0)
  island_na = sum(1 for i in range(80) if i % 11 == 0)
  assert prepared.missing_values["bill"]["train"] + prepared.missing_values["bill"]["eval"] \
      == bill_na
  assert sum(v for k, v in prepared.missing_values["island"].items() if k != "fill") \
      == island_na
  line = missing.summary(prepared.missing_values, prepared.rows)
  assert line.startswith("missing values (all splits, filled): bill 9")
  assert prepared.columns.record()["na_tokens"]["bill"] == {"NA": 7}  # train only
  assert len(prepared.columns.warnings) == 1

  # The graph reads what the scan decided, in training and serving alike.
  pre = Preprocessor(spec, prepared.normalization)
  rows = [_example(i, with_label=False) for i in (0, 1, 2)]
  served = {k: v.numpy()[:, 0] for k, v in pre.serving_inputs(tf.constant(rows)).items()}
  assert served["bill"][0] == 0.0  # NA -> the train mean, standardised
  mean, std = prepared.normalization["mean"][0], prepared.normalization["std"][0]
  assert served["bill"][1] * std + mean == pytest.approx(35.5, abs=1e-4)
  j = names.index("day_month")
  months = served["day_month"] * prepared.normalization["std"][j] + \
      prepared.normalization["mean"][j]
  np.testing.assert_allclose(months, [1, 1, 1], atol=1e-4)
  assert served["island"][0] == 0 and served["island"][1] == 2  # NA -> id 0; "B" -> 2
  counts = collections.Counter(served["island"].tolist())
  assert counts[0] == 1


def test_stock_csv_example_gen_with_na_cells(tmp_path):
  """The stock path for real: stock CsvExampleGen types a numeric column with NA cells as
  a string column; the trainer reads it as a number, warns once naming the column, the
  token and the fix, and counts the NA cells as missing values."""
  from tfx.components.example_gen.csv_example_gen import executor as csv_executor  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import base_beam_executor  # pylint: disable=g-import-not-at-top
  from tfx.proto import example_gen_pb2  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_component_specs as specs  # pylint: disable=g-import-not-at-top
  from tfx.utils import proto_utils  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs import description  # pylint: disable=g-import-not-at-top
  os.makedirs(tmp_path / "in")
  rows = ["bill_length_mm,island,body_mass_g"]
  for i in range(120):
    bill = "NA" if i % 10 == 3 else f"{38 + (i % 17) * 0.7:.1f}"
    rows.append(f"{bill},{'NA' if i % 15 == 4 else 'XYZ'[i % 3]},{3000 + 10 * i}")
  (tmp_path / "in" / "penguins.csv").write_text("\n".join(rows) + "\n")
  examples = standard_artifacts.Examples()
  examples.uri = str(tmp_path / "examples")
  csv_executor.Executor(base_beam_executor.BaseBeamExecutor.Context(
      beam_pipeline_args=[], tmp_dir=str(tmp_path / "tmp"))).Do(
          {}, {"examples": [examples]}, {
              specs.INPUT_BASE_KEY: str(tmp_path / "in"),
              specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Input(
                  splits=[example_gen_pb2.Input.Split(name="all", pattern="*.csv")])),
              specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Output(
                  split_config=example_gen_pb2.SplitConfig(splits=[
                      example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
                      example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)])))})
  described = description.describe(examples, label_key="body_mass_g")
  assert "bill_length_mm" in described.string_keys  # stock read NA as text
  assert described.na_values is None  # nothing recorded: pandas' set applies
  prepared = stats.prepare_all(
      examples.uri, described.feature_keys, described.string_keys, "body_mass_g", task=None,
      max_vocabulary=100, hash_buckets=0, hparams={}, skip_missing_labels=False,
      normalize=True, dtypes=described.dtypes, files=described.files)
  warnings = prepared.columns.warnings
  assert len(warnings) == 1 and "'bill_length_mm'" in warnings[0] and "'NA'" in warnings[0]
  assert "leave missing cells empty" in warnings[0]
  bill = prepared.spec.feature("bill_length_mm")
  assert (bill.dtype, bill.source, bill.part) == (ms.FLOAT32, "bill_length_mm", "number")
  assert sorted(prepared.spec.feature("island").vocabulary) == ["X", "Y", "Z"]  # no NA
  na_cells = sum(1 for i in range(120) if i % 10 == 3)
  assert sum(v for k, v in prepared.missing_values["bill_length_mm"].items()
             if k != "fill") == na_cells
  assert missing.summary(prepared.missing_values, prepared.rows) != "missing values: none"
