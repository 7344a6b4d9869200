"""Columnar batches of rows and their fast serialization to ``tf.train.Example``.

Every Beam element of the ingest carries a batch of rows (about a thousand), never a
single row: per-element overhead in Beam is a few microseconds, so per-row elements
would dominate the cost.

Encoding. "float" columns become ``float_list`` features with one float32 value, "int"
columns ``int64_list`` features with one int64 value (ints stay ints, so SchemaGen types
them INT, as it types stock CsvExampleGen's), string columns ``bytes_list`` features. A
missing value (an empty CSV cell, i.e. NaN in a numeric column or None in a string
column) means the feature is absent from that Example. Int values travel as float64 in a
:class:`RowBatch`, exact for |value| <= 2**53 (``MAX_EXACT_INT``; the CSV parser rejects
larger ones). The protobuf wire format of such an Example is simple enough to write
directly, in three ways, all checked against the protobuf library in
tests/test_example_gen_rows.py:

* float columns only, every value present: every serialized row has the same length and
  layout, so a whole batch is one numpy template with the float bytes copied in column
  by column;
* no string columns, but ints (varints: 1 to 10 bytes) or missing values: each feature
  gets a slot of its widest encoding in an [rows, width] byte matrix with a mask of the
  bytes each row uses; the masked bytes in row-major order are the records, back to back;
* string columns: the same byte matrix, a string column adding two slots: its map-entry
  prefix (which depends only on the value's length) and its value bytes, as a [rows,
  longest value] matrix. A batch whose matrix would exceed MAX_STRING_MATRIX_BYTES (very
  long cells) is assembled row by row with ``bytes.join`` instead; both give the same
  bytes.
"""
from typing import AbstractSet, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

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


