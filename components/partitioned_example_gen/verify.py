"""Reading written shards back, record by record, with every check a reader makes.

``iter_records`` walks a gzip TFRecord file and checks both masked CRC32Cs of every record
(of its length header and of its data); ``read_rows`` also parses every record as a
``tf.train.Example`` and returns each as a plain dict. ``verify_output`` runs both over an
ingest's whole output and compares the row counts with what the pipeline reported: it is
what ``ExampleGenConfig.verify_output`` runs before the artifact is published, and what the
round-trip tests use.
"""
import gzip
import struct
from typing import Dict, Iterator, List, Sequence, Tuple, Union

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_parallel.components.partitioned_example_gen import write

Value = Union[float, int, bytes]
Row = Dict[str, Tuple[Value, ...]]

_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")


class CorruptRecordError(ValueError):
  """A written record fails a check; the message names the file, record and byte offset."""


def iter_records(path: str) -> Iterator[bytes]:
  """The data of every TFRecord in the gzip file ``path``, after checking both CRCs."""
  with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
    with gzip.GzipFile(fileobj=raw, mode="rb") as f:
      index, offset = 0, 0
      while True:
        header = f.read(_HEADER.size)
        if not header:
          return
        where = f"{path}: record {index} at uncompressed byte {offset}"
        if len(header) < _HEADER.size:
          raise CorruptRecordError(f"{where}: truncated length header")
        length, length_crc = _HEADER.unpack(header)
        if write._masked_crc32c(header[:8]) != length_crc:  # pylint: disable=protected-access
          raise CorruptRecordError(f"{where}: length header fails its CRC")
        data = f.read(length)
        footer = f.read(_CRC.size)
        if len(data) < length or len(footer) < _CRC.size:
          raise CorruptRecordError(f"{where}: truncated record of {length} bytes")
        if write._masked_crc32c(data) != _CRC.unpack(footer)[0]:  # pylint: disable=protected-access
          raise CorruptRecordError(f"{where}: data of {length} bytes fails its CRC")
        yield data
        index += 1
        offset += _HEADER.size + length + _CRC.size


def decode(records: Sequence[bytes], where: str = ""):
  """Serialized tf.train.Examples -> an Arrow RecordBatch (a list column per feature).

  Decoded in one batch by tfx_bsl's C++ decoder, which TFX's own components use; raises
  CorruptRecordError naming the first record that does not parse.
  """
  from tfx_bsl.coders import example_coder  # pylint: disable=g-import-not-at-top
  decoder = example_coder.ExamplesToRecordBatchDecoder()
  try:
    return decoder.DecodeBatch(list(records))
  except RuntimeError as e:
    for i, record in enumerate(records):
      try:
        decoder.DecodeBatch([record])
      except RuntimeError:
        raise CorruptRecordError(f"{where}: record {i} does not parse as "
                                 f"tf.train.Example ({e})") from e
    raise


def to_rows(batch) -> List[Row]:
  """A decoded RecordBatch as {feature: values} dicts, absent features left out."""
  rows: List[Row] = [{} for _ in range(batch.num_rows)]
  for name, column in zip(batch.schema.names, batch.columns):
    offsets = column.offsets.to_numpy().tolist()
    values = column.flatten().to_numpy(zero_copy_only=False).tolist()
    valid = column.is_valid().to_numpy(zero_copy_only=False).tolist()
    for i, ok in enumerate(valid):
      if ok:
        rows[i][name] = tuple(values[offsets[i]:offsets[i + 1]])
  return rows


def read_rows(path: str) -> List[Row]:
  """Every Example of one shard file as a row dict, every record checked."""
  records = list(iter_records(path))
  return to_rows(decode(records, path)) if records else []


def count_rows(path: str) -> int:
  """The number of Examples in one shard file, every record checked (CRCs, parse)."""
  records = list(iter_records(path))
  if records:
    decode(records, path)
  return len(records)


def split_files(root: str, split: str) -> List[str]:
  return sorted(m.path for m in FileSystems.match(
      [write.join(write.split_dir(root, split), "*")])[0].metadata_list)


def verify_output(root: str, row_counts: Dict[str, int],
                  split_names: Sequence[str]) -> Dict[str, int]:
  """Re-reads every record of every split under ``root``; returns rows per split.

  Raises:
    CorruptRecordError: a record fails a CRC or does not parse, or a split holds a
      different number of rows than ``row_counts`` says was written.
  """
  found = {}
  for split in split_names:
    found[split] = sum(count_rows(path) for path in split_files(root, split))
    if found[split] != row_counts.get(split, 0):
      raise CorruptRecordError(
          f"{write.split_dir(root, split)}: read back {found[split]} rows, but the ingest "
          f"wrote {row_counts.get(split, 0)}")
  return found
