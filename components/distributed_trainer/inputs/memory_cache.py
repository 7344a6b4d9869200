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
* **Batches** (:func:`dataset`): the rows are shuffled once (seeded), then held in
  blocks of ``k`` = :func:`block_rows` rows (batch // 32, at most ``BLOCK_ROWS``: 16 at
  batch 512; 1 below batch 64). Epoch ``e`` visits every block, so every example, once,
  in the seeded order ``stateless_shuffle(range(blocks), seed=(seed, e))``; batches run
  across epoch boundaries, as the streamed path's (shuffle, repeat, batch) do. So every
  batch is drawn from at least 32 random blocks and each epoch has a new order, but the
  rows of one block stay together for the whole run. In exchange a chunk of
  ``CHUNK_ROWS`` rows is gathered as whole blocks (contiguous copies; a row-by-row
  reshuffle costs ~3x more, ~5-10% of a 0.4 ms step on 2 cores, measured), all in the
  thread that asks for the batch: per batch this costs about what slicing
  pre-materialised batches costs. The order depends only on (seed, rows, batch size):
  reruns are identical, and a resume at step k starts at exactly the batch an
  uninterrupted run takes there (``skip_batches``; no batch before it is gathered).
  Memory: the shuffled copy (the decoded size; the parsed columns can be freed once it
  is made) plus one chunk.

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
CHUNK_ROWS = 65_536  # Rows gathered at once when serving batches.
BLOCK_ROWS = 16     # Most rows per shuffle block (block_rows).
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
    ds = ds.batch(LOAD_CHUNK)
    parse = pre.parse_batch
    if skip_missing_labels:  # Per chunk, not per example (Preprocessor.labelled).
      parse = lambda chunk: pre.parse_batch(pre.labelled(chunk))  # pylint: disable=unnecessary-lambda-assignment
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(2)
    parts = list(ds)
    if not parts:
      raise ValueError(f"no training examples to cache in {files[:3]}")
    features: Dict[str, tf.Tensor] = {
        name: tf.concat([p[0][name] for p in parts], 0) for name in parts[0][0]}
    labels = tf.concat([p[1] for p in parts], 0)
  return Columns(features, labels, int(labels.shape[0]), time.perf_counter() - start)


def block_rows(batch_size: int) -> int:
  """Rows per shuffle block for ``batch_size``: ``batch_size // 32``, at most
  ``BLOCK_ROWS``, at least 1 (then the per-epoch order is row by row): every batch
  draws at least 32 blocks."""
  return max(1, min(BLOCK_ROWS, int(batch_size) // 32))


def dataset(columns: Columns, batch_size: int, *, seed: int = 0, skip_batches: int = 0):
  """An endless, deterministic dataset of (inputs, labels) batches from ``columns``
  (see the module docstring).

  The rows are put in a seeded random order once, then held as blocks of
  :func:`block_rows` rows (the last one padded). Epoch ``e`` visits the blocks in the
  seeded order ``stateless_shuffle(range(blocks), seed=(seed, e))``; a chunk of up to
  ``CHUNK_ROWS`` rows is gathered with one op per column (whole blocks: contiguous
  copies, not row-by-row random reads), the padding dropped, and the row stream cut into
  batches that run across chunk and epoch boundaries.

  Everything runs in the thread that asks for the next batch: no parallel map, no
  prefetch thread, no autotuning. On a few cores, background input threads compete with
  the training step for the same cores and cost it more than they hide; here the input
  work beyond slicing a batch is one gather per column per chunk (~0.7 ms for 128
  batches of 512 on 2 cores) and one block permutation per epoch.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  n, batch_size = columns.rows, int(batch_size)
  k = block_rows(batch_size)
  blocks = -(-n // k)
  pad = blocks * k - n  # padding rows in the last block
  first_epoch, offset = divmod(int(skip_batches) * batch_size, n)
  per_chunk = max(1, CHUNK_ROWS // k)  # blocks per gather
  with tf.device("/CPU:0"):
    order = tf.random.experimental.stateless_shuffle(
        tf.range(n, dtype=tf.int64), seed=tf.constant([seed, -1], tf.int64))
    store = []  # Per feature, then the labels: [blocks, k, ...].
    for t in list(columns.features.values()) + [columns.labels]:
      shape = t.shape[1:].as_list()
      rows = tf.gather(t, order)
      if pad:
        rows = tf.concat([rows, tf.zeros([pad] + shape, t.dtype)], 0)
      store.append(tf.reshape(rows, [blocks, k] + shape))
  names = list(columns.features)

  def block_order(epoch):
    return tf.random.experimental.stateless_shuffle(
        tf.range(blocks, dtype=tf.int32), seed=tf.stack([tf.constant(seed, tf.int64), epoch]))

  def gather(block_ids):
    out = [tf.reshape(tf.gather(b, block_ids), [-1] + b.shape[2:].as_list()) for b in store]
    if pad:  # Drop the last block's padding rows when the chunk holds that block.
      last = tf.equal(block_ids, blocks - 1)
      real = tf.reshape(tf.logical_or(tf.logical_not(last)[:, None],
                                      tf.range(k)[None, :] < k - pad), [-1])
      out = tf.cond(tf.reduce_any(last), lambda: [tf.boolean_mask(t, real) for t in out],
                    lambda: list(out))
    return dict(zip(names, out[:-1])), out[-1]

  def resume_point(first):
    """(index in ``first`` of the block holding row ``offset`` of the epoch, rows of
    that block to drop)."""
    sizes = tf.where(tf.equal(first, blocks - 1), k - pad, k)
    ends = tf.cumsum(sizes)
    at = tf.searchsorted(ends, tf.constant([offset], ends.dtype), side="right")[0]
    return at, offset - (ends[at] - sizes[at])

  with tf.device("/CPU:0"):
    first = block_order(tf.constant(first_epoch, tf.int64))
    at, drop = (int(v) for v in resume_point(first))
    head = tf.data.Dataset.from_tensors(first[at:at + per_chunk]).map(gather)
    if drop:  # A resume inside a block: the first chunk starts ``drop`` rows in.
      head = head.map(lambda x, y: tf.nest.map_structure(lambda t: t[drop:], (x, y)))
    rest = tf.data.Dataset.from_tensors(first[at + per_chunk:]).concatenate(
        tf.data.Dataset.counter(first_epoch + 1).map(block_order))
    ds = head.concatenate(rest.rebatch(per_chunk).map(gather))
    ds = ds.rebatch(batch_size, drop_remainder=True)
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
  options.autotune.enabled = False  # Nothing to tune: no parallelism, no buffers.
  return ds.with_options(options)
