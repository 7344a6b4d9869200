"""The driver: spans and versions, the input fingerprint, and no stale cache hits."""
import json
import os

import pytest

from tfx import v1 as tfx
from tfx.orchestration import metadata
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2
from tfx.utils import proto_utils

from tfx_parallel.components.common import keys
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.partitioned_example_gen import driver
from tfx_parallel.components.partitioned_example_gen import rows
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen.component import PartitionedExampleGen
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig


def _write(path, rows, start=0):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write("x,y\n" + "".join(f"{i},{2 * i}\n" for i in range(start, start + rows)))
  return str(path)


@pytest.mark.parametrize("pattern,expected", [
    ("/data/train/*.csv", ("/data/train", "*.csv")),
    ("/data/span-{SPAN}/v{VERSION}/*.csv", ("/data", "span-{SPAN}/v{VERSION}/*.csv")),
    ("/data/file.csv", ("/data", "file.csv")),
    ("file.csv", (".", "file.csv")),
    ("/*.csv", ("/", "*.csv")),
    ("gs://bucket/in/part-?.csv", ("gs://bucket/in", "part-?.csv")),
    ("gs://bucket/*/a.csv", ("gs://bucket", "*/a.csv")),
])
def test_split_glob(pattern, expected):
  assert driver.split_glob(pattern) == expected


def test_resolve_picks_the_latest_span_and_version(tmp_path):
  for span, version in ((1, 1), (2, 1), (2, 3), (10, 0)):
    _write(tmp_path / f"span-{span:02d}" / f"v{version}" / "data.csv", 5)
  config = ExampleGenConfig(label="y", source=str(tmp_path / "span-{SPAN:2}" / "v{VERSION}" / "*.csv"))
  resolved = driver.resolve(config)
  assert (resolved.span, resolved.version) == (10, 0)
  assert resolved.pattern == str(tmp_path / "span-10" / "v0" / "*.csv")
  assert resolved.fingerprint.startswith("split:single_split,num_files:1,total_bytes:")


def test_resolve_a_static_span_from_range_config(tmp_path):
  for span in (1, 2):
    _write(tmp_path / f"span-{span}" / "data.csv", 5)
  config = ExampleGenConfig(label="y", source=str(tmp_path / "span-{SPAN}" / "*.csv"))
  static = range_config_pb2.RangeConfig(static_range=range_config_pb2.StaticRange(
      start_span_number=1, end_span_number=1))
  resolved = driver.resolve(config, range_config_json=proto_utils.proto_to_json(static))
  assert resolved.span == 1 and resolved.pattern.endswith("span-1/*.csv")


def test_resolve_names_the_pattern_when_no_span_matches(tmp_path):
  config = ExampleGenConfig(label="y", source=str(tmp_path / "span-{SPAN}" / "*.csv"))
  with pytest.raises(sources.BadInputError, match=r"source: cannot resolve .*span-\{SPAN\}"):
    driver.resolve(config)


def test_fingerprint_changes_when_a_file_grows(tmp_path):
  path = _write(tmp_path / "data.csv", 10)
  config = ExampleGenConfig(label="y", source=path)
  before = driver.resolve(config).fingerprint
  with open(path, "a", encoding="utf-8") as f:
    f.write("10,20\n")
  assert driver.resolve(config).fingerprint != before


def test_exec_properties_of_the_synthetic_source_have_span_zero_and_no_fingerprint():
  props = driver.resolve_exec_properties({keys.CONFIG_KEY: '{"rows": 10}'})
  assert props["span"] == 0 and props["version"] is None and "input_fingerprint" not in props


@pytest.mark.parametrize("kwargs,key", [
    ({"input_config": example_gen_pb2.Input(splits=[
        example_gen_pb2.Input.Split(name="a", pattern="a/*"),
        example_gen_pb2.Input.Split(name="b", pattern="b/*")]), "input_base": "/d"},
     "input_config.splits"),
    ({"input_config": example_gen_pb2.Input(splits=[
        example_gen_pb2.Input.Split(name="s", pattern="*")])}, "input_config"),
    ({"range_config": range_config_pb2.RangeConfig(), "input_base": "/d"}, "range_config"),
    ({"config": ExampleGenConfig(source="/d/{SPAN}/{SPAN}.csv")}, "source"),
    ({"config": ExampleGenConfig(source="/a/*.csv"), "input_base": "/b"}, "input_base"),
])
def test_component_rejects_stock_protos_it_cannot_honour(kwargs, key):
  with pytest.raises(ConfigError) as info:
    PartitionedExampleGen(**kwargs)
  assert info.value.key == key


