"""Hand-written tf.train.Example encoding, checked against the protobuf library."""
import numpy as np
import pytest

import tensorflow as tf

from tfx_parallel.components.partitioned_example_gen import rows
from tfx_parallel.components.partitioned_example_gen.rows import ExampleEncoder
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch
from tfx_parallel.components.partitioned_example_gen.rows import varint
from tfx_parallel.components.partitioned_example_gen.rows import varints


def _expected(numeric, strings, i, int_keys=()):
  """The Example for row i, built with the protobuf API."""
  feature = {}
  for key, values in numeric.items():
    if np.isnan(values[i]):
      continue
    if key in int_keys:
      feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(values[i])]))
    else:
      feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=[values[i]]))
  for key, values in strings.items():
    if values[i] is not None:
      feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[values[i]]))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def _decode(encoded):
  return [tf.train.Example.FromString(r) for r in encoded.records()]


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**35])
def test_varint_matches_protobuf(value):
  from google.protobuf.internal import encoder  # pylint: disable=g-import-not-at-top
  assert varint(value) == encoder._VarintBytes(value)  # pylint: disable=protected-access


def test_complete_numeric_rows_use_the_fixed_template_and_parse_back():
  rng = np.random.default_rng(0)
  numeric = {f"x{i}": rng.normal(size=50) for i in range(8)}
  numeric["y"] = rng.normal(size=50) * 1e6
  batch = RowBatch(("f", 1), numeric, {}, np.arange(50))
  encoder = ExampleEncoder(list(numeric))
  encoded = encoder.encode(batch)
  assert encoded.num_rows == 50
  assert len(encoded.data) == 50 * encoder.full_row_length
  assert _decode(encoded) == [_expected(numeric, {}, i) for i in range(50)]


def test_missing_values_are_absent_features():
  numeric = {"a": np.array([1.5, np.nan, 3.0, np.nan]), "b": np.array([np.nan, 2.0, 4.0, np.nan])}
  batch = RowBatch(("f", 1), numeric, {}, [b"k"] * 4)
  decoded = _decode(ExampleEncoder(["a", "b"]).encode(batch))
  assert decoded == [_expected(numeric, {}, i) for i in range(4)]
  assert list(decoded[0].features.feature) == ["a"]
  assert len(decoded[3].features.feature) == 0


def test_string_columns_are_bytes_lists_including_long_and_unicode_values():
  long_value = "é" * 200  # > 127 bytes: multi-byte varint lengths.
  numeric = {"n": np.array([1.0, 2.0, np.nan])}
  strings = {"s": [b"abc", None, long_value.encode()], "ünï": [b"", b"x", None]}
  batch = RowBatch(("f", 1), numeric, strings, [b"k"] * 3)
  decoded = _decode(ExampleEncoder(["n"], list(strings)).encode(batch))
  assert decoded == [_expected(numeric, strings, i) for i in range(3)]


def test_many_features_need_a_two_byte_length():
  numeric = {f"feature_with_a_long_name_{i}": np.array([float(i)]) for i in range(20)}
  batch = RowBatch(("f", 1), numeric, {}, np.arange(1))
  assert _decode(ExampleEncoder(list(numeric)).encode(batch)) == [_expected(numeric, {}, 0)]


_INTS = np.array([0, 1, -1, 127, 128, 300, -300, 16383, 16384, 2**35, -2**40, 2**53, -2**53,
                  np.nan, 7.0])


@pytest.mark.parametrize("with_strings", [False, True], ids=["slots", "rows"])
def test_int_columns_are_int64_lists_of_every_varint_length(with_strings):
  n = len(_INTS)
  rng = np.random.default_rng(1)
  numeric = {"i": _INTS, "f": np.where(rng.random(n) < 0.3, np.nan, rng.normal(size=n)),
             "j": np.roll(_INTS, 3), "g": rng.normal(size=n) * 1e9}
  strings = {"s": [None if k % 4 == 0 else f"v{k}".encode() for k in range(n)]}
  encoder = ExampleEncoder(list(numeric), list(strings) if with_strings else [],
                           int_keys=["i", "j"])
  decoded = _decode(encoder.encode(RowBatch(("f", 1), numeric, strings if with_strings else {},
                                            np.arange(n))))
  assert decoded == [_expected(numeric, strings if with_strings else {}, i, ("i", "j"))
                     for i in range(n)]
  assert decoded[0].features.feature["i"].WhichOneof("kind") == "int64_list"
  assert decoded[1].features.feature["f"].WhichOneof("kind") in (None, "float_list")
  assert "i" not in decoded[13].features.feature  # NaN: the feature is absent.


def test_int_feature_with_a_long_name_needs_two_byte_entry_lengths():
  name = "n" * 130
  numeric = {name: np.array([5.0, -2.0**40, np.nan])}
  decoded = _decode(ExampleEncoder([name], int_keys=[name]).encode(
      RowBatch(("f", 1), numeric, {}, np.arange(3))))
  assert decoded == [_expected(numeric, {}, i, (name,)) for i in range(3)]


