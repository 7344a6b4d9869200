"""Deterministic split and shard assignment of rows.

Each row has a partition key: its synthetic row id; for CSV by default its position,
``row_ids`` (file offset from the seed and the file's name, plus the line number: a
seeded random split over rows, as scikit-learn's ``train_test_split``); with a
partition feature (split_key) or a stock output_config, the stock ExampleGen key
(stock_key.py: the serialized stock Example of the partition feature, or of the row).
The key is hashed to an integer ``h``:

* bytes keys: ``int(sha256(key).hexdigest(), 16)``, all 256 bits, exactly as stock
  ExampleGen's ``_PartitionFn``;
* integer row ids and CSV row positions: splitmix64(id), 64 bits, vectorized in numpy (10M ids hash in well
  under a second, where sha256 per row would take about ten).

Then ``bucket = h % total_buckets`` picks the split by bisecting the cumulative buckets
over the splits in their configured order (``bisect.bisect``, as stock), and
``(h // total_buckets) % num_shards`` picks the shard. Both depend only on the key and
the config, so the same input lands in the same split and shard on every run and every
runner; with the stock keys, in the same split as in stock ExampleGen.
"""
import dataclasses
import hashlib
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import apache_beam as beam
import numpy as np

from tfx_parallel.components.partitioned_example_gen.rows import RowBatch

ShardKey = Tuple[str, int]  # (split name, shard index)

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def hash_keys(keys: np.ndarray) -> np.ndarray:
  """uint64 hash of each integer row id (splitmix64)."""
  return splitmix64(np.asarray(keys))


def file_bases(files: Sequence[str], seed: int) -> Dict[str, int]:
  """The row split's per-file offset: 64 bits of sha256(seed, the file's path relative
  to the matched files' deepest common directory). One file's offset depends only on
  the seed and its name, so moving the directory keeps the split."""
  parts = [f.split("/") for f in files]
  common = 0
  if parts:
    dirs = [p[:-1] for p in parts]
    while all(len(d) > common and d[common] == dirs[0][common] for d in dirs):
      common += 1
  return {f: int.from_bytes(hashlib.sha256(
      f"{seed}\0{'/'.join(p[common:])}".encode("utf-8")).digest()[:8], "big")
          for f, p in zip(files, parts)}


def row_ids(base: int, lines: np.ndarray) -> np.ndarray:
  """The row split's key of each row: (file offset + line number) mod 2**64, uint64.
  Partitioner hashes it with splitmix64, as it does synthetic row ids: a row's split
  depends on the seed, its file and its line only, not on its content (each occurrence
  of a duplicate row is placed on its own) nor on how Beam divides the file."""
  with np.errstate(over="ignore"):
    return np.uint64(base) + np.asarray(lines, dtype=np.uint64)


def sha256_int(key: bytes) -> int:
  """Stock ExampleGen's hash of a partition key: all 256 bits of sha256."""
  return int.from_bytes(hashlib.sha256(key).digest(), "big")


def splitmix64(ids: np.ndarray) -> np.ndarray:
  """The splitmix64 finalizer of each id, as uint64 (wrapping arithmetic)."""
  with np.errstate(over="ignore"):
    z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) & _MASK64


@dataclasses.dataclass(frozen=True)
class OutputSplits:
  """Split names and hash buckets in stock order, and the partition feature (or None).

  Built from stock output_config by output_splits.resolve, or from the ratio shorthand
  by ``shorthand_splits`` (this module imports no TFX, so Beam workers do not either).
  """
  names: Tuple[str, ...]
  buckets: Tuple[int, ...]
  partition_feature: Optional[str] = None
  # Without a partition feature: True splits CSV rows by position (the shorthand's
  # default, file_bases / row_ids), False hashes each row's stock Example (stock
  # output_config, as stock ExampleGen).
  by_row: bool = False

  @property
  def pairs(self) -> Tuple[Tuple[str, int], ...]:
    return tuple(zip(self.names, self.buckets))