def _examples_artifacts(db):
  with metadata.Metadata(metadata.sqlite_metadata_connection_config(db)) as m:
    return sorted(m.store.get_artifacts_by_type("Examples"), key=lambda a: a.id)


def _run(tmp_path, component):
  db = str(tmp_path / "metadata.sqlite")
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name="driver_test", pipeline_root=str(tmp_path / "root"),
      components=[component],
      metadata_connection_config=metadata.sqlite_metadata_connection_config(db),
      enable_cache=True))
  return _examples_artifacts(db)


def _rows(artifact):
  return sum(json.loads(artifact.custom_properties[keys.ROW_COUNTS].string_value).values())


def test_appended_rows_or_a_new_encoding_are_a_new_execution_not_a_stale_cache_hit(
    tmp_path, monkeypatch):
  path = _write(tmp_path / "data" / "data.csv", 100)
  config = ExampleGenConfig(label="y", source=path, shards_per_worker=1)
  first = _run(tmp_path, PartitionedExampleGen(config))
  assert len(first) == 1 and _rows(first[0]) == 100
  assert first[0].custom_properties["input_fingerprint"].string_value

  again = _run(tmp_path, PartitionedExampleGen(config))  # Same files: a cache hit.
  assert [a.id for a in again] == [first[0].id]

  # Same files, another encoding (as after an upgrade that changes the bytes written):
  # a new execution, not the old encoding's artifact from the cache.
  monkeypatch.setattr(rows, "ENCODING_VERSION", rows.ENCODING_VERSION + 1)
  recoded = _run(tmp_path, PartitionedExampleGen(config))
  assert len(recoded) == 2 and _rows(recoded[1]) == 100
  monkeypatch.undo()

  with open(path, "a", encoding="utf-8") as f:
    f.write("".join(f"{i},{2 * i}\n" for i in range(100, 130)))
  grown = _run(tmp_path, PartitionedExampleGen(config))
  assert len(grown) == 3 and _rows(grown[2]) == 130
  assert (grown[2].custom_properties["input_fingerprint"].string_value !=
          first[0].custom_properties["input_fingerprint"].string_value)


def test_span_pattern_through_the_driver_records_span_on_the_artifact(tmp_path):
  _write(tmp_path / "data" / "span-1" / "a.csv", 40)
  _write(tmp_path / "data" / "span-2" / "a.csv", 60, start=1000)
  component = PartitionedExampleGen(
      ExampleGenConfig(label="y"), input_base=str(tmp_path / "data"),
      input_config=example_gen_pb2.Input(splits=[
          example_gen_pb2.Input.Split(name="single_split", pattern="span-{SPAN}/*.csv")]))
  [examples] = _run(tmp_path, component)
  assert examples.custom_properties["span"].int_value == 2
  assert examples.properties["span"].int_value == 2
  assert _rows(examples) == 60


def test_pipeline_input_check_reads_the_span_the_driver_picks(tmp_path):
  from tfx_parallel.pipeline import config as config_lib  # pylint: disable=g-import-not-at-top
  _write(tmp_path / "span-1" / "a.csv", 5)
  os.makedirs(tmp_path / "span-2")
  with open(tmp_path / "span-2" / "a.csv", "w", encoding="utf-8") as f:
    f.write("x,other\n1,2\n")  # The latest span has no label column.
  config = config_lib.PipelineConfig(example_gen=ExampleGenConfig(
      source=str(tmp_path / "span-{SPAN}" / "*.csv"), label="y"))
  with pytest.raises(ConfigError, match=r"span-2/a\.csv:1: label column 'y' not in the header"):
    config.validate().check_inputs()
