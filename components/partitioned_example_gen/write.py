"""Writing the shards, and the all-or-nothing commit of the output directory.

Layout: ``Split-<name>/data_tfrecord-00000-of-0000N.gz``, exactly ``num_shards`` files per
split. Every (split, shard) is written, empty or not, so the file count never depends on
the data. Within a shard, batches keep their source order (sorted by sort key), so the
same input gives byte-identical files on every runner.

File format: gzip-compressed TFRecord of serialized tf.train.Example. Each batch is
framed as TFRecords and gzip-compressed in the parallel encode stage, and a shard file is
the concatenation of its batches' gzip members (RFC 1952 allows a gzip file to be a
series of members; TensorFlow, Beam's ReadFromTFRecord, tfx_bsl, Python's gzip and zcat
all read it as one stream). The encode stage stages chunks in part files and the shuffle
carries only references to them, so memory does not grow with the data; each shard's
writer copies its chunks, in source order, into the shard file.

I/O goes through Beam's ``FileSystems`` (local, gs://, hdfs://, s3:// ...), so the Beam
workers never import TensorFlow. The pipeline writes under a staging directory inside the
artifact URI; files move into ``Split-*`` only after the pipeline succeeded, and the
staging directory is removed whatever happens. A failed run leaves no ``Split-*``.
"""
import contextlib
import dataclasses
import gzip
import json
import posixpath
import struct
import uuid
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindows

from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen.partition import Partitioner
from tfx_parallel.components.partitioned_example_gen.partition import ShardKey
from tfx_parallel.components.partitioned_example_gen.partition import SplitBuckets
from tfx_parallel.components.partitioned_example_gen.rows import EncodedBatch
from tfx_parallel.components.partitioned_example_gen.rows import ExampleEncoder
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch
from tfx_parallel.components.partitioned_example_gen.rows import SortKey

try:
  from google_crc32c import value as _crc32c  # C implementation, installed with Beam.
except ImportError:  # pragma: no cover
  from apache_beam.io.tfrecordio import _default_crc32c_fn as _crc32c  # pylint: disable=g-import-not-at-top

METRICS_NAMESPACE = "PartitionedExampleGen"
SUMMARY_FILE = "summary.json"
# zlib level 1: 3.5x faster than TensorFlow's default level 6 on float features, for
# files about 17% larger.
GZIP_LEVEL = 1
PARTS_DIR = "_parts"
PART_BUFFER_BYTES = 32 << 20
_ROWS, _SKIPPED = "rows", "skipped"


def join(*parts: str) -> str:
  """Joins path parts with "/" (works for local paths and URLs alike)."""
  return FileSystems.join(*parts) if "://" in parts[0] else posixpath.join(*parts)


def split_dir(root: str, split: str) -> str:
  return join(root, f"Split-{split}")


def shard_file_name(shard: int, num_shards: int) -> str:
  return f"{keys.TFRECORD_PREFIX}-{shard:05d}-of-{num_shards:05d}.gz"


class GzipChunk(NamedTuple):
  """One batch of Examples as a gzip member of framed TFRecords."""
  sort_key: SortKey
  data: bytes
  num_rows: int


def _masked_crc32c(data: bytes) -> int:
  crc = _crc32c(data)
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_PACK_Q, _PACK_I = struct.Struct("<Q").pack, struct.Struct("<I").pack


def _length_header(length: int) -> bytes:
  encoded = _PACK_Q(length)
  return encoded + _PACK_I(_masked_crc32c(encoded))


def frame_tfrecords(encoded: EncodedBatch) -> bytes:
  """TFRecord framing of each record: length, masked crc32c of length, data, masked
  crc32c of data. Vectorized when every record has the same length (complete numeric
  rows), where the length header is one constant."""
  n = encoded.num_rows
  if n == 0:
    return b""
  data = encoded.data
  ends = encoded.ends.tolist()
  starts = [0] + ends[:-1]
  crcs = np.fromiter((_crc32c(data[a:b]) for a, b in zip(starts, ends)), dtype=np.uint64,
                     count=n)
  masked = ((((crcs >> np.uint64(15)) | (crcs << np.uint64(17))) + np.uint64(0xA282EAD8))
            & np.uint64(0xFFFFFFFF)).astype("<u4")
  lengths = np.diff(encoded.ends, prepend=0)
  length = ends[0]
  # The fast path needs every record to be exactly ``length`` bytes: test each one. (A
  # test of the total alone, ends[-1] == length * n, also holds for 15, 14 and 16 bytes.)
  if bool((lengths == length).all()):
    out = np.empty((n, length + 16), dtype=np.uint8)
    out[:, :12] = np.frombuffer(_length_header(length), dtype=np.uint8)
    out[:, 12:12 + length] = np.frombuffer(data, dtype=np.uint8).reshape(n, length)
    out[:, 12 + length:] = masked.view(np.uint8).reshape(n, 4)
    return out.tobytes()
  headers: Dict[int, bytes] = {}
  parts = []
  for a, b, crc in zip(starts, ends, masked.tolist()):
    header = headers.get(b - a)
    if header is None:
      header = headers[b - a] = _length_header(b - a)
    parts += (header, data[a:b], _PACK_I(crc))
  return b"".join(parts)