def varints(values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Protobuf varints of int64 ``values`` (two's complement, as int64 fields are written),
  vectorised: (bytes [n, w] uint8, of which row i uses the first lengths[i]); w <= 10 is
  the longest varint's length, so small values (message lengths, counts) cost 1 or 2
  columns, not 10."""
  u = np.asarray(values, dtype=np.int64).view(np.uint64)
  top = int(u.max()) if len(u) else 0
  width = max(1, -(-top.bit_length() // 7))
  shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
  groups = (u[:, None] >> shifts[None, :]) & np.uint64(0x7F)
  lengths = 1 + np.sum((u[:, None] >> shifts[None, 1:]) != 0, axis=1)
  more = np.arange(width)[None, :] < (lengths[:, None] - 1)
  return (groups | (more * 0x80).astype(np.uint64)).astype(np.uint8), lengths


def _field(tag: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field: tag byte, varint length, payload."""
  return bytes([tag]) + varint(len(payload)) + payload


_TAG_1 = 0x0A  # field 1, length-delimited
_TAG_2 = 0x12  # field 2, length-delimited
_TAG_3 = 0x1A  # field 3, length-delimited
# Feature{float_list(2): FloatList{value(1), packed: 4 bytes}}
_FLOAT_FEATURE_HEAD = bytes([_TAG_2, 6, _TAG_1, 4])
MAX_EXACT_INT = 2**53  # Largest |int| a float64 holds exactly.
# Bumped whenever the bytes written for the same rows change (3: na_values tokens
# such as NA are missing values, were strings or bad rows; 2: int columns as
# int64_list, were float_list). The component passes it as an execution property, so a
# pipeline cache never serves an artifact written by another encoding.
ENCODING_VERSION = 3


def float_entry_prefix(key: str) -> bytes:
  """Map entry of Features.feature for a one-float feature, minus the 4 float bytes."""
  key_field = _field(_TAG_1, key.encode("utf-8"))
  entry_len = len(key_field) + 2 + len(_FLOAT_FEATURE_HEAD) + 4
  return (bytes([_TAG_1]) + varint(entry_len) + key_field +
          bytes([_TAG_2, len(_FLOAT_FEATURE_HEAD) + 4]) + _FLOAT_FEATURE_HEAD)


def int_entry_prefix(key: str, length: int) -> bytes:
  """Map entry of Features.feature for a one-int64 feature whose varint has ``length``
  bytes, minus those bytes: Feature{int64_list(3): Int64List{value(1), packed}}."""
  key_field = _field(_TAG_1, key.encode("utf-8"))
  feature_len = 4 + length
  entry_len = len(key_field) + 1 + len(varint(feature_len)) + feature_len
  return (bytes([_TAG_1]) + varint(entry_len) + key_field + bytes([_TAG_2]) +
          varint(feature_len) + bytes([_TAG_3, 2 + length, _TAG_1, length]))


class Slots:
  """The map entries of a batch as an [n, width] byte matrix and the mask of the bytes
  each row uses (see the module docstring): slots are appended left to right."""

  def __init__(self, n: int):
    self.blocks: List[np.ndarray] = []
    self.masks: List[np.ndarray] = []
    self.lengths = np.zeros(n, dtype=np.int64)

  def add(self, data: np.ndarray, lengths: np.ndarray) -> None:
    """``data`` [n, w] uint8, of which row i uses the first ``lengths[i]`` bytes."""
    lengths = np.asarray(lengths, dtype=np.int64)
    self.blocks.append(data)
    self.masks.append(np.arange(data.shape[1])[None, :] < lengths[:, None])
    self.lengths += lengths

  def records(self) -> Tuple[bytes, np.ndarray]:
    """(the serialized Examples back to back, their end offsets): each row's entries
    behind the Example's head, field 1 (features) and its varint length."""
    n = len(self.lengths)
    head_len, head_lengths = varints(self.lengths)
    matrix = np.concatenate([np.full((n, 1), _TAG_1, dtype=np.uint8), head_len] + self.blocks,
                            axis=1)
    mask = np.concatenate([np.ones((n, 1), dtype=bool),
                           np.arange(head_len.shape[1])[None, :] < head_lengths[:, None]]
                          + self.masks, axis=1)
    return matrix[mask].tobytes(), np.cumsum(mask.sum(axis=1), dtype=np.int64)


def _table(rows: Sequence[bytes]) -> Tuple[np.ndarray, np.ndarray]:
  """Byte strings as a zero-padded [len(rows), max length] uint8 table, and their lengths."""
  width = max(len(r) for r in rows)
  table = np.zeros((len(rows), width), dtype=np.uint8)
  for i, r in enumerate(rows):
    table[i, :len(r)] = np.frombuffer(r, dtype=np.uint8)
  return table, np.array([len(r) for r in rows], dtype=np.int64)


def _bytes_entry(key_field: bytes, value: bytes) -> bytes:
  """Map entry of Features.feature for a one-value bytes_list feature."""
  feature = _field(_TAG_1, _field(_TAG_1, value))  # Feature{bytes_list(1): {value(1)}}
  return _field(_TAG_1, key_field + _field(_TAG_2, feature))


# Largest [rows, longest value] byte matrix a string column is laid out in; a batch with
# longer values takes the row-by-row path.
MAX_STRING_MATRIX_BYTES = 32 << 20


class PrefixTable:
  """Map-entry prefixes chosen per row: row k of ``table`` holds prefix k (zero-padded)
  and ``widths[k]`` its length; ``pick(index)`` lays out a [n, width] slot."""

  def __init__(self, prefixes: Sequence[bytes]):
    self.table, self.widths = _table(list(prefixes) or [b""])

  def pick(self, index: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    return self.table[index], self.widths[index]


class StringColumn(list):
  """A string column's values (bytes, None where missing) that keeps its byte layout
  (``string_bytes``) once computed: the stock keys and the encoder both lay out the
  same column of a batch. Any derived list (``RowBatch.take``) is a plain list."""
  laid_out = None


def string_column(cells: Sequence[str], na: AbstractSet[str] = frozenset({""})
                  ) -> StringColumn:
  """The StringColumn of CSV text cells, a cell in ``na`` (the empty one, and the
  configured na_values tokens) missing, laid out on the way (the UTF-8 bytes are joined
  once, for the values and the matrix alike)."""
  filled = [b"" if c in na else c.encode("utf-8") for c in cells]
  column = StringColumn([v or None for v in filled])
  lengths = np.fromiter(map(len, filled), dtype=np.int64, count=len(filled))
  column.laid_out = _lay_out(filled, lengths, lengths > 0)
  return column


def string_bytes(values: Sequence[Optional[bytes]]
                 ) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """(value bytes [n, longest] uint8, lengths, present) of a string column, or None if
  that matrix would exceed MAX_STRING_MATRIX_BYTES. Missing values have length 0."""
  cached = getattr(values, "laid_out", None)
  if cached is not None:
    return cached
  n = len(values)
  present = np.fromiter((v is not None for v in values), dtype=bool, count=n)
  filled = values if present.all() else [b"" if v is None else v for v in values]
  lengths = np.fromiter(map(len, filled), dtype=np.int64, count=n)
  return _lay_out(filled, lengths, present)


def _lay_out(filled: Sequence[bytes], lengths: np.ndarray, present: np.ndarray
             ) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
  n = len(filled)
  width = int(lengths.max()) if n else 0
  if n * width > MAX_STRING_MATRIX_BYTES:
    return None
  matrix = np.zeros((n, width), dtype=np.uint8)
  matrix[np.arange(width)[None, :] < lengths[:, None]] = np.frombuffer(
      b"".join(filled), dtype=np.uint8)  # Row-major: each row's bytes, in order.
  return matrix, lengths, present


def string_entry_prefixes(key_field: bytes, lengths: np.ndarray
                          ) -> Tuple[List[bytes], np.ndarray]:
  """The bytes_list map entries of values of each distinct length in ``lengths`` (each
  entry minus the value's bytes), and each row's index into that list."""
  distinct, index = np.unique(lengths, return_inverse=True)
  prefixes = [_bytes_entry(key_field, b"\0" * m)[:-m or None] for m in distinct.tolist()]
  return prefixes, index


class StringPrefixes:
  """The bytes_list map-entry prefix of one string column's values, by value length.

  The prefix depends only on the key and the value's length, so it is built once per
  length and kept: ``pick`` is one table lookup per batch, where building the prefixes of
  a batch's distinct lengths cost a numpy.unique and a protobuf encoding per length.
  ``missing``: the entry of a missing value (b"": none; stock keys: an empty list).
  Lengths up to MAX_CACHED_LENGTH are cached; longer values are looked up per batch.
  """
  MAX_CACHED_LENGTH = 1024

  def __init__(self, key_field: bytes, missing: bytes = b""):
    self._key_field = key_field
    self._missing = missing
    self._size = 0
    self._table = self._widths = None

  def pick(self, lengths: np.ndarray, present: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(prefix bytes [n, width] uint8, prefix lengths) of each row."""
    top = int(lengths.max()) if len(lengths) else 0
    if top > self.MAX_CACHED_LENGTH:
      prefixes, index = string_entry_prefixes(self._key_field, lengths)
      return PrefixTable(prefixes + [self._missing]).pick(
          np.where(present, index, len(prefixes)))
    if top >= self._size:
      self._size = min(max(2 * self._size, top + 1, 64), self.MAX_CACHED_LENGTH + 1)
      self._table, self._widths = _table(
          [_bytes_entry(self._key_field, b"\0" * m)[:-m or None] for m in range(self._size)]
          + [self._missing])
    index = np.where(present, lengths, self._size)
    return self._table[index], self._widths[index]


class ExampleEncoder:
  """Serializes RowBatches to tf.train.Example bytes (see the module docstring)."""

  def __init__(self, numeric_keys: Sequence[str], string_keys: Sequence[str] = (),
               int_keys: Sequence[str] = ()):
    """``int_keys``: the numeric keys written as int64 (the others are float32)."""
    self.numeric_keys = tuple(numeric_keys)
    self.string_keys = tuple(string_keys)
    self.int_keys = tuple(k for k in self.numeric_keys if k in set(int_keys))
    unknown = sorted(set(int_keys) - set(self.numeric_keys))
    if unknown:
      raise ValueError(f"int_keys {unknown} are not numeric keys {list(self.numeric_keys)}")
    self.float_keys = tuple(k for k in self.numeric_keys if k not in self.int_keys)
    # int key -> [prefix for a varint of 0..10 bytes] (index 0 unused).
    self._int_prefixes = {k: [b""] + [int_entry_prefix(k, n) for n in range(1, 11)]
                          for k in self.int_keys}
    self._int_tables = {k: _table(p) for k, p in self._int_prefixes.items()}
    self._prefixes = [float_entry_prefix(k) for k in self.float_keys]
    self._string_key_fields = [_field(_TAG_1, k.encode("utf-8")) for k in self.string_keys]
    self._string_prefixes = [StringPrefixes(f) for f in self._string_key_fields]
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
    values = [np.asarray(batch.numeric[k], dtype=np.float64) for k in self.float_keys]
    floats = [v.astype("<f4") for v in values]
    if values:
      complete = ~np.any(np.isnan(np.stack(values)), axis=0)
    else:
      complete = np.ones(n, dtype=bool)
    if not self.string_keys and not self.int_keys and complete.all():
      data = self._encode_full(floats, n)
      ends = np.arange(1, n + 1, dtype=np.int64) * self.full_row_length
      return EncodedBatch(batch.sort_key, data, ends)
    ints = [np.asarray(batch.numeric[k], dtype=np.float64) for k in self.int_keys]
    if not self.string_keys and n:
      return self._encode_slots(batch.sort_key, values, floats, ints)
    if n:
      strings = [string_bytes(batch.strings[k]) for k in self.string_keys]
      if all(s is not None for s in strings):
        # Floats, ints, then strings: the order _encode_rows writes them in.
        order = self.float_keys + self.int_keys
        return self._encode_slots(batch.sort_key, values, floats, ints, order=order,
                                  strings=strings)
    return self._encode_rows(batch, floats, present_values=values, ints=ints)

  def _int_column(self, key: str, values: np.ndarray):
    """(varint bytes [n, 10], varint lengths, present) of one int column."""
    present = ~np.isnan(values)
    if np.any(np.abs(values[present]) > MAX_EXACT_INT):
      raise ValueError(f"int feature {key!r} has a value beyond +-2**53, which a float64 "
                       f"cannot hold exactly")
    data, lengths = varints(np.where(present, values, 0).astype(np.int64))
    return data, lengths, present

  def _encode_slots(self, sort_key, values, floats, ints, order=None,
                    strings=()) -> EncodedBatch:
    """``order``: the numeric keys' order (default numeric_keys); ``strings``: each string
    column's string_bytes, written after the numeric ones."""
    n = (len(floats[0]) if floats else len(ints[0]) if ints else len(strings[0][1]))
    body = Slots(n)
    for key in order or self.numeric_keys:
      if key in self._int_prefixes:
        data, lengths, present = self._int_column(key, ints[self.int_keys.index(key)])
        table, widths = self._int_tables[key]
        body.add(table[lengths], np.where(present, widths[lengths], 0))
        body.add(data, np.where(present, lengths, 0))
      else:
        j = self.float_keys.index(key)
        prefix = np.frombuffer(self._prefixes[j], dtype=np.uint8)
        block = np.empty((n, len(prefix) + 4), dtype=np.uint8)
        block[:, :len(prefix)] = prefix
        block[:, len(prefix):] = floats[j].view(np.uint8).reshape(n, 4)
        body.add(block, np.where(np.isnan(values[j]), 0, len(prefix) + 4))
    for prefixes, (matrix, lengths, present) in zip(self._string_prefixes, strings):
      body.add(*prefixes.pick(lengths, present))
      body.add(matrix, np.where(present, lengths, 0))
    data, ends = body.records()
    return EncodedBatch(sort_key, data, ends)

  def _encode_full(self, floats: List[np.ndarray], n: int) -> bytes:
    out = np.empty((n, self.full_row_length), dtype=np.uint8)
    out[:] = self._template
    for offset, column in zip(self._offsets, floats):
      out[:, offset:offset + 4] = column.view(np.uint8).reshape(n, 4)
    return out.tobytes()

  def _encode_rows(self, batch: RowBatch, floats, present_values, ints) -> EncodedBatch:
    n = batch.num_rows
    float_bytes = [f.tobytes() for f in floats]
    present = [~np.isnan(v) for v in present_values]
    present_lists = [p.tolist() for p in present]
    int_entries = []  # per int column: each row's whole map entry, or None if missing.
    for key, column in zip(self.int_keys, ints):
      data, lengths, ok = self._int_column(key, column)
      prefixes = self._int_prefixes[key]
      int_entries.append([prefixes[m] + data[i, :m].tobytes() if p else None
                          for i, (m, p) in enumerate(zip(lengths.tolist(), ok.tolist()))])
    strings = [batch.strings[k] for k in self.string_keys]
    records = []
    for i in range(n):
      parts = [prefix + fb[4 * i:4 * i + 4]
               for prefix, fb, ok in zip(self._prefixes, float_bytes, present_lists) if ok[i]]
      parts += [column[i] for column in int_entries if column[i] is not None]
      for key_field, column in zip(self._string_key_fields, strings):
        value = column[i]
        if value is not None:
          parts.append(_bytes_entry(key_field, value))
      payload = b"".join(parts)
      records.append(bytes([_TAG_1]) + varint(len(payload)) + payload)
    ends = np.cumsum([len(r) for r in records], dtype=np.int64)
    return EncodedBatch(batch.sort_key, b"".join(records), ends)
