"""The real PartitionedExampleGen executor and component (no TFX or Beam mocks)."""
import glob
import hashlib
import json
import os

import numpy as np
import pytest

import tensorflow as tf
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.types import standard_artifacts

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen.component import PartitionedExampleGen
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.components.partitioned_example_gen.executor import Executor

MULTI_PROCESS_ARGS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def run_executor(tmp_path, config, beam_args=(), name="examples"):
  """Runs Executor.Do like an orchestrator would; returns the output artifact."""
  examples = standard_artifacts.Examples()
  examples.uri = str(tmp_path / name)
  os.makedirs(examples.uri)
  context = base_beam_executor.BaseBeamExecutor.Context(
      beam_pipeline_args=list(beam_args), tmp_dir=str(tmp_path / "tmp"))
  Executor(context).Do({}, {keys.EXAMPLES_KEY: [examples]},
                       {keys.CONFIG_KEY: config_util.to_json(config)})
  return examples


def split_files(examples, split):
  return sorted(glob.glob(os.path.join(examples.uri, f"Split-{split}", "*")))


def read_split(examples, split):
  return [tf.train.Example.FromString(r.numpy())
          for r in tf.data.TFRecordDataset(split_files(examples, split), compression_type="GZIP")]


def value(example, key):
  feature = example.features.feature.get(key)
  if feature is None:
    return None
  kind = feature.WhichOneof("kind")
  return getattr(feature, kind).value[0]


def props(examples):
  return {k: examples.get_custom_property(k) for k in examples.mlmd_artifact.custom_properties}


def file_digests(examples):
  return {os.path.relpath(p, examples.uri): hashlib.sha256(open(p, "rb").read()).hexdigest()
          for p in glob.glob(os.path.join(examples.uri, "Split-*", "*"))}


def write_csv(path, lines):
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return str(path)


# ----------------------------------------------------------------------------- synthetic


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
  config = ExampleGenConfig(rows=3000, num_features=3, noise=0.0, num_workers=2,
                            shards_per_worker=2)
  return config, run_executor(tmp_path_factory.mktemp("synthetic"), config)