def framed_ends(encoded: EncodedBatch) -> np.ndarray:
  """End offsets of each record in ``frame_tfrecords(encoded)``: 16 framing bytes each."""
  return encoded.ends + 16 * np.arange(1, encoded.num_rows + 1, dtype=np.int64)


def gather_records(data: bytes, ends: np.ndarray, index: np.ndarray) -> bytes:
  """Records ``index`` (ascending positions) of ``data``, whose record i ends at
  ``ends[i]``, back to back."""
  if len(index) == len(ends):
    return data  # Every record, in order.
  lengths = np.diff(ends, prepend=0)
  if len(ends) and bool((lengths == lengths[0]).all()):
    return np.frombuffer(data, dtype=np.uint8).reshape(len(ends), -1)[index].tobytes()
  starts = (ends - lengths).tolist()
  stops = ends.tolist()
  return b"".join([data[starts[i]:stops[i]] for i in index.tolist()])


def to_gzip_chunk(encoded: EncodedBatch) -> GzipChunk:
  data = gzip.compress(frame_tfrecords(encoded), compresslevel=GZIP_LEVEL, mtime=0)
  return GzipChunk(encoded.sort_key, data, encoded.num_rows)


@dataclasses.dataclass(frozen=True)
class IngestSummary:
  """What the pipeline wrote: rows per split (all splits present), skipped rows, and
  split_stats.json's content (split_stats.merge; None before it is read)."""
  row_counts: Dict[str, int]
  skipped_rows: int = 0
  split_stats: Optional[Dict[str, Any]] = None

  @property
  def total_rows(self) -> int:
    return sum(self.row_counts.values())


# ----------------------------------------------------------------------------- Beam


def _worker_filesystems(options) -> None:
  """Gives this worker process's Beam filesystems the pipeline's options.

  The portable SDK harness does so (apache_beam/runners/worker/sdk_worker_main.py:125
  ``FileSystems.set_options``), DaskRunner's workers do not (runners/dask/): there
  Beam's S3 filesystem has no endpoint or credentials and fails ("Must provide one of
  client or options", apache_beam/io/aws/s3io.py). Setting the same options again is a
  no-op elsewhere. None: left as they are.
  """
  if options is not None:
    FileSystems.set_options(options)


@beam.ptransform_fn
def EncodeExamples(parts, encoder: ExampleEncoder):
  """((split, shard), RowBatch) -> ((split, shard), GzipChunk)."""
  return parts | "Encode" >> beam.MapTuple(
      lambda key, batch: (key, to_gzip_chunk(encoder.encode(batch))))


class _EncodeAndPartition(beam.DoFn):
  """RowBatch -> ((split, shard), GzipChunk) for each (split, shard) that has rows.

  The whole batch is encoded and framed once, then its records are dealt out to their
  (split, shard): the same bytes as partitioning the rows first and encoding each part
  (a record's bytes depend only on its row), for one encoder call per batch instead of
  one per part (a mixed-type batch of 1,000 rows went out in up to 2 x num_shards parts,
  each paying the encoder's fixed cost of some 40 numpy calls).
  """

  def __init__(self, encoder: ExampleEncoder, partitioner: Partitioner):
    self._encoder = encoder
    self._partitioner = partitioner

  def process(self, batch: RowBatch) -> Iterator[Tuple[ShardKey, GzipChunk]]:
    encoded = self._encoder.encode(batch)
    framed, ends = frame_tfrecords(encoded), framed_ends(encoded)
    for key, index in self._partitioner.cells(batch.keys):
      data = gzip.compress(gather_records(framed, ends, index), compresslevel=GZIP_LEVEL,
                           mtime=0)
      yield key, GzipChunk(batch.sort_key, data, len(index))


@beam.ptransform_fn
def EncodeAndPartition(batches, encoder: ExampleEncoder, splits: SplitBuckets,
                       num_shards: int):
  """RowBatch -> ((split, shard), GzipChunk): partition.PartitionAndShard followed by
  EncodeExamples, with the same output, in one step that encodes each batch once."""
  return batches | "EncodeAndPartition" >> beam.ParDo(
      _EncodeAndPartition(encoder, Partitioner(splits, num_shards)))


