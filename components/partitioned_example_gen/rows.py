"""Columnar batches of rows and their fast serialization to ``tf.train.Example``.

Every Beam element of the ingest carries a batch of rows (about a thousand), never a
single row: per-element overhead in Beam is a few microseconds, so per-row elements
would dominate the cost.

Encoding. Numeric columns ("float" and "int") become ``float_list`` features with one
float32 value; string columns become ``bytes_list`` features. A missing value (an empty
CSV cell, i.e. NaN in a numeric column or None in a string column) means the feature is
absent from that Example. The protobuf wire format of such an Example is simple enough
to write directly: for rows where every numeric feature is present and there are no
string columns, every serialized row has the same length and layout, so a whole batch is
one numpy template with the float bytes copied in column by column. Other rows are
assembled with ``bytes.join`` from precomputed per-feature prefixes. Both paths are
checked against the protobuf library in tests/test_example_gen_rows.py.
"""
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

SortKey = Tuple[str, int]


class RowBatch(NamedTuple):
  """A batch of rows in columnar form.

  Attributes:
    sort_key: (source, first row or line number); orders batches so a shard's content
      does not depend on the runner's bundle order.
    numeric: column -> float64 array; NaN means the value is missing.
    strings: column -> list of bytes, None where the value is missing.
    keys: the partition key of each row: int64 row ids (synthetic) or bytes (CSV: the
      raw line, or the split_key cell).
  """
  sort_key: SortKey
  numeric: Dict[str, np.ndarray]
  strings: Dict[str, List[Optional[bytes]]]
  keys: Union[np.ndarray, List[bytes]]

  @property
  def num_rows(self) -> int:
    return len(self.keys)

  def take(self, index: np.ndarray) -> "RowBatch":
    """The rows at positions ``index`` (int array), in that order."""
    index = np.asarray(index, dtype=np.int64)
    if isinstance(self.keys, np.ndarray):
      keys = self.keys[index]
    else:
      keys = [self.keys[i] for i in index]
    return RowBatch(
        sort_key=self.sort_key,
        numeric={k: v[index] for k, v in self.numeric.items()},
        strings={k: [v[i] for i in index] for k, v in self.strings.items()},
        keys=keys)


class EncodedBatch(NamedTuple):
  """Serialized Examples of one batch, concatenated: record i is data[ends[i-1]:ends[i]]."""
  sort_key: SortKey
  data: bytes
  ends: np.ndarray

  @property
  def num_rows(self) -> int:
    return len(self.ends)

  def records(self) -> Iterator[bytes]:
    view = memoryview(self.data)
    start = 0
    for end in self.ends.tolist():
      yield bytes(view[start:end])
      start = end


def varint(value: int) -> bytes:
  """Protobuf base-128 varint of a non-negative integer."""
  out = bytearray()
  while True:
    bits = value & 0x7F
    value >>= 7
    if value:
      out.append(bits | 0x80)
    else:
      out.append(bits)
      return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field: tag byte, varint length, payload."""
  return bytes([tag]) + varint(len(payload)) + payload


_TAG_1 = 0x0A  # field 1, length-delimited
_TAG_2 = 0x12  # field 2, length-delimited
# Feature{float_list(2): FloatList{value(1), packed: 4 bytes}}
_FLOAT_FEATURE_HEAD = bytes([_TAG_2, 6, _TAG_1, 4])


def _float_entry_prefix(key: str) -> bytes:
  """Map entry of Features.feature for a one-float feature, minus the 4 float bytes."""
  key_field = _field(_TAG_1, key.encode("utf-8"))
  entry_len = len(key_field) + 2 + len(_FLOAT_FEATURE_HEAD) + 4
  return (bytes([_TAG_1]) + varint(entry_len) + key_field +
          bytes([_TAG_2, len(_FLOAT_FEATURE_HEAD) + 4]) + _FLOAT_FEATURE_HEAD)


def _bytes_entry(key_field: bytes, value: bytes) -> bytes:
  """Map entry of Features.feature for a one-value bytes_list feature."""
  feature = _field(_TAG_1, _field(_TAG_1, value))  # Feature{bytes_list(1): {value(1)}}
  return _field(_TAG_1, key_field + _field(_TAG_2, feature))


class ExampleEncoder:
  """Serializes RowBatches to tf.train.Example bytes (see the module docstring)."""

  def __init__(self, numeric_keys: Sequence[str], string_keys: Sequence[str] = ()):
    self.numeric_keys = tuple(numeric_keys)
    self.string_keys = tuple(string_keys)
    self._prefixes = [_float_entry_prefix(k) for k in self.numeric_keys]
    self._string_key_fields = [_field(_TAG_1, k.encode("utf-8")) for k in self.string_keys]
    # Fixed layout of a row with every numeric feature present.
    features_len = sum(len(p) + 4 for p in self._prefixes)
    head = bytes([_TAG_1]) + varint(features_len)
    template = bytearray(head)
    self._offsets = []
    for prefix in self._prefixes:
      template += prefix
      self._offsets.append(len(template))
      template += b"\0\0\0\0"
    self._template = np.frombuffer(bytes(template), dtype=np.uint8)

  @property
  def full_row_length(self) -> int:
    return len(self._template)

  def encode(self, batch: RowBatch) -> EncodedBatch:
    n = batch.num_rows
    values = [np.asarray(batch.numeric[k], dtype=np.float64) for k in self.numeric_keys]
    floats = [v.astype("<f4") for v in values]
    if values:
      complete = ~np.any(np.isnan(np.stack(values)), axis=0)
    else:
      complete = np.ones(n, dtype=bool)
    if not self.string_keys and complete.all():
      data = self._encode_full(floats, n)
      ends = np.arange(1, n + 1, dtype=np.int64) * self.full_row_length
      return EncodedBatch(batch.sort_key, data, ends)
    return self._encode_rows(batch, values, floats, complete)

  def _encode_full(self, floats: List[np.ndarray], n: int) -> bytes:
    out = np.empty((n, self.full_row_length), dtype=np.uint8)
    out[:] = self._template
    for offset, column in zip(self._offsets, floats):
      out[:, offset:offset + 4] = column.view(np.uint8).reshape(n, 4)
    return out.tobytes()

  def _encode_rows(self, batch: RowBatch, values, floats, complete) -> EncodedBatch:
    n = batch.num_rows
    float_bytes = [f.tobytes() for f in floats]
    present = [~np.isnan(v) for v in values]
    present_lists = [p.tolist() for p in present]
    strings = [batch.strings[k] for k in self.string_keys]
    full = (self._encode_full([f[complete] for f in floats], int(complete.sum()))
            if not self.string_keys else b"")
    row_len = self.full_row_length
    records = []
    full_index = 0
    for i in range(n):
      if not self.string_keys and complete[i]:
        records.append(full[full_index * row_len:(full_index + 1) * row_len])
        full_index += 1
        continue
      parts = [prefix + fb[4 * i:4 * i + 4]
               for prefix, fb, ok in zip(self._prefixes, float_bytes, present_lists) if ok[i]]
      for key_field, column in zip(self._string_key_fields, strings):
        value = column[i]
        if value is not None:
          parts.append(_bytes_entry(key_field, value))
      payload = b"".join(parts)
      records.append(bytes([_TAG_1]) + varint(len(payload)) + payload)
    ends = np.cumsum([len(r) for r in records], dtype=np.int64)
    return EncodedBatch(batch.sort_key, b"".join(records), ends)
