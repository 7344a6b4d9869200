"""Stock ExampleGen's partition keys for CSV rows, built without protobuf objects.

Stock CsvExampleGen turns a CSV row into a ``tf.train.Example`` with one feature per
column: ``int64_list`` for int columns, ``float_list`` (float32) for float columns,
``bytes_list`` for string columns, and an *empty* list of that kind for an empty cell.
Its split key is that Example's deterministic serialization (map entries sorted by
feature name), or with ``partition_feature_name`` the deterministic serialization of
that one ``Feature`` (base_example_gen_executor._GeneratePartitionKey).

This module writes those bytes directly in protobuf wire format, column by column, for a
whole batch. Our own Examples differ (empty cells are absent features, not empty lists),
which is why the key is built separately. Checked byte for byte
against ``tf.train.Example.SerializeToString(deterministic=True)`` in
tests/test_example_gen_stock_key.py, and split for split against stock CsvExampleGen in
tests/test_example_gen_stock_splits.py.

Int columns are hashed from their float64 parse, exact for |value| <= 2**53.
"""
from typing import Dict, List, Mapping, Optional

import numpy as np

from tfx_parallel.components.partitioned_example_gen import rows as rows_lib
from tfx_parallel.components.partitioned_example_gen.rows import ExampleEncoder
from tfx_parallel.components.partitioned_example_gen.rows import varint

_MASK64 = (1 << 64) - 1
# Feature kinds: bytes_list = 1, float_list = 2, int64_list = 3.
_BYTES, _FLOAT, _INT64 = 0x0A, 0x12, 0x1A


def _ld(tag: int, payload: bytes) -> bytes:
  return bytes([tag]) + varint(len(payload)) + payload


def _int_feature(v: int) -> bytes:
  return _ld(_INT64, _ld(0x0A, varint(v & _MASK64)))


def _bytes_feature(v: bytes) -> bytes:
  return _ld(_BYTES, _ld(0x0A, v))


def _float_feature(v4: bytes) -> bytes:
  return _ld(_FLOAT, _ld(0x0A, v4))


_EMPTY = {"int": bytes([_INT64, 0]), "float": bytes([_FLOAT, 0]), "string": bytes([_BYTES, 0])}


def feature_column(typ: str, values, n: int) -> List[bytes]:
  """Serialized Feature of each row of one column (see the module docstring).

  ``values``: float64 array (NaN = empty) for "int" and "float", else a list of bytes or
  None (empty).
  """
  empty = _EMPTY[typ]
  if typ == "string":
    return [empty if v is None else _bytes_feature(v) for v in values]
  values = np.asarray(values, dtype=np.float64)
  present = (~np.isnan(values)).tolist()
  if typ == "float":
    raw = values.astype("<f4").tobytes()
    return [_float_feature(raw[4 * i:4 * i + 4]) if ok else empty
            for i, ok in enumerate(present)]
  return [_int_feature(int(v)) if ok else empty for v, ok in zip(values.tolist(), present)]