class ChunkRef(NamedTuple):
  """Where a staged GzipChunk is: bytes [offset, offset + length) of a part file."""
  sort_key: SortKey
  path: str
  offset: int
  length: int
  num_rows: int


class _StageChunks(beam.DoFn):
  """((split, shard), GzipChunk) -> part files; emits ((split, shard), ChunkRef).

  Chunks are buffered per bundle and flushed to one part file every ``buffer_bytes``, so
  the shuffle in front of the shard writers carries small ChunkRefs instead of data, and
  memory stays flat whatever the number of rows. Part files live under the staging dir.
  """

  def __init__(self, parts_dir: str, buffer_bytes: int, options=None):
    self._parts_dir = parts_dir
    self._buffer_bytes = buffer_bytes
    self._options = options

  def setup(self):
    _worker_filesystems(self._options)

  def start_bundle(self):
    self._pending: List[Tuple[ShardKey, GzipChunk]] = []
    self._size = 0

  def process(self, element):
    self._pending.append(element)
    self._size += len(element[1].data)
    if self._size >= self._buffer_bytes:
      yield from self._flush()

  def finish_bundle(self):
    for key_ref in self._flush():
      yield GlobalWindows.windowed_value(key_ref)

  def _flush(self) -> List[Tuple[ShardKey, ChunkRef]]:
    if not self._pending:
      return []
    path = join(self._parts_dir, f"{uuid.uuid4().hex}.part")  # Unique per attempt.
    refs, offset = [], 0
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
      for key, chunk in self._pending:
        f.write(chunk.data)
        refs.append((key, ChunkRef(chunk.sort_key, path, offset, len(chunk.data),
                                   chunk.num_rows)))
        offset += len(chunk.data)
    self._pending, self._size = [], 0
    return refs


class _WriteShard(beam.DoFn):
  """((split, shard), [ChunkRef or None]) -> one shard file, its chunks in sort-key
  order copied from the part files; emits (split, rows)."""

  def __init__(self, root: str, num_shards: int, options=None):
    self._root = root
    self._num_shards = num_shards
    self._options = options

  def setup(self):
    _worker_filesystems(self._options)

  def process(self, element) -> Iterator[Tuple[str, int]]:
    (split, shard), refs = element
    refs: List[ChunkRef] = sorted((r for r in refs if r is not None), key=lambda r: r.sort_key)
    path = join(split_dir(self._root, split), shard_file_name(shard, self._num_shards))
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as out:
      if not refs:  # A valid, empty gzip stream.
        out.write(gzip.compress(b"", mtime=0))
      source_path, source = None, None
      try:
        for ref in refs:
          if ref.path != source_path:
            if source is not None:
              source.close()
            source_path = ref.path
            source = FileSystems.open(ref.path, compression_type=CompressionTypes.UNCOMPRESSED)
          source.seek(ref.offset)
          out.write(source.read(ref.length))
      finally:
        if source is not None:
          source.close()
    rows = sum(r.num_rows for r in refs)
    beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"rows_written_{split}").inc(rows)
    yield split, rows


@beam.ptransform_fn
def WriteShards(chunks, root: str, split_names: Sequence[str], num_shards: int,
                part_buffer_bytes: Optional[int] = None, options=None):
  """((split, shard), GzipChunk) -> files under root/Split-*; returns (split, rows).

  Chunks are staged in part files under root/_parts (removed with the staging dir); only
  their references are grouped by shard. ``part_buffer_bytes`` defaults to
  ``PART_BUFFER_BYTES``, read when the pipeline is built. ``options``: the pipeline's
  options, for the workers' filesystems (:func:`_worker_filesystems`).
  """
  if part_buffer_bytes is None:
    part_buffer_bytes = PART_BUFFER_BYTES
  every_shard = [((s, i), None) for s in split_names for i in range(num_shards)]
  placeholders = chunks.pipeline | "EveryShard" >> beam.Create(every_shard)
  refs = chunks | "StageChunks" >> beam.ParDo(
      _StageChunks(join(root, PARTS_DIR), part_buffer_bytes, options))
  return ((refs, placeholders)
          | "WithEmptyShards" >> beam.Flatten()
          | "GroupByShard" >> beam.GroupByKey()
          | "Write" >> beam.ParDo(_WriteShard(root, num_shards, options)))


