"""Reading written shards back, record by record, with every check a reader makes.

``iter_records`` walks a gzip TFRecord file and checks both masked CRC32Cs of every record
(of its length header and of its data); ``read_rows`` also parses each record as a
``tf.train.Example`` and returns it as a plain dict. ``verify_output`` runs both over an
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


def example_to_row(serialized: bytes, where: str = "") -> Row:
  """A serialized tf.train.Example as {feature: values}; raises CorruptRecordError."""
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf.message import DecodeError  # pylint: disable=g-import-not-at-top
  example = example_pb2.Example()
  try:
    example.ParseFromString(serialized)
  except DecodeError as e:
    raise CorruptRecordError(f"{where}: does not parse as tf.train.Example ({e})") from e
  row = {}
  for key, feature in example.features.feature.items():
    kind = feature.WhichOneof("kind")
    row[key] = tuple(getattr(feature, kind).value) if kind else ()
  return row


def read_rows(path: str) -> List[Row]:
  """Every Example of one shard file as a row dict, every record checked."""
  return [example_to_row(data, f"{path}: record {i}")
          for i, data in enumerate(iter_records(path))]


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
    found[split] = sum(len(read_rows(path)) for path in split_files(root, split))
    if found[split] != row_counts.get(split, 0):
      raise CorruptRecordError(
          f"{write.split_dir(root, split)}: read back {found[split]} rows, but the ingest "
          f"wrote {row_counts.get(split, 0)}")
  return found