def test_synthetic_artifact_layout_and_properties(synthetic):
  config, examples = synthetic
  assert artifact_utils.decode_split_names(examples.split_names) == ["eval", "train"]
  assert examples_utils.get_payload_format(examples) == (
      example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
  p = props(examples)
  counts = json.loads(p[keys.ROW_COUNTS])
  assert sum(counts.values()) == 3000
  assert 0.15 < counts["eval"] / 3000 < 0.25
  assert p[keys.ROW_COUNT_PREFIX + "train"] == counts["train"]
  assert p[keys.NUM_SHARDS] == 4 and p[keys.SKIPPED_ROWS] == 0
  assert json.loads(p[keys.FEATURE_KEYS]) == ["x0", "x1", "x2"]
  assert p[keys.LABEL_KEY] == "y" and p[keys.SOURCE] == "synthetic"
  assert json.loads(p[keys.TRUE_WEIGHTS]) == [1.0, 2.0, 3.0]
  assert float(p[keys.TRUE_BIAS]) == 3.0  # Text, exact: ML Metadata keeps 6 decimals.
  for split in ("train", "eval"):
    names = [os.path.basename(f) for f in split_files(examples, split)]
    assert names == [f"data_tfrecord-{i:05d}-of-00004.gz" for i in range(4)]
    assert len(read_split(examples, split)) == counts[split]
  assert not glob.glob(os.path.join(examples.uri, ".staging-*"))


def test_synthetic_examples_follow_the_true_model(synthetic):
  _, examples = synthetic
  rows = read_split(examples, "train")
  x = np.array([[value(e, f"x{i}") for i in range(3)] for e in rows])
  y = np.array([value(e, "y") for e in rows])
  np.testing.assert_allclose(y, x @ [1.0, 2.0, 3.0] + 3.0, rtol=1e-5, atol=1e-4)


def test_same_config_twice_gives_identical_files(synthetic, tmp_path):
  config, first = synthetic
  second = run_executor(tmp_path, config)
  assert file_digests(first) == file_digests(second)


# ----------------------------------------------------------------------------- CSV, taxi


def test_csv_with_missing_values_and_strings(tmp_path):
  path = write_csv(tmp_path / "data.csv",
                   ["a,city,y"] + [f"{i if i % 7 else ''},c{i % 3},{i * 0.5}" for i in range(60)])
  examples = run_executor(tmp_path, ExampleGenConfig(label="y", source=path, shards_per_worker=1))
  p = props(examples)
  # Every feature the trainer uses, in header order; the string ones also on their own.
  assert json.loads(p[keys.FEATURE_KEYS]) == ["a", "city"] and p[keys.SOURCE] == path
  assert json.loads(p[keys.STRING_FEATURE_KEYS]) == ["city"]
  rows = read_split(examples, "train") + read_split(examples, "eval")
  assert len(rows) == 60
  by_label = {value(e, "y"): e for e in rows}
  assert value(by_label[0.0], "a") is None  # Empty cell -> absent feature.
  assert value(by_label[4.0], "a") == 8.0
  assert value(by_label[4.0], "city") == b"c2"
  assert json.loads(p[keys.COLUMN_TYPES]) == {"a": "int", "city": "string", "y": "float"}
  assert json.loads(p[keys.TYPE_INFERENCE])["sampled_rows"] == 60


def _issue_csv(tmp_path):
  """The issue's CSV: 400 rows of x0,x1,y, one 'not-a-number' in x1 on line 59."""
  # x0 is not a row number (that would be left out as ID-like: column_choice.py).
  lines = ["x0,x1,y"] + [f"{i % 37},{i * 0.5},{i * 3 + 1}" for i in range(400)]
  lines[58] = "57,not-a-number,172"
  return write_csv(tmp_path / "data.csv", lines)


def test_one_bad_cell_fails_naming_file_and_line(tmp_path):
  path = _issue_csv(tmp_path)
  with pytest.raises(sources.BadInputError,
                     match=r"data\.csv:59: column 'x1': expected float, got 'not-a-number'"):
    run_executor(tmp_path, ExampleGenConfig(label="y", source=path))
  assert os.listdir(tmp_path / "examples") == []


def test_one_bad_cell_skipped_keeps_the_column_numeric_and_says_so(tmp_path, caplog):
  path = _issue_csv(tmp_path)
  # absl's own logger too: another test in the same worker may have left it above INFO.
  with caplog.at_level("INFO"), caplog.at_level("INFO", logger="absl"):
    examples = run_executor(tmp_path, ExampleGenConfig(label="y", source=path, bad_row_policy="skip"))
  p = props(examples)
  assert p[keys.SKIPPED_ROWS] == 1 and sum(json.loads(p[keys.ROW_COUNTS]).values()) == 399
  assert json.loads(p[keys.FEATURE_KEYS]) == ["x0", "x1"]
  assert json.loads(p[keys.COLUMN_TYPES]) == {"x0": "int", "x1": "float", "y": "int"}
  assert "x0=int, x1=float, y=int" in caplog.text
  assert "data.csv:59 'not-a-number'" in caplog.text  # The sample's odd cell, at WARNING.


def test_split_key_keeps_equal_keys_together(tmp_path):
  path = write_csv(tmp_path / "data.csv",
                   ["user,x,y"] + [f"u{i % 10},{i},{i}" for i in range(200)])
  examples = run_executor(tmp_path, ExampleGenConfig(label="y", source=path, split_key="user"))
  users = {split: {value(e, "user") for e in read_split(examples, split)}
           for split in ("train", "eval")}
  assert users["train"] and users["eval"] and not users["train"] & users["eval"]


def test_taxi_source(tmp_path):
  examples = run_executor(tmp_path, ExampleGenConfig(source="taxi"))
  p = props(examples)
  assert sum(json.loads(p[keys.ROW_COUNTS]).values()) == 15002
  assert p[keys.LABEL_KEY] == "fare" and p[keys.SOURCE] == "taxi"
  assert json.loads(p[keys.FEATURE_KEYS]) == [
      "trip_start_month", "trip_start_hour", "trip_start_day", "pickup_latitude",
      "pickup_longitude", "dropoff_latitude", "dropoff_longitude", "trip_miles",
      "trip_seconds"]
  assert set(sources.TAXI_FEATURE_COLUMNS) == set(json.loads(p[keys.FEATURE_KEYS]))


# ----------------------------------------------------------------------------- bad input

BAD_INPUT = {
    "unbalanced_quotes": (["a,b,y", "1,2,3", "4,\"5,6"], r"data\.csv:3: malformed CSV row"),
    "too_many_columns": (["a,b,y", "1,2,3", "1,2,3", "4,5,6,7"],
                         r"data\.csv:4: expected 3 columns, got 4"),
    "non_numeric": (["a,b,y", "1,2,3", "4,5,6", "7,x,9"],
                    r"data\.csv:4: column 'b': expected float, got 'x'"),
    "only_header": (["a,b,y"], r"data\.csv: no data rows after the header"),
    "missing_label": (["a,b,z", "1,2,3"], r"data\.csv:1: label column 'y' not in the header"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_input_fails_from_do_naming_file_and_line(tmp_path, case):
  lines, message = BAD_INPUT[case]
  path = write_csv(tmp_path / "data.csv", lines)
  config = ExampleGenConfig(label="y", source=path, column_types={"a": "float", "b": "float"})
  with pytest.raises(sources.BadInputError, match=message):
    run_executor(tmp_path, config)
  assert os.listdir(tmp_path / "examples") == []  # No partial artifact.


def test_bad_row_in_a_later_read_range_names_its_line(tmp_path, monkeypatch):
  monkeypatch.setattr(sources, "RANGE_BYTES", 64)  # About 8 lines per read range.
  lines = ["a,y"] + [f"{i},{i}" for i in range(300)]
  lines[250] = "249,oops"
  path = write_csv(tmp_path / "data.csv", lines)
  with pytest.raises(sources.BadInputError,
                     match=r"data\.csv:251: column 'y': expected int, got 'oops'"):
    run_executor(tmp_path, ExampleGenConfig(label="y", source=path, type_inference_rows=100))


def test_no_files_fails_before_beam_naming_the_glob(tmp_path):
  with pytest.raises(sources.BadInputError, match=r"no files match .*missing-\*\.csv"):
    run_executor(tmp_path, ExampleGenConfig(label="y", source=str(tmp_path / "missing-*.csv")))


def test_bad_row_in_a_later_file_names_that_file(tmp_path):
  write_csv(tmp_path / "a.csv", ["x,y", "1,2", "3,4"])
  write_csv(tmp_path / "b.csv", ["x,y", "5,6", "7,8", "9"])
  with pytest.raises(sources.BadInputError, match=r"b\.csv:4: expected 2 columns, got 1"):
    run_executor(tmp_path, ExampleGenConfig(label="y", source=str(tmp_path / "*.csv")))
  assert os.listdir(tmp_path / "examples") == []


def test_skip_policy_counts_skipped_rows(tmp_path):
  lines = ["a,y"] + [f"{i},{i}" for i in range(40)] + ["1,2,3", "x,1", "\"7,8", "5,5"]
  path = write_csv(tmp_path / "data.csv", lines)
  config = ExampleGenConfig(label="y", source=path, bad_row_policy="skip", column_types={"a": "float"})
  examples = run_executor(tmp_path, config)
  p = props(examples)
  assert p[keys.SKIPPED_ROWS] == 3
  assert sum(json.loads(p[keys.ROW_COUNTS]).values()) == 41


def test_skip_policy_with_no_good_rows_fails(tmp_path):
  path = write_csv(tmp_path / "data.csv", ["a,y", "1,2,3", "x,1"])
  config = ExampleGenConfig(label="y", source=path, bad_row_policy="skip", column_types={"a": "float"})
  with pytest.raises(sources.BadInputError, match=r"no data rows \(2 bad rows skipped\)"):
    run_executor(tmp_path, config)
  assert os.listdir(tmp_path / "examples") == []


# ----------------------------------------------------------------------------- runners


@pytest.mark.slow
def test_multi_processing_runner_matches_in_memory(tmp_path):
  path = write_csv(tmp_path / "data.csv", ["a,s,y"] + [f"{i},s{i},{i}" for i in range(500)])
  config = ExampleGenConfig(label="y", source=path, num_workers=2, shards_per_worker=1)
  in_memory = run_executor(tmp_path, config, name="in_memory")
  multi = run_executor(tmp_path, config, MULTI_PROCESS_ARGS, name="multi")
  assert file_digests(in_memory) == file_digests(multi)
  assert props(in_memory)[keys.ROW_COUNTS] == props(multi)[keys.ROW_COUNTS]


@pytest.mark.slow
def test_multi_processing_runner_reports_bad_rows_with_file_and_line(tmp_path):
  path = write_csv(tmp_path / "data.csv", ["a,y", "1,2", "3,4,5"])
  with pytest.raises(sources.BadInputError, match=r"data\.csv:3: expected 2 columns, got 3"):
    run_executor(tmp_path, ExampleGenConfig(label="y", source=path), MULTI_PROCESS_ARGS)
  assert os.listdir(tmp_path / "examples") == []


# ----------------------------------------------------------------------------- component


def test_component_stores_validated_config_and_examples_channel():
  config = ExampleGenConfig(rows=100, num_workers=2)
  component = PartitionedExampleGen(config=config).with_beam_pipeline_args(
      ["--direct_num_workers=2"])
  assert config_util.from_json(ExampleGenConfig,
                               component.exec_properties[keys.CONFIG_KEY]) == config
  assert component.outputs[keys.EXAMPLES_KEY].type == standard_artifacts.Examples
  assert component.executor_spec.executor_class is Executor
  assert component.executor_spec.beam_pipeline_args == ["--direct_num_workers=2"]


@pytest.mark.parametrize("kwargs,key", [
    ({"rows": 0}, "rows"),
    ({"split_ratios": {"train": 0}}, "split_ratios.train"),
    ({"bad_row_policy": "ignore"}, "bad_row_policy"),
    ({"split_key": "x0"}, "split_key"),
    ({"source": "a.csv", "columns": ("a", "a")}, "columns"),
])
def test_component_rejects_bad_config_naming_the_key(kwargs, key):
  with pytest.raises(ConfigError) as info:
    PartitionedExampleGen(config=ExampleGenConfig(**kwargs))
  assert info.value.key == key