def _write_summary(counts: Iterable[Tuple[str, str, int]], path: str, options=None):
  _worker_filesystems(options)
  summary = {"row_counts": {}, "skipped_rows": 0}
  for kind, split, n in counts:
    if kind == _ROWS:
      summary["row_counts"][split] = summary["row_counts"].get(split, 0) + n
    else:
      summary["skipped_rows"] += n
  with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
    f.write(json.dumps(summary, sort_keys=True).encode("utf-8"))


@beam.ptransform_fn
def WriteSummary(written, skipped: Optional[beam.PCollection], root: str, options=None):
  """Row counts per split and skipped rows -> root/summary.json, read by the driver.

  A file rather than Beam metrics, because not every runner reports metrics (DaskRunner
  does not). One GroupByKey on a constant key rather than a CombineGlobally, whose
  default value needs a side input, which DaskRunner computes inside a worker.
  """
  counts = [written | "KeyRows" >> beam.MapTuple(lambda split, n: (_ROWS, split, n))]
  if skipped is not None:
    counts.append(skipped | "KeySkipped" >> beam.Map(lambda n: (_SKIPPED, "", n)))
  return (counts
          | "AllCounts" >> beam.Flatten()
          | "OneKey" >> beam.Map(lambda count: (None, count))
          | "Collect" >> beam.GroupByKey()
          | "WriteSummary" >> beam.MapTuple(lambda _, values: _write_summary(
              values, join(root, SUMMARY_FILE), options)))


def read_summary(root: str, split_names: Iterable[str]) -> IngestSummary:
  with FileSystems.open(join(root, SUMMARY_FILE),
                        compression_type=CompressionTypes.UNCOMPRESSED) as f:
    data = json.loads(f.read().decode("utf-8"))
  counts = {s: int(data["row_counts"].get(s, 0)) for s in split_names}
  return IngestSummary(row_counts=counts, skipped_rows=int(data["skipped_rows"]))


# ----------------------------------------------------------------------------- commit


class MissingOutputError(RuntimeError):
  """The pipeline succeeded but its files are not where this process reads them."""


def check_staged(staging: str, split_names: Sequence[str], num_shards: int) -> None:
  """Raises MissingOutputError unless every shard file and summary.json are in `staging`.

  A runner whose workers run on other machines writes a local path to *their* disks:
  here the pipeline then succeeds and nothing is found. Better to fail, naming what is
  missing, than to commit (and record) an Examples artifact without files.
  """
  found = {m.path for m in FileSystems.match([join(staging, "Split-*", "*")])[0].metadata_list}
  expected = [join(split_dir(staging, split), shard_file_name(shard, num_shards))
              for split in split_names for shard in range(num_shards)]
  missing = [path for path in expected if path not in found]
  if not FileSystems.exists(join(staging, SUMMARY_FILE)):
    missing.append(join(staging, SUMMARY_FILE))
  if missing:
    raise MissingOutputError(
        f"the Beam pipeline succeeded but {len(missing)} of its {len(expected) + 1} files "
        f"are not in {staging} (e.g. {missing[0]}). If the runner's workers run on other "
        f"machines (Dataflow, Flink, Spark, a remote Dask cluster), they wrote to their own "
        f"disks: the output must be a URI they share (gs://, s3://; on Kubeflow the "
        f"entry point passes the artifact's remote URI for such runners).")


@contextlib.contextmanager
def staged_output(uri: str) -> Iterator[str]:
  """Yields a fresh staging dir inside ``uri``; on normal exit moves its Split-* files
  into ``uri``. The staging dir is removed in every case."""
  staging = join(uri, f".staging-{uuid.uuid4().hex}")
  try:
    yield staging
    commit(staging, uri)
  finally:
    if FileSystems.exists(staging):
      FileSystems.delete([staging])


def commit(staging: str, uri: str):
  """Moves staging/Split-*/* to uri/Split-*/; on failure removes what it moved."""
  sources = sorted(m.path for m in FileSystems.match([join(staging, "Split-*", "*")])[0]
                   .metadata_list)
  if not sources:
    raise MissingOutputError(f"nothing to commit: {staging} has no Split-*/ files")
  split_dirs = sorted({posixpath.dirname(p) for p in sources})
  created = []
  try:
    for directory in split_dirs:
      target = join(uri, posixpath.basename(directory))
      if FileSystems.exists(target):
        raise FileExistsError(f"{target} already exists; refusing to overwrite it")
      FileSystems.mkdirs(target)
      created.append(target)
    FileSystems.rename(
        sources, [join(uri, posixpath.basename(posixpath.dirname(p)), posixpath.basename(p))
                  for p in sources])
  except Exception:
    if created:
      FileSystems.delete(created)
    raise
