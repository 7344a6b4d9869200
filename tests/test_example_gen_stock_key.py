"""Stock partition keys written by hand == protobuf's deterministic serialization."""
import numpy as np
import pytest

import tensorflow as tf

from tfx_parallel.components.partitioned_example_gen import rows as rows_lib
from tfx_parallel.components.partitioned_example_gen import stock_key


def _feature(typ, v):
  vs = [] if v is None else [v]
  if typ == "int":
    return tf.train.Feature(int64_list=tf.train.Int64List(value=vs))
  if typ == "float":
    return tf.train.Feature(float_list=tf.train.FloatList(value=vs))
  return tf.train.Feature(bytes_list=tf.train.BytesList(value=vs))


def _columns(types, rows):
  numeric = {c: np.array([np.nan if r[c] is None else float(r[c]) for r in rows])
             for c, t in types.items() if t != "string"}
  strings = {c: [r[c] for r in rows] for c, t in types.items() if t == "string"}
  return numeric, strings


def _random_rows(rng, types, n, missing):
  rows = []
  for _ in range(n):
    row = {}
    for c, t in types.items():
      if missing and rng.random() < 0.2:
        row[c] = None
      elif t == "int":
        row[c] = int(rng.integers(-2**40, 2**40)) if rng.random() < 0.5 else int(
            rng.integers(-3, 300))
      elif t == "float":
        row[c] = float(rng.normal() * 10.0 ** int(rng.integers(-8, 8)))
      else:
        row[c] = "".join(rng.choice(list("ab,é\"x€ "), size=rng.integers(0, 300))).encode()
    rows.append(row)
  return rows


@pytest.mark.parametrize("types,missing", [
    ({"x1": "float", "x0": "float", "y": "float"}, False),  # The fixed-layout fast path.
    ({"x1": "float", "x0": "float", "y": "float"}, True),
    ({"b": "int", "a": "string", "z": "float", "y": "int"}, True),
    ({"€uro": "string", "e": "int"}, False),
])
@pytest.mark.parametrize("row_by_row", [False, True])
def test_example_keys_equal_deterministic_serialization(types, missing, row_by_row,
                                                        monkeypatch):
  if row_by_row:  # Values too long for the byte matrix: keys are built row by row.
    if "string" not in types.values():
      pytest.skip("without a string column the keys are always laid out in the matrix")
    monkeypatch.setattr(rows_lib, "MAX_STRING_MATRIX_BYTES", 0)
  rng = np.random.default_rng(len(types) + missing)
  rows = _random_rows(rng, types, 300, missing)
  numeric, strings = _columns(types, rows)
  keys = stock_key.StockKeyEncoder(types).example_keys(numeric, strings, len(rows))
  for row, key in zip(rows, keys):
    example = tf.train.Example(features=tf.train.Features(
        feature={c: _feature(t, row[c]) for c, t in types.items()}))
    assert key == example.SerializeToString(deterministic=True), row


@pytest.mark.parametrize("typ", ["int", "string"])
def test_feature_keys_equal_deterministic_serialization(typ):
  rng = np.random.default_rng(7)
  types = {"k": typ, "y": "float"}
  rows = _random_rows(rng, types, 200, missing=True)
  numeric, strings = _columns(types, rows)
  keys = stock_key.StockKeyEncoder(types).feature_keys("k", numeric, strings, len(rows))
  assert keys == [_feature(typ, r["k"]).SerializeToString(deterministic=True) for r in rows]