class StockKeyEncoder:
  """Stock Example keys for batches of rows with fixed column types."""

  def __init__(self, types: Mapping[str, str]):
    self.types = {name: types[name] for name in sorted(types)}  # Deterministic order.
    self._key_fields = {name: _ld(0x0A, name.encode("utf-8")) for name in self.types}
    self._all_float = all(t == "float" for t in self.types.values())
    self._float_encoder = ExampleEncoder(tuple(self.types)) if self._all_float else None
    # Per column, the map-entry prefixes a row picks from (built once, not per batch):
    # string: by value length; float: (entry prefix, empty entry); int: [empty entry,
    # prefix for a varint of 1..10 bytes].
    self._prefixes = {}
    for name, typ in self.types.items():
      key_field = self._key_fields[name]
      empty = _ld(0x0A, key_field + _ld(0x12, _EMPTY[typ]))
      if typ == "string":
        self._prefixes[name] = rows_lib.StringPrefixes(key_field, missing=empty)
      elif typ == "float":  # The whole entry: prefix and float32 bytes, or the empty one.
        prefix = rows_lib.float_entry_prefix(name)
        self._prefixes[name] = (np.frombuffer(prefix, dtype=np.uint8),
                                np.frombuffer(empty, dtype=np.uint8))
      else:
        self._prefixes[name] = rows_lib.PrefixTable(
            [empty] + [rows_lib.int_entry_prefix(name, m) for m in range(1, 11)])

  def example_keys(self, numeric: Dict[str, np.ndarray],
                   strings: Dict[str, List[Optional[bytes]]], n: int) -> List[bytes]:
    """The deterministic serialization of each row's stock Example."""
    if self._all_float:
      values = [np.asarray(numeric[k], dtype=np.float64) for k in self.types]
      if not values or not np.isnan(np.stack(values)).any():
        # Complete float rows: exactly our own fixed-layout encoding, in sorted order.
        width = self._float_encoder.full_row_length
        data = self._float_encoder._encode_full(  # pylint: disable=protected-access
            [v.astype("<f4") for v in values], n)
        return [data[i * width:(i + 1) * width] for i in range(n)]
    if n:
      keys = self._example_keys_slots(numeric, strings, n)
      if keys is not None:
        return keys
    columns = []
    for name, typ in self.types.items():
      features = feature_column(typ, strings[name] if typ == "string" else numeric[name], n)
      key_field = self._key_fields[name]
      columns.append([_ld(0x0A, key_field + _ld(0x12, f)) for f in features])
    out = []
    for entries in zip(*columns):
      payload = b"".join(entries)
      out.append(b"\x0a" + varint(len(payload)) + payload)
    if not columns:
      out = [b""] * n
    return out

  def _example_keys_slots(self, numeric, strings, n: int) -> Optional[List[bytes]]:
    """example_keys laid out column by column in a byte matrix (rows.Slots), as our own
    Examples are: a present cell's map entry is exactly our encoder's (same key field,
    same Feature), an empty cell's is the constant entry of an empty list. None when a
    string column's values are too long for the matrix (rows.string_bytes)."""
    body = rows_lib.Slots(n)
    for name, typ in self.types.items():
      prefixes = self._prefixes[name]
      if typ == "string":
        laid_out = rows_lib.string_bytes(strings[name])
        if laid_out is None:
          return None
        matrix, lengths, present = laid_out
        body.add(*prefixes.pick(lengths, present))
        body.add(matrix, np.where(present, lengths, 0))
        continue
      values = np.asarray(numeric[name], dtype=np.float64)
      present = ~np.isnan(values)
      if typ == "float":
        prefix, empty = prefixes
        block = np.empty((n, len(prefix) + 4), dtype=np.uint8)
        block[:, :len(prefix)] = prefix
        block[:, len(prefix):] = values.astype("<f4").view(np.uint8).reshape(n, 4)
        if not present.all():
          block[~present, :len(empty)] = empty
        body.add(block, np.where(present, len(prefix) + 4, len(empty)))
      else:  # int: the prefix depends on the varint's length (1..10); 0 is the empty one.
        data, lengths = rows_lib.varints(np.where(present, values, 0).astype(np.int64))
        body.add(*prefixes.pick(np.where(present, lengths, 0)))
        body.add(data, np.where(present, lengths, 0))
    data, ends = body.records()
    starts = [0] + ends[:-1].tolist()
    return [data[a:b] for a, b in zip(starts, ends.tolist())]

  def feature_keys(self, name: str, numeric: Dict[str, np.ndarray],
                   strings: Dict[str, List[Optional[bytes]]], n: int) -> List[bytes]:
    """The deterministic serialization of each row's ``name`` Feature."""
    typ = self.types[name]
    return feature_column(typ, strings[name] if typ == "string" else numeric[name], n)

