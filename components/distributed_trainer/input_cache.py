"""The in-memory cache of the training split (config ``cache``).

Most tabular training data fits in memory, and once it is there, reading, un-gzipping and
parsing every tf.Example again each epoch is the input pipeline's whole cost (about 3 ms
per batch of 512 on two cores, against a 0.5 ms step for a small MLP). With the cache:

* **Choice** (:func:`choose`): "memory" or "none" as configured; "auto" caches when the
  decoded size (rows x :func:`example_bytes`, the model's inputs and the label as the
  preprocessor returns them) is under ``RAM_FRACTION`` of the memory available
  (:func:`available_memory`; loading briefly needs about twice the decoded size).
* **Load** (:func:`load`): this worker's files (and DATA shard) are read and parsed
  ONCE, in chunks of ``LOAD_CHUNK`` examples in parallel, through the same
  :class:`preprocess.Preprocessor` as the streamed path and the serving signature
  (lookups and normalisation included), into one column per feature.
* **Batches** (:func:`dataset`): epoch ``e`` visits every cached example once in the
  seeded permutation ``stateless_shuffle(range(n), seed=(seed, e))``; batches run across
  epoch boundaries, as the streamed path's (shuffle, repeat, batch) do. Columns are
  packed by dtype into a few [rows, width] blocks, and ``CHUNK_ROWS`` rows of whole
  batches are gathered at once, ahead of use, then served by slicing: per batch this
  costs about what slicing pre-materialised batches costs. The order depends only on
  (seed, rows): reruns are identical, and a resume at step k starts at exactly the
  batch an uninterrupted run takes there (``skip_batches``; no batch before it is
  gathered). Memory: the packed blocks (the decoded size) plus a few chunks.

The streamed path shuffles within a ``shuffle_buffer`` window instead, so the two paths
visit the same examples in different orders.
"""
import dataclasses
import os
import time
from typing import Dict, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.distributed_trainer import model_spec as ms

MEMORY, NONE, AUTO = "memory", "none", "auto"
RAM_FRACTION = 0.25  # "auto" caches when the decoded split is under this share of free RAM.
LOAD_CHUNK = 8192    # Examples parsed per parse_example call while loading.
CHUNK_ROWS = 65_536  # Rows gathered at once when serving batches (whole batches).
_DTYPE_BYTES = {ms.FLOAT32: 4, ms.INT64: 8, ms.STRING: 8}  # A string arrives as an int64 id.


@dataclasses.dataclass(frozen=True)
class CacheChoice:
  """What the trainer does with its training split, and why (into history.json)."""
  requested: str        # config ``cache``
  mode: str             # MEMORY | NONE
  estimated_bytes: int  # decoded size of this worker's rows
  budget_bytes: Optional[int]  # RAM_FRACTION of the available memory (None: unknown)
  reason: str

  def as_record(self) -> dict:
    return dataclasses.asdict(self)


