"""Split and shard assignment: deterministic, close to the ratios, a pure Beam transform."""
import hashlib

import numpy as np

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from tfx_parallel.components.partitioned_example_gen import partition
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch


def test_bytes_keys_split_exactly_as_stock_example_gen():
  """Stock's own _PartitionFn on the same keys and buckets, in output_config order."""
  from tfx.components.example_gen import base_example_gen_executor as stock  # pylint: disable=g-import-not-at-top
  from tfx.proto import example_gen_pb2  # pylint: disable=g-import-not-at-top
  keys = [f"row{i}".encode() for i in range(2000)] + [b""]
  pairs = [("train", 7), ("eval", 2), ("test", 1)]  # Not sorted: stock keeps this order.
  p = partition.Partitioner(pairs, num_shards=3)
  split, shard = p.assign_keys(keys)
  buckets = list(np.cumsum([b for _, b in pairs]))
  expected = [stock._PartitionFn(k, 3, buckets, example_gen_pb2.SplitConfig())  # pylint: disable=protected-access
              for k in keys]
  assert split.tolist() == expected
  assert p.split_names == ("train", "eval", "test")
  h = int(hashlib.sha256(keys[5]).hexdigest(), 16)
  assert shard[5] == (h // 10) % 3


def test_integer_keys_hash_with_splitmix64():
  # Reference values of splitmix64's output for seeds 0 and 1 (first state step).
  assert int(partition.splitmix64(np.array([0]))[0]) == 0xE220A8397B1DCDAF
  assert int(partition.splitmix64(np.array([1]))[0]) == 0x910A2DEC89025CC1


def test_split_sizes_follow_the_ratios():
  p = partition.Partitioner({"train": 4, "eval": 1}, num_shards=3)
  split, shard = p.assign(partition.hash_keys(np.arange(100_000)))
  assert p.split_names == ("eval", "train")
  eval_fraction = np.mean(split == 0)
  assert 0.19 < eval_fraction < 0.21
  assert set(shard.tolist()) == {0, 1, 2}
  assert abs(np.mean(shard[split == 1] == 2) - 1 / 3) < 0.01


def test_split_order_of_the_ratio_dict_does_not_matter():
  keys = [f"row{i}".encode() for i in range(500)]
  a = partition.Partitioner({"train": 4, "eval": 1}, 2).assign_keys(keys)
  b = partition.Partitioner({"eval": 1, "train": 4}, 2).assign_keys(keys)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))


def _batch(start, n):
  return RowBatch(("synthetic", start), {"x": np.arange(start, start + n, dtype=np.float64)},
                  {}, np.arange(start, start + n))


def _membership(parts):
  """(split, shard, row value) of every row of ((split, shard), RowBatch) elements."""
  return [(split, shard, int(v)) for (split, shard), b in parts for v in b.numeric["x"]]


def _expected_membership(p, rows):
  split, shard = p.assign(partition.hash_keys(np.arange(rows)))
  return [(p.split_names[s], int(k), i) for i, (s, k) in enumerate(zip(split, shard))]


def test_partition_and_shard_transform():
  ratios, shards = {"train": 3, "eval": 1, "test": 1}, 4
  expected = _expected_membership(partition.Partitioner(ratios, shards), 300)
  with beam.Pipeline() as p:
    parts = (p | beam.Create([_batch(0, 100), _batch(100, 200)])
             | partition.PartitionAndShard(ratios, shards))
    rows = parts | beam.FlatMap(lambda e: _membership([e]))
    assert_that(rows, equal_to(expected))
    keys = parts | "Keys" >> beam.Map(lambda e: e[0])
    assert_that(keys, lambda ks: _check_keys(ks, ratios, shards), label="KeysValid")


def _check_keys(keys, ratios, shards):
  assert all(s in ratios and 0 <= k < shards for s, k in keys), keys
  # One element per (split, shard) that has rows, per input batch: at most 2 * 12.
  assert len(keys) <= 2 * len(ratios) * shards


def test_same_input_twice_gives_the_same_membership():
  def run():
    with beam.Pipeline() as p:
      parts = (p | beam.Create([_batch(0, 50), _batch(50, 50)])
               | partition.PartitionAndShard({"train": 4, "eval": 1}, 2)
               | beam.FlatMap(lambda e: _membership([e])))
      assert_that(parts, equal_to(expected))
  expected = _expected_membership(partition.Partitioner({"train": 4, "eval": 1}, 2), 100)
  run()
  run()
