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
  bit-cast into one [rows, words] block of int32 words; ``CHUNK_ROWS`` rows of whole
  batches are gathered at once, then served by slicing, all in the thread that asks for
  the batch: per batch this costs about what slicing pre-materialised batches costs.
  The order depends only on (seed, rows): reruns are identical, and a resume at step k
  starts at exactly the batch an uninterrupted run takes there (``skip_batches``; no
  batch before it is gathered). Memory: the packed block (the decoded size) plus one
  chunk.

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


_WORD = 4  # Bytes per word of the packed block.


def _words(t):
  """A [rows, ...] column of a 4- or 8-byte dtype as [rows, words] int32 (no copy of the
  values' bits: float32 1.5 keeps its exact bit pattern), else None."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not (t.dtype.is_floating or t.dtype.is_integer) or t.dtype.size not in (4, 8):
    return None
  flat = tf.reshape(t, [int(t.shape[0]), -1])
  if t.dtype != tf.int32:
    flat = tf.bitcast(flat, tf.int32)  # [rows, k] (4 bytes) or [rows, k, 2] (8 bytes)
  return tf.reshape(flat, [int(t.shape[0]), -1])


def _packed(columns: Columns):
  """(block, others, where): every column of a 4- or 8-byte dtype bit-cast to int32 words
  and concatenated into one [rows, words] ``block`` (one gather per chunk for all of
  them), ``others`` the columns of any other dtype (one gather each), and for every
  column (the labels under ``None``) where it lives: ("block", start, words, dtype,
  shape) or ("other", index, None, dtype, shape)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  named = list(columns.features.items()) + [(None, columns.labels)]
  parts, others, where, start = [], [], {}, 0
  for name, t in named:
    shape = t.shape[1:].as_list()
    w = _words(t)
    if w is None:
      where[name] = ("other", len(others), None, t.dtype, shape)
      others.append(t)
      continue
    where[name] = ("block", start, int(w.shape[1]), t.dtype, shape)
    start += int(w.shape[1])
    parts.append(w)
  block = tf.concat(parts, 1) if len(parts) > 1 else (parts[0] if parts else None)
  return block, others, where


def dataset(columns: Columns, batch_size: int, *, seed: int = 0, skip_batches: int = 0):
  """An endless, deterministic dataset of (inputs, labels) batches from ``columns``
  (see the module docstring).

  The per-epoch permutations are cut into chunks of whole batches (``CHUNK_ROWS``); a
  chunk is gathered with one op (the bit-cast word block of :func:`_packed`), split into
  columns of [batches, batch, ...], then served a batch at a time by slicing.

  Everything runs in the thread that asks for the next batch: no parallel map, no
  prefetch thread, no autotuning. On a few cores, background input threads compete with
  the training step for the same cores and cost it more (measured ~10% of a 0.4 ms
  step) than they hide; here the only input work beyond slicing is one gather per chunk
  (~1 ms per 128 batches of 512) and one permutation per epoch.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  n, batch_size = columns.rows, int(batch_size)
  first_epoch, offset = divmod(int(skip_batches) * batch_size, n)
  per_chunk = max(1, CHUNK_ROWS // batch_size)
  index_dtype = tf.int32 if n < 2**31 else tf.int64
  with tf.device("/CPU:0"):
    block, others, where = _packed(columns)
  names = list(columns.features)

  def permutation(epoch):
    return tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=index_dtype), seed=tf.stack([tf.constant(seed, tf.int64), epoch]))

  def gather(index):
    lead = [per_chunk, batch_size]  # Static shapes: [chunk, batch, ...].
    rows = None if block is None else tf.gather(block, index)

    def column(name):
      kind, at, words, dtype, shape = where[name]
      if kind == "other":
        return tf.reshape(tf.gather(others[at], index), lead + shape)
      w = tf.reshape(rows[:, at:at + words], lead + [-1])
      if dtype == tf.int32:
        return tf.reshape(w, lead + shape)
      if dtype.size == 8:
        w = tf.reshape(w, lead + [-1, 2])
      return tf.reshape(tf.bitcast(w, dtype), lead + shape)
    return {name: column(name) for name in names}, column(None)

  with tf.device("/CPU:0"):
    head = tf.data.Dataset.from_tensors(tf.constant(first_epoch, tf.int64)).map(
        lambda e: permutation(e)[offset:])
    rest = tf.data.Dataset.counter(first_epoch + 1).map(permutation)
    chunks = head.concatenate(rest).rebatch(per_chunk * batch_size, drop_remainder=True)
    ds = chunks.map(gather).flat_map(lambda x, y: tf.data.Dataset.from_tensor_slices((x, y)))
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
  options.autotune.enabled = False  # Nothing to tune: no parallelism, no buffers.
  return ds.with_options(options)