def shorthand_splits(split_ratios: Mapping[str, int],
                     split_key: Optional[str] = None) -> OutputSplits:
  """The ratio shorthand: splits in sorted name order, split_key as partition feature."""
  names = tuple(sorted(split_ratios))
  return OutputSplits(names, tuple(int(split_ratios[n]) for n in names), split_key or None,
                      by_row=not split_key)


SplitBuckets = Union[Mapping[str, int], Sequence[Tuple[str, int]]]


class Partitioner:
  """Maps partition keys to (split index, shard index) for fixed splits and shard count.

  ``splits`` is a sequence of (name, hash buckets) in stock output_config order, or a
  dict of ratios (the shorthand), whose splits are taken in sorted name order.
  """

  def __init__(self, splits: SplitBuckets, num_shards: int):
    pairs = (sorted(splits.items()) if isinstance(splits, Mapping) else list(splits))
    self.split_names: Tuple[str, ...] = tuple(name for name, _ in pairs)
    self.boundaries = np.cumsum([buckets for _, buckets in pairs])
    self.total = int(self.boundaries[-1])
    self.num_shards = num_shards

  def assign(self, hashes: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(split index, shard index) arrays for uint64 ``hashes`` of row ids."""
    total = np.uint64(self.total)
    bucket = hashes % total
    split = np.searchsorted(self.boundaries, bucket.astype(np.int64), side="right")
    shard = (hashes // total) % np.uint64(self.num_shards)
    return split.astype(np.int64), shard.astype(np.int64)

  def assign_keys(self, keys: Union[np.ndarray, Sequence[bytes]]
                  ) -> Tuple[np.ndarray, np.ndarray]:
    """(split index, shard index) of row ids (splitmix64) or bytes keys (sha256)."""
    if isinstance(keys, np.ndarray):
      return self.assign(hash_keys(keys))
    total, shards = self.total, self.num_shards
    buckets = np.empty(len(keys), dtype=np.int64)
    shard = np.empty(len(keys), dtype=np.int64)
    for i, key in enumerate(keys):
      rest, buckets[i] = divmod(sha256_int(key), total)
      shard[i] = rest % shards
    split = np.searchsorted(self.boundaries, buckets, side="right")
    return split.astype(np.int64), shard

  def split_of(self, key: Union[int, bytes]) -> str:
    """The split of a single key; for tests and debugging."""
    keys = np.array([key], dtype=np.int64) if isinstance(key, int) else [key]
    split, _ = self.assign_keys(keys)
    return self.split_names[int(split[0])]

  def all_shard_keys(self) -> List[ShardKey]:
    return [(s, i) for s in self.split_names for i in range(self.num_shards)]

  def cells(self, keys: Union[np.ndarray, Sequence[bytes]]
            ) -> Iterator[Tuple[ShardKey, np.ndarray]]:
    """(split, shard) and the positions of its rows, ascending, for each (split, shard)
    that has rows, in (split, shard) order."""
    split, shard = self.assign_keys(keys)
    cell = split * self.num_shards + shard
    order = np.argsort(cell, kind="stable")
    cells, starts = np.unique(cell[order], return_index=True)
    ends = list(starts[1:]) + [len(order)]
    for c, start, end in zip(cells.tolist(), starts.tolist(), ends):
      yield ((self.split_names[c // self.num_shards], c % self.num_shards),
             order[start:end])

  def partition(self, batch: RowBatch) -> Iterator[Tuple[ShardKey, RowBatch]]:
    """Splits one batch into sub-batches, one per (split, shard) that has rows."""
    for key, index in self.cells(batch.keys):
      yield key, batch.take(index)


@beam.ptransform_fn
def PartitionAndShard(batches: beam.PCollection, splits: SplitBuckets,
                      num_shards: int) -> beam.PCollection:
  """RowBatch -> ((split, shard), RowBatch) with the rows of that split and shard."""
  partitioner = Partitioner(splits, num_shards)
  return batches | "Partition" >> beam.FlatMap(partitioner.partition)
