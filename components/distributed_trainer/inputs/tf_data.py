"""tf.data input from PartitionedExampleGen's gzip TFRecords.

Reads files interleaved (deterministic), shuffles serialized records with a seed, batches
them, then parses and looks up a whole batch at once (:class:`preprocess.Preprocessor`),
in parallel with AUTOTUNE, and prefetches. ``num_shards`` > 1 shards by FILE for
multi-worker input, or by DATA when the file count is not a multiple of the workers.

:func:`training_dataset` is the trainer's door: this streamed path, or the in-memory
cache of the parsed split (config ``cache``; memory_cache.py).
"""
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from tfx_parallel.components.distributed_trainer.inputs import memory_cache
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor


def shard_files(files: Sequence[str], split: str, num_shards: int, index: int
                ) -> Tuple[List[str], Optional[Tuple[int, int]]]:
  """(files this worker reads, data shard (num_shards, index) or None).

  By FILE when the file count is a multiple of ``num_shards``; otherwise (e.g. a stock
  ExampleGen's single file) every worker reads every file and keeps every
  ``num_shards``-th record from its ``index`` (DATA sharding), and says so once.
  """
  if num_shards <= 1:
    return list(files), None
  if len(files) < num_shards or len(files) % num_shards:
    message = (f"split {split!r} has {len(files)} file(s), which cannot be sharded by FILE "
               f"over {num_shards} workers; falling back to DATA sharding (every worker "
               f"reads every file and keeps 1 record in {num_shards})")
    if index == 0:
      logging.info("DistributedTrainer: %s", message)
      print(f"[trainer] {message}", flush=True)
    return list(files), (num_shards, index)
  return list(files)[index::num_shards], None


FILTER_CHUNK = 1024  # Examples checked per call when dropping those without a label.


def drop_unlabelled(ds: tf.data.Dataset, pre: Preprocessor) -> tf.data.Dataset:
  """``ds`` (serialized tf.Examples) without the examples that lack exactly one label
  value, in the same order as ``ds.filter(pre.has_label)``, checked a chunk at a time
  (Preprocessor.labelled)."""
  return ds.batch(FILTER_CHUNK).map(pre.labelled, num_parallel_calls=tf.data.AUTOTUNE,
                                    deterministic=True).unbatch()


def make_dataset(files: Sequence[str], pre: Preprocessor, batch_size: int, *, shuffle: bool,
                 seed: int = 0, repeat: bool = False, shuffle_buffer: int = 10_000,
                 drop_remainder: bool = True, skip_missing_labels: bool = False,
                 skip_batches: int = 0,
                 data_shard: Optional[Tuple[int, int]] = None) -> tf.data.Dataset:
  """A deterministic dataset of (inputs dict, labels) batches.

  ``skip_batches`` drops the first batches before parsing them (resume: the same batches
  as an uninterrupted run). ``data_shard`` (num_shards, index) keeps every num_shards-th
  record from ``index`` (DATA sharding; see :func:`shard_files`).
  """
  files = list(files)
  ds = tf.data.Dataset.from_tensor_slices(files)
  ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                     cycle_length=min(4, len(files)), block_length=64,
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if data_shard is not None:
    ds = ds.shard(*data_shard)
  if skip_missing_labels:
    ds = drop_unlabelled(ds, pre)
  if shuffle:
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  if repeat:
    ds = ds.repeat()
  ds = ds.batch(batch_size, drop_remainder=drop_remainder)
  if skip_batches:
    ds = ds.skip(skip_batches)
  ds = ds.map(pre.parse_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
  return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def training_dataset(files: Sequence[str], pre: Preprocessor, batch_size: int, *, cache: str,
                     seed: int = 0, shuffle_buffer: int = 10_000,
                     skip_missing_labels: bool = False, skip_batches: int = 0,
                     data_shard: Optional[Tuple[int, int]] = None,
                     on_load: Optional[Callable[[memory_cache.Columns], None]] = None
                     ) -> tf.data.Dataset:
  """The endless, shuffled training batches: streamed (``cache`` "none") or from the
  in-memory cache (``cache`` "memory", loaded here; ``on_load`` sees the columns)."""
  if cache == memory_cache.MEMORY:
    columns = memory_cache.load(files, pre, skip_missing_labels=skip_missing_labels,
                               data_shard=data_shard)
    if on_load is not None:
      on_load(columns)
    return memory_cache.dataset(columns, batch_size, seed=seed, skip_batches=skip_batches)
  if cache != memory_cache.NONE:
    raise ValueError(f"cache must be {memory_cache.MEMORY!r} or {memory_cache.NONE!r} here "
                     f"(resolve 'auto' with memory_cache.choose). Received: {cache!r}")
  return make_dataset(files, pre, batch_size, shuffle=True, seed=seed, repeat=True,
                      shuffle_buffer=shuffle_buffer, skip_missing_labels=skip_missing_labels,
                      skip_batches=skip_batches, data_shard=data_shard)