def test_an_int_beyond_2_to_the_53_is_refused_not_rounded():
  numeric = {"i": np.array([1.0, 2.0**53 + 2])}
  with pytest.raises(ValueError, match=r"int feature 'i' has a value beyond \+-2\*\*53"):
    ExampleEncoder(["i"], int_keys=["i"]).encode(RowBatch(("f", 1), numeric, {}, np.arange(2)))


def test_int_keys_must_be_numeric_keys():
  with pytest.raises(ValueError, match=r"int_keys \['z'\] are not numeric keys"):
    ExampleEncoder(["a"], int_keys=["z"])


def test_varints_match_the_scalar_encoder_for_negative_and_large_values():
  values = np.array([0, 1, 127, 128, -1, -128, 2**62, -2**63, 2**63 - 1], dtype=np.int64)
  data, lengths = varints(values)
  for v, row, m in zip(values.tolist(), data, lengths.tolist()):
    assert row[:m].tobytes() == varint(v & (2**64 - 1))


def test_take_selects_rows_of_every_column():
  batch = RowBatch(("f", 7), {"a": np.array([0.0, 1.0, 2.0])}, {"s": [b"0", b"1", b"2"]},
                   [b"k0", b"k1", b"k2"])
  sub = batch.take(np.array([2, 0]))
  assert sub.sort_key == ("f", 7)
  assert sub.numeric["a"].tolist() == [2.0, 0.0]
  assert sub.strings["s"] == [b"2", b"0"]
  assert sub.keys == [b"k2", b"k0"]
  assert sub.num_rows == 2


@pytest.mark.parametrize("missing", [False, True])
def test_string_matrix_path_writes_the_bytes_of_the_row_by_row_path(monkeypatch, missing):
  rng = np.random.default_rng(3)
  n = 200
  numeric = {"f": rng.normal(size=n), "i": rng.integers(-2**40, 2**40, n).astype(float),
             "y": rng.normal(size=n)}
  strings = {"s": [("é" * int(k)).encode() for k in rng.integers(0, 300, n)],
             "t": [b"cat%d" % k for k in rng.integers(0, 5, n)]}
  if missing:
    numeric["f"][::3] = np.nan
    numeric["i"][1::4] = np.nan
    strings["s"] = [None if k % 5 == 0 else v for k, v in enumerate(strings["s"])]
  batch = RowBatch(("f", 1), numeric, strings, [b""] * n)
  encoder = ExampleEncoder(["f", "i", "y"], ["s", "t"], int_keys=["i"])
  vectorised = encoder.encode(batch)
  monkeypatch.setattr(rows, "MAX_STRING_MATRIX_BYTES", 0)  # Forces the row-by-row path.
  by_row = encoder.encode(batch)
  assert vectorised.data == by_row.data
  assert vectorised.ends.tolist() == by_row.ends.tolist()
  assert _decode(vectorised) == [_expected(numeric, strings, i, int_keys=["i"])
                                 for i in range(n)]


def test_varints_are_as_wide_as_the_longest_value():
  assert varints(np.array([0, 5, 127]))[0].shape == (3, 1)
  assert varints(np.array([0, 300]))[0].shape == (2, 2)
  assert varints(np.array([1, -1]))[0].shape == (2, 10)  # Negative: 10 bytes, as protobuf.
  assert varints(np.array([], dtype=np.int64))[0].shape == (0, 1)
  data, lengths = varints(np.array([0, 127, 128, 16384]))
  assert [data[i, :m].tobytes() for i, m in enumerate(lengths.tolist())] == [
      varint(0), varint(127), varint(128), varint(16384)]


@pytest.mark.parametrize("lengths", [[3, 1, 7], [70, 2, 900], [1024, 1025, 5], [5000, 1]])
def test_string_prefixes_are_the_entries_of_values_of_each_length(lengths):
  """Cached prefixes (lengths up to 1024), grown on demand, and per-batch ones beyond."""
  key_field = rows._field(0x0A, b"name")  # pylint: disable=protected-access
  missing = b"\x0a\x03abc"
  prefixes = rows.StringPrefixes(key_field, missing=missing)
  prefixes.pick(np.array([2]), np.array([True]))  # A small table first, grown below.
  lengths = np.array(lengths + [4])
  present = np.array([True] * (len(lengths) - 1) + [False])
  head, widths = prefixes.pick(lengths, present)
  for row, width, m, ok in zip(head, widths.tolist(), lengths.tolist(), present.tolist()):
    entry = rows._bytes_entry(key_field, b"v" * m)  # pylint: disable=protected-access
    assert row[:width].tobytes() == (entry[:-m] if ok else missing)


def test_string_column_of_csv_cells_is_laid_out_as_string_bytes_lays_out_a_list():
  cells = ["a", "", "é", "long value", ""]
  column = rows.string_column(cells)
  assert list(column) == [b"a", None, "é".encode(), b"long value", None]
  plain = rows.string_bytes(list(column))
  assert all(np.array_equal(a, b) for a, b in zip(column.laid_out, plain))
  assert rows.string_bytes(column) is column.laid_out
  batch = RowBatch(("f", 1), {}, {"s": column}, [b""] * 5)
  assert batch.take(np.array([0, 2])).strings["s"] == [b"a", "é".encode()]
