"""Deterministic split and shard assignment of rows.

Each row has a partition key: its synthetic row id, or for CSV the raw line (or the
``split_key`` cell). The key is hashed to an unsigned 64-bit integer ``h``:

* bytes keys: the first 8 bytes (big-endian) of ``sha256(key)``, like TFX's ExampleGen;
* integer row ids: splitmix64(id), vectorized in numpy (10M ids hash in well under a
  second, where sha256 per row would take about ten).

Then ``bucket = h % sum(ratios)`` picks the split by bisecting the cumulative ratios over
the splits in sorted name order, and ``(h // sum(ratios)) % num_shards`` picks the shard.
Both depend only on the key and the config, so the same input lands in the same split and
shard on every run and every runner.
"""
import hashlib
from typing import Dict, Iterator, List, Sequence, Tuple, Union

import apache_beam as beam
import numpy as np

from tfx_parallel.components.partitioned_example_gen.rows import RowBatch

ShardKey = Tuple[str, int]  # (split name, shard index)

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def hash_keys(keys: Union[np.ndarray, Sequence[bytes]]) -> np.ndarray:
  """uint64 hash of each partition key (see the module docstring)."""
  if isinstance(keys, np.ndarray):
    return splitmix64(keys)
  return np.fromiter(
      (int.from_bytes(hashlib.sha256(k).digest()[:8], "big") for k in keys),
      dtype=np.uint64, count=len(keys))


def splitmix64(ids: np.ndarray) -> np.ndarray:
  """The splitmix64 finalizer of each id, as uint64 (wrapping arithmetic)."""
  with np.errstate(over="ignore"):
    z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) & _MASK64


class Partitioner:
  """Maps hashes to (split index, shard index) for fixed split ratios and shard count."""

  def __init__(self, split_ratios: Dict[str, int], num_shards: int):
    self.split_names: Tuple[str, ...] = tuple(sorted(split_ratios))
    self.boundaries = np.cumsum([split_ratios[s] for s in self.split_names])
    self.total = int(self.boundaries[-1])
    self.num_shards = num_shards

  def assign(self, hashes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(split index, shard index) arrays for uint64 ``hashes``."""
    total = np.uint64(self.total)
    bucket = hashes % total
    split = np.searchsorted(self.boundaries, bucket.astype(np.int64), side="right")
    shard = (hashes // total) % np.uint64(self.num_shards)
    return split.astype(np.int64), shard.astype(np.int64)

  def split_of(self, key: Union[int, bytes]) -> str:
    """The split of a single key; for tests and debugging."""
    keys = np.array([key], dtype=np.int64) if isinstance(key, int) else [key]
    split, _ = self.assign(hash_keys(keys))
    return self.split_names[int(split[0])]

  def all_shard_keys(self) -> List[ShardKey]:
    return [(s, i) for s in self.split_names for i in range(self.num_shards)]

  def partition(self, batch: RowBatch) -> Iterator[Tuple[ShardKey, RowBatch]]:
    """Splits one batch into sub-batches, one per (split, shard) that has rows."""
    split, shard = self.assign(hash_keys(batch.keys))
    cell = split * self.num_shards + shard
    order = np.argsort(cell, kind="stable")
    cells, starts = np.unique(cell[order], return_index=True)
    ends = list(starts[1:]) + [len(order)]
    for c, start, end in zip(cells.tolist(), starts.tolist(), ends):
      yield ((self.split_names[c // self.num_shards], c % self.num_shards),
             batch.take(order[start:end]))


@beam.ptransform_fn
def PartitionAndShard(batches: beam.PCollection, split_ratios: Dict[str, int],
                      num_shards: int) -> beam.PCollection:
  """RowBatch -> ((split, shard), RowBatch) with the rows of that split and shard."""
  partitioner = Partitioner(split_ratios, num_shards)
  return batches | "Partition" >> beam.FlatMap(partitioner.partition)
