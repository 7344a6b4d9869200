"""Same output_config, same file: the same splits as stock CsvExampleGen, row for row."""
import glob
import os

import numpy as np
import pytest

import tensorflow as tf
from tfx.components.example_gen.csv_example_gen import executor as csv_executor
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import proto_utils

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.components.partitioned_example_gen.executor import Executor

ROWS = 3000


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory):
  """ROWS rows: an int id, an int and a float feature with empty cells, a string, label."""
  root = tmp_path_factory.mktemp("stock_splits")
  rng = np.random.default_rng(3)
  lines = ["id,n,x,city,y"]
  for i in range(ROWS):
    n = "" if i % 11 == 0 else str(int(rng.integers(-50, 50)))
    x = "" if i % 13 == 0 else f"{rng.normal():.5f}"
    lines.append(f"{i},{n},{x},c{int(rng.integers(0, 40))},{rng.normal() * 3:.4f}")
  os.makedirs(root / "in")
  with open(root / "in" / "data.csv", "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  return root


def _output(splits, partition_feature=None):
  config = example_gen_pb2.SplitConfig(splits=[
      example_gen_pb2.SplitConfig.Split(name=n, hash_buckets=b) for n, b in splits])
  if partition_feature:
    config.partition_feature_name = partition_feature
  return example_gen_pb2.Output(split_config=config)


def _examples(root, name):
  examples = standard_artifacts.Examples()
  examples.uri = str(root / name)
  os.makedirs(examples.uri)
  return examples


def _context(root):
  return base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=[],
                                                     tmp_dir=str(root / "tmp"))


def _ids_by_split(examples):
  """split -> sorted ids, read back with TensorFlow."""
  out = {}
  for split in artifact_utils.decode_split_names(examples.split_names):
    files = sorted(glob.glob(os.path.join(examples.uri, f"Split-{split}", "*")))
    ids = []
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
      feature = tf.train.Example.FromString(record.numpy()).features.feature["id"]
      ids.append(int((feature.int64_list.value or feature.float_list.value)[0]))
    out[split] = sorted(ids)
  return out


def _stock(root, name, output):
  examples = _examples(root, name)
  csv_executor.Executor(_context(root)).Do({}, {keys.EXAMPLES_KEY: [examples]}, {
      specs.INPUT_BASE_KEY: str(root / "in"),
      specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Input(splits=[
          example_gen_pb2.Input.Split(name="single_split", pattern="data.csv")])),
      specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(output)})
  return _ids_by_split(examples)


def _ours(root, name, config, output=None):
  examples = _examples(root, name)
  props = {keys.CONFIG_KEY: config_util.to_json(config)}
  if output is not None:
    props[specs.OUTPUT_CONFIG_KEY] = proto_utils.proto_to_json(output)
  Executor(_context(root)).Do({}, {keys.EXAMPLES_KEY: [examples]}, props)
  return _ids_by_split(examples)


@pytest.mark.parametrize("name,splits,feature", [
    ("three_splits", [("train", 6), ("test", 1), ("eval", 3)], None),
    ("by_city", [("train", 2), ("eval", 1)], "city"),
    ("by_int", [("train", 3), ("eval", 2)], "n"),
])
def test_output_config_gives_stock_splits(csv_dir, name, splits, feature):
  output = _output(splits, feature)
  # keep_columns: stock writes every column, so the stock key needs the id too.
  config = ExampleGenConfig(label="y", source=str(csv_dir / "in" / "data.csv"),
                            shards_per_worker=3, keep_columns=("id",))
  stock = _stock(csv_dir, f"stock_{name}", output)
  ours = _ours(csv_dir, f"ours_{name}", config, output)
  assert list(ours) == [s for s, _ in splits]  # Stock's split order, not sorted.
  assert ours == stock
  assert sum(len(v) for v in ours.values()) == ROWS and all(ours.values())


def test_ratio_shorthand_is_the_stock_output_config_with_sorted_splits(csv_dir):
  """With a split_key, the shorthand is stock's partition_feature_name, splits sorted.
  (Without one it is the row split, which stock does not have: test_example_gen_row_split.)"""
  config = ExampleGenConfig(label="y", source=str(csv_dir / "in" / "data.csv"),
                            split_ratios={"train": 4, "eval": 1}, split_key="city",
                            keep_columns=("id",))
  stock = _stock(csv_dir, "stock_shorthand", _output([("eval", 1), ("train", 4)], "city"))
  assert _ours(csv_dir, "ours_shorthand", config) == stock
