"""tf.data input from PartitionedExampleGen's gzip TFRecords.

Batches serialized records before parsing (one `parse_example` per batch), parses in
parallel with AUTOTUNE, prefetches, and shards by FILE for multi-worker input.
"""
import dataclasses
from typing import Sequence

import tensorflow as tf

from tfx_parallel.components.common.splits import split_files


@dataclasses.dataclass(frozen=True)
class InputSpec:
  """Where the examples are and which features to read."""
  examples_uri: str
  feature_keys: Sequence[str]
  label_key: str
  num_features_padded: int  # >= len(feature_keys); extra columns are zeros.


def parse_batch(serialized, spec: InputSpec):
  """Parses a batch of serialized tf.Example into (x [B, F_padded], y [B, 1])."""
  features = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
              for k in spec.feature_keys}
  features[spec.label_key] = tf.io.FixedLenFeature([], tf.float32, default_value=0.0)
  parsed = tf.io.parse_example(serialized, features)
  x = tf.stack([parsed[k] for k in spec.feature_keys], axis=1)
  pad = spec.num_features_padded - len(spec.feature_keys)
  if pad:
    x = tf.pad(x, [[0, 0], [0, pad]])
  return x, tf.expand_dims(parsed[spec.label_key], 1)


def make_dataset(spec: InputSpec, split: str, batch_size: int, *, shuffle: bool,
                 seed: int = 0, repeat: bool = False, shuffle_buffer: int = 10_000,
                 num_shards: int = 1, shard_index: int = 0,
                 drop_remainder: bool = True) -> tf.data.Dataset:
  """A deterministic dataset of parsed (x, y) batches.

  With `num_shards` > 1 each input pipeline reads only its own files (FILE sharding,
  which is why ExampleGen writes a multiple of the worker count).
  """
  files = split_files(spec.examples_uri, split)
  if num_shards > 1:
    if len(files) < num_shards or len(files) % num_shards:
      raise ValueError(
          f"split '{split}' has {len(files)} files, which cannot be sharded by FILE "
          f"over {num_shards} workers; set example_gen.num_workers={num_shards}")
    files = files[shard_index::num_shards]
  ds = tf.data.Dataset.from_tensor_slices(files)
  ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                     cycle_length=min(4, len(files)), block_length=64,
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if shuffle:
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
  if repeat:
    ds = ds.repeat()
  ds = ds.batch(batch_size, drop_remainder=drop_remainder)
  ds = ds.map(lambda s: parse_batch(s, spec), num_parallel_calls=tf.data.AUTOTUNE,
              deterministic=True)
  return ds.prefetch(tf.data.AUTOTUNE)