def example_bytes(spec: ms.ModelSpec) -> int:
  """Bytes of one decoded example: every model input and the label, as parsed."""
  def size(dtype: str, shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
      n *= int(d)
    return _DTYPE_BYTES[dtype] * n
  label = 8 if spec.task == ms.MULTICLASS else 4
  return sum(size(f.dtype, f.shape) for f in spec.features) + label


def available_memory(meminfo: str = "/proc/meminfo") -> Optional[int]:
  """Bytes of memory available to a new allocation (Linux ``MemAvailable``), else the
  free physical pages, else None."""
  try:
    with open(meminfo) as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  try:
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
  except (ValueError, OSError, AttributeError):
    return None


def _mb(n: float) -> str:
  return f"{n / 2**20:,.1f} MB"


def choose(requested: str, rows: int, per_example: int,
           available: Optional[int]) -> CacheChoice:
  """The cache mode for ``rows`` decoded examples of ``per_example`` bytes each, with
  ``available`` bytes of memory (None: unknown, then "auto" streams)."""
  estimated = int(rows) * int(per_example)
  budget = None if available is None else int(available * RAM_FRACTION)
  if requested in (MEMORY, NONE):
    return CacheChoice(requested, requested, estimated, budget, "set in config")
  if budget is None:
    return CacheChoice(requested, NONE, estimated, budget,
                       "auto: available memory unknown, streaming from the files")
  if estimated < budget:
    return CacheChoice(requested, MEMORY, estimated, budget,
                       f"auto: {rows:,} rows decode to {_mb(estimated)}, under the budget "
                       f"{_mb(budget)} ({RAM_FRACTION:.0%} of available memory)")
  return CacheChoice(requested, NONE, estimated, budget,
                     f"auto: {rows:,} rows decode to {_mb(estimated)}, over the budget "
                     f"{_mb(budget)} ({RAM_FRACTION:.0%} of available memory); streaming "
                     f"from the files")


@dataclasses.dataclass(frozen=True)
class Columns:
  """The cached split: one tensor per model input, and the labels, ``rows`` long."""
  features: Mapping[str, "object"]
  labels: "object"
  rows: int
  load_seconds: float

  def nbytes(self) -> int:
    tensors = list(self.features.values()) + [self.labels]
    return sum(int(t.shape.num_elements()) * t.dtype.size for t in tensors)


def load(files: Sequence[str], pre, *, skip_missing_labels: bool = False,
         data_shard: Optional[Tuple[int, int]] = None) -> Columns:
  """Reads and parses ``files`` once (see the module docstring) into host memory."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  files = list(files)
  with tf.device("/CPU:0"):
    ds = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
        cycle_length=max(1, min(4, len(files))), block_length=LOAD_CHUNK,
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if data_shard is not None:
      ds = ds.shard(*data_shard)
    if skip_missing_labels:
      ds = ds.filter(pre.has_label)
    ds = ds.batch(LOAD_CHUNK).map(pre.parse_batch, num_parallel_calls=tf.data.AUTOTUNE,
                                  deterministic=True).prefetch(2)
    parts = list(ds)
    if not parts:
      raise ValueError(f"no training examples to cache in {files[:3]}")
    features: Dict[str, tf.Tensor] = {
        name: tf.concat([p[0][name] for p in parts], 0) for name in parts[0][0]}
    labels = tf.concat([p[1] for p in parts], 0)
  return Columns(features, labels, int(labels.shape[0]), time.perf_counter() - start)


def _packed(columns: Columns):
  """(blocks, where): the columns of rank 2 concatenated by dtype into [rows, width]
  blocks (one gather each instead of one per feature), and for every column (the
  labels under ``None``) its (block, start, width), or (block, None, None) for a
  column kept whole."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  named = list(columns.features.items()) + [(None, columns.labels)]
  groups: Dict[object, list] = {}
  for name, t in named:
    key = t.dtype if t.shape.rank == 2 else ("whole", name)
    groups.setdefault(key, []).append((name, t))
  blocks, where = [], {}
  for key, members in groups.items():
    if isinstance(key, tuple):
      where[members[0][0]] = (len(blocks), None, None)
      blocks.append(members[0][1])
      continue
    start = 0
    for name, t in members:
      where[name] = (len(blocks), start, int(t.shape[1]))
      start += int(t.shape[1])
    blocks.append(tf.concat([t for _, t in members], 1) if len(members) > 1 else members[0][1])
  return blocks, where


def dataset(columns: Columns, batch_size: int, *, seed: int = 0, skip_batches: int = 0):
  """An endless, deterministic dataset of (inputs, labels) batches from ``columns``
  (see the module docstring).

  The per-epoch permutations are cut into chunks of whole batches (``CHUNK_ROWS``); a
  chunk is gathered with one op per dtype (:func:`_packed`) and reshaped to [batches,
  batch, ...] ahead of use (a parallel map), then served a batch at a time by slicing.
  Gathering each batch, or each feature, on its own costs more than a small model's
  step on 2 cores.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  n, batch_size = columns.rows, int(batch_size)
  first_epoch, offset = divmod(int(skip_batches) * batch_size, n)
  per_chunk = max(1, CHUNK_ROWS // batch_size)
  index_dtype = tf.int32 if n < 2**31 else tf.int64
  with tf.device("/CPU:0"):
    blocks, where = _packed(columns)
  names = list(columns.features)

  def permutation(epoch):
    return tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=index_dtype), seed=tf.stack([tf.constant(seed, tf.int64), epoch]))

  def gather(index):
    rows = [tf.reshape(tf.gather(block, index),  # Static shapes: [chunk, batch, ...].
                       [per_chunk, batch_size] + block.shape[1:].as_list())
            for block in blocks]

    def column(name):
      b, start, width = where[name]
      return rows[b] if start is None else rows[b][:, :, start:start + width]
    return {name: column(name) for name in names}, column(None)

  with tf.device("/CPU:0"):
    head = tf.data.Dataset.from_tensors(tf.constant(first_epoch, tf.int64)).map(
        lambda e: permutation(e)[offset:])
    rest = tf.data.Dataset.counter(first_epoch + 1).map(permutation)
    chunks = head.concatenate(rest).rebatch(per_chunk * batch_size, drop_remainder=True)
    chunks = chunks.map(gather, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    ds = chunks.prefetch(1).flat_map(
        lambda x, y: tf.data.Dataset.from_tensor_slices((x, y)))
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
  return ds.with_options(options).prefetch(tf.data.AUTOTUNE)
