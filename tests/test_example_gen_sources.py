"""The sources alone: synthetic generation, CSV planning, reading, parsing, bad input."""
import gzip
import os

import numpy as np
import pytest

import apache_beam as beam
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from tfx_parallel.components.partitioned_example_gen import inference
from tfx_parallel.components.partitioned_example_gen import partition
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.components.partitioned_example_gen.sources import BadInputError


def _write(path, text):
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return str(path)


def _layout(path, **kwargs):
  return sources.plan_source(ExampleGenConfig(label="y", source=str(path), **kwargs).validate())


def _parse(layout, path, first_line, lines):
  return sources.parse_csv_lines(layout, (str(path), first_line, "\n".join(lines).encode()))


# ----------------------------------------------------------------------------- synthetic


def test_synthetic_chunks_cover_every_row_once():
  chunks = sources.synthetic_chunks(10, chunk_rows=4)
  assert chunks == [(0, 0, 4), (1, 4, 8), (2, 8, 10)]


def test_synthetic_chunk_is_deterministic_and_linear():
  spec = sources.plan_source(ExampleGenConfig(rows=100, num_features=3, noise=0.0, bias=3.0))
  assert spec.feature_keys == ("x0", "x1", "x2") and spec.weights == (1.0, 2.0, 3.0)
  a = sources.generate_synthetic_chunk(spec, (1, 4096, 4106))
  b = sources.generate_synthetic_chunk(spec, (1, 4096, 4106))
  c = sources.generate_synthetic_chunk(spec, (2, 8192, 8202))
  assert a.numeric.keys() == {"x0", "x1", "x2", "y"}
  assert all(np.array_equal(a.numeric[k], b.numeric[k]) for k in a.numeric)
  assert not np.array_equal(a.numeric["x0"], c.numeric["x0"])
  x = np.stack([a.numeric[f"x{i}"] for i in range(3)], axis=1)
  np.testing.assert_allclose(a.numeric["y"], x @ [1.0, 2.0, 3.0] + 3.0)
  assert a.keys.tolist() == list(range(4096, 4106))


def test_synthetic_noise_has_the_configured_scale():
  spec = sources.plan_source(ExampleGenConfig(rows=5000, num_features=2, noise=0.5))
  batch = sources.generate_synthetic_chunk(spec, (0, 0, 5000))
  residual = batch.numeric["y"] - (batch.numeric["x0"] + 2 * batch.numeric["x1"] + 3.0)
  assert 0.45 < residual.std() < 0.55


def test_generate_synthetic_transform_streams_all_rows():
  spec = sources.plan_source(ExampleGenConfig(rows=10_000, num_features=2))
  with beam.Pipeline() as p:
    batches = p | sources.GenerateSynthetic(spec)
    rows = batches | beam.FlatMap(lambda b: b.keys.tolist())
    assert_that(rows, equal_to(list(range(10_000))))
    sizes = batches | "Sizes" >> beam.Map(lambda b: b.num_rows)
    assert_that(sizes, equal_to([4096, 4096, 1808]), label="ChunkSizes")


# ----------------------------------------------------------------------------- CSV plan


def test_plan_infers_types_and_feature_keys(tmp_path):
  path = _write(tmp_path / "data.csv", "a,b,name,y\n1,2.5,foo,3\n4,,bar,5.5\n")
  layout = _layout(path)
  assert layout.files == (path,)
  assert layout.types == {"a": "int", "b": "float", "name": "string", "y": "float"}
  assert layout.feature_keys == ("a", "b")
  assert layout.string_keys == ("name",)
  assert layout.label_key == "y"


def test_plan_honours_column_types_and_columns(tmp_path):
  path = _write(tmp_path / "data.csv", "a,b,c,y\n1,2,3,4\n")
  layout = _layout(path, column_types={"a": "string", "y": "float"}, columns=("a", "c"))
  assert layout.types == {"a": "string", "c": "int", "y": "float"}
  assert layout.feature_keys == ("c",)


def test_taxi_plan_uses_the_csv_in_the_tfx_wheel():
  layout = sources.plan_source(ExampleGenConfig(source="taxi").validate())
  assert layout.files[0].endswith(os.path.join("chicago_taxi_pipeline", "data", "simple",
                                               "data.csv"))
  assert layout.label_key == "fare"
  assert layout.feature_keys == tuple(
      c for c in layout.header if c in sources.TAXI_FEATURE_COLUMNS)
  assert "tips" not in layout.types and set(layout.types.values()) == {"float"}


def test_no_matching_files_fails_naming_the_glob(tmp_path):
  pattern = str(tmp_path / "nothing-*.csv")
  with pytest.raises(BadInputError, match=r"source: no files match .*nothing-\*\.csv"):
    _layout(pattern)


def test_missing_label_column_fails_naming_the_column_and_file(tmp_path):
  path = _write(tmp_path / "data.csv", "a,b\n1,2\n")
  with pytest.raises(BadInputError, match=r"data\.csv:1: label column 'y' not in the header"):
    _layout(path)


def test_header_only_file_fails(tmp_path):
  path = _write(tmp_path / "data.csv", "a,y\n")
  with pytest.raises(BadInputError, match=r"data\.csv: no data rows after the header"):
    _layout(path)


def test_empty_file_fails(tmp_path):
  path = _write(tmp_path / "data.csv", "")
  with pytest.raises(BadInputError, match=r"data\.csv:1: empty file, expected a header row"):
    _layout(path)


def test_unknown_column_in_config_fails(tmp_path):
  path = _write(tmp_path / "data.csv", "a,y\n1,2\n")
  with pytest.raises(BadInputError, match=r"partition_feature_name \(split_key\) names column 'nope'"):
    _layout(path, split_key="nope")


def test_a_string_label_is_a_class_label_written_as_bytes(tmp_path):
  """A string label column (class names) is kept as a bytes_list label, not a feature;
  its empty cell is a missing label (absent), never a class."""
  path = _write(tmp_path / "data.csv", "a,y\n1,cat\n2,dog\n3,\n4,cat\n")
  layout = _layout(path)
  assert layout.types == {"a": "int", "y": "string"}
  assert layout.feature_keys == ("a",) and "y" in layout.string_keys
  batch, bad = _parse(layout, path, 2, ["1,cat", "2,dog", "3,", "4,cat"])
  assert bad == [] and batch.strings["y"] == [b"cat", b"dog", None, b"cat"]
  info, warnings = inference.describe({r.name: r for r in layout.reports},
                                      layout.sampled_rows, "y")
  assert "label 'y' (string: class names)" in info
  assert warnings == []  # No advice to make the label numeric.


@pytest.mark.parametrize("cells, numbers", [(["1", "2", "3", "x"], 3), (["1", "a", "b", "2"], 2)])
def test_a_mostly_numeric_label_with_text_fails_naming_fixes_that_keep_its_rows(
    tmp_path, cells, numbers):
  """At least half numbers, but under 99%: ambiguous. Each fix the message names keeps
  every row that is a number (none suggests a type under which every row is bad)."""
  path = _write(tmp_path / "data.csv", "a,y\n" + "".join(f"{i},{c}\n" for i, c in
                                                        enumerate(cells)))
  with pytest.raises(BadInputError,
                     match=rf"data\.csv: label column 'y' is ambiguous: {numbers} of 4 non-"
                           rf"empty cells in the first 4 data rows are numbers and "
                           rf"{4 - numbers} are not .*example_gen\.column_types\.y='float' .*"
                           rf"the {4 - numbers} non-numbers become bad rows.*"
                           rf"example_gen\.column_types\.y='string' to use every value as a "
                           rf"class name"):
    _layout(path)
  assert _layout(path, column_types={"y": "string"}).types["y"] == "string"


def test_a_numeric_label_with_a_few_bad_cells_keeps_them_bad_rows(tmp_path):
  """>= 99% numbers: a numeric label as before; its non-numbers are bad rows."""
  lines = [f"{i},{i % 7}.5" for i in range(199)] + ["199,oops"]
  path = _write(tmp_path / "data.csv", "a,y\n" + "\n".join(lines) + "\n")
  layout = _layout(path)
  assert layout.types["y"] == "float"
  _, bad = _parse(layout, path, 2, lines)
  assert bad == [(201, f"{path}:201: column 'y': expected float, got 'oops'")]


def test_a_label_without_values_fails(tmp_path):
  path = _write(tmp_path / "data.csv", "a,y\n1,\n2,\n")
  with pytest.raises(BadInputError, match=r"label column 'y' has no value in the first 2 "
                                          r"data rows; is it the right column\?"):
    _layout(path)


# ----------------------------------------------------------------------------- CSV parse


def test_parse_rows_with_missing_values_quotes_crlf_and_blank_lines(tmp_path):
  path = _write(tmp_path / "data.csv", "a,name,y\n1.5,x,2\n")
  layout = _layout(path)
  batch, bad = _parse(layout, path, 2, ["1.5,\"b, c\",2\r", "", ",,3", "4,d,"])
  assert bad == []
  np.testing.assert_array_equal(batch.numeric["a"], [1.5, np.nan, 4.0])
  np.testing.assert_array_equal(batch.numeric["y"], [2.0, 3.0, np.nan])
  assert batch.strings["name"] == [b"b, c", None, b"d"]
  # Split keys by default: the rows' positions, (seeded file offset + line number).
  np.testing.assert_array_equal(
      batch.keys, partition.row_ids(layout.file_base(path), np.array([2, 4, 5])))
  # With a stock output_config (row_split False): the rows' stock CsvExampleGen Examples
  # (tests/test_example_gen_stock_key.py).
  stock = sources.plan_source(ExampleGenConfig(label="y", source=path), row_split=False)
  batch, _ = _parse(stock, path, 2, ["1.5,\"b, c\",2\r", "", ",,3", "4,d,"])
  assert batch.keys[1] == _stock_example({"a": ("float", None), "name": ("string", None),
                                          "y": ("int", 3)})
  assert batch.sort_key == (path, 2)


def _stock_example(values):
  """tf.train.Example as stock CsvExampleGen builds it, deterministically serialized."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  feature = {}
  for name, (typ, v) in values.items():
    vs = [] if v is None else [v]
    feature[name] = (tf.train.Feature(int64_list=tf.train.Int64List(value=vs)) if typ == "int"
                     else tf.train.Feature(float_list=tf.train.FloatList(value=vs))
                     if typ == "float" else
                     tf.train.Feature(bytes_list=tf.train.BytesList(value=vs)))
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
      deterministic=True)


def test_split_key_features_are_the_partition_keys(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = _write(tmp_path / "data.csv", "user,y\nu1,2\n")
  batch, _ = _parse(_layout(path, split_key="user"), path, 2, ["u1,1", "u2,2", "u1,3"])
  assert batch.keys == [tf.train.Feature(bytes_list=tf.train.BytesList(value=[u]))
                        .SerializeToString(deterministic=True) for u in (b"u1", b"u2", b"u1")]


def test_float_split_key_is_rejected_like_stock(tmp_path):
  path = _write(tmp_path / "data.csv", "w,y\n0.5,2\n")
  with pytest.raises(BadInputError, match=r"partition_feature_name \(split_key\) 'w' is a "
                                          r"float column"):
    _layout(path, split_key="w")


BAD_ROWS = [
    ("1,\"2,3", r"data\.csv:3: malformed CSV row \(unexpected end of data\)"),
    ("1,2,3,4", r"data\.csv:3: expected 3 columns, got 4"),
    ("1,2", r"data\.csv:3: expected 3 columns, got 2"),
    ("1,abc,3", r"data\.csv:3: column 'b': expected float, got 'abc'"),
    ("1.5,2,3", r"data\.csv:3: column 'a': expected int, got '1\.5'"),
    ("9007199254740993,2,3", r"data\.csv:3: column 'a': expected int within \+-2\*\*53 "
                             r"\(declare the column 'string' in column_types for larger ids\), "
                             r"got '9007199254740993'"),
    ("-9223372036854775808,2,3", r"data\.csv:3: column 'a': expected int within .*got "
                                 r"'-9223372036854775808'"),
]


@pytest.mark.parametrize("line,message", BAD_ROWS)
def test_bad_rows_are_reported_with_file_and_line(tmp_path, line, message):
  path = _write(tmp_path / "data.csv", "a,b,y\n1,2.0,3\n")
  layout = _layout(path, column_types={"a": "int"})
  batch, bad = _parse(layout, path, 2, ["1,2,3", line, "4,5,6"])
  assert len(bad) == 1 and bad[0][0] == 3
  assert __import__("re").match(message, os.path.basename(bad[0][1])), bad
  assert batch.numeric["y"].tolist() == [3.0, 6.0]  # Good rows survive.


def test_unbalanced_quote_does_not_swallow_the_following_lines(tmp_path):
  path = _write(tmp_path / "data.csv", "a,y\n1,2\n")
  batch, bad = _parse(_layout(path), path, 2, ["1,2", "\"3,4", "5,6", "7,\"8\""])
  assert [line for line, _ in bad] == [3]
  assert batch.numeric["a"].tolist() == [1.0, 5.0, 7.0]


def _csv_files(tmp_path, n_files=2, rows=5):
  paths = []
  for f in range(n_files):
    lines = ["a,y"] + [f"{f * 100 + i},{i}" for i in range(rows)]
    paths.append(_write(tmp_path / f"part-{f}.csv", "\n".join(lines) + "\n"))
  return paths


def test_read_csv_lines_transform_numbers_lines_from_the_header(tmp_path):
  a, b = _csv_files(tmp_path, rows=3)
  with beam.Pipeline() as p:
    batches = p | sources.ReadCsvLines([a, b], ("a", "y"), batch_lines=2)
    assert_that(batches, equal_to([
        (a, 2, b"0,0\n1,1"), (a, 4, b"2,2"),
        (b, 2, b"100,0\n101,1"), (b, 4, b"102,2")]))


def test_read_csv_lines_reads_gzipped_csv(tmp_path):
  path = str(tmp_path / "data.csv.gz")
  with gzip.open(path, "wt") as f:
    f.write("a,y\n1,2\n3,4")
  with beam.Pipeline() as p:
    batches = p | sources.ReadCsvLines([path], ("a", "y"))
    assert_that(batches, equal_to([(path, 2, b"1,2\n3,4")]))


def test_read_csv_lines_rejects_a_different_header(tmp_path):
  a = _write(tmp_path / "a.csv", "a,y\n1,2\n")
  b = _write(tmp_path / "b.csv", "y,a\n1,2\n")
  with pytest.raises(sources.BadInputError, match=r"b\.csv:1: header \['y', 'a'\] differs from the "
                                      r"header of .*a\.csv"):
    with beam.Pipeline() as p:
      _ = p | sources.ReadCsvLines([a, b], ("a", "y"))


def test_parse_csv_transform(tmp_path):
  paths = _csv_files(tmp_path)
  layout = _layout(str(tmp_path / "part-*.csv"))
  with beam.Pipeline() as p:
    parsed = (p | sources.ReadCsvLines(layout.files, layout.header, batch_lines=2)
              | sources.ParseCsv(layout, "fail"))
    values = parsed.rows | beam.FlatMap(lambda b: b.numeric["a"].tolist())
    assert_that(values, equal_to([float(f * 100 + i) for f in range(2) for i in range(5)]))
    assert_that(parsed.skipped, equal_to([]), label="NothingSkipped")
  assert len(paths) == 2


def test_parse_csv_transform_fail_policy_raises_with_file_and_line(tmp_path):
  path = _write(tmp_path / "data.csv", "a,y\n1,2\n3,4\n5,6,7\n")
  layout = _layout(path)
  with pytest.raises(sources.BadInputError, match=r"data\.csv:4: expected 2 columns, got 3"):
    with beam.Pipeline() as p:
      _ = (p | sources.ReadCsvLines(layout.files, layout.header)
           | sources.ParseCsv(layout, "fail"))


def test_parse_csv_transform_skip_policy_counts_bad_rows(tmp_path):
  path = _write(tmp_path / "data.csv", "a,y\n1,2\nx,4\n5,6,7\n\"8,9\n10,11\n")
  layout = _layout(path, column_types={"a": "float"})
  with beam.Pipeline() as p:
    parsed = (p | sources.ReadCsvLines(layout.files, layout.header, batch_lines=2)
              | sources.ParseCsv(layout, "skip"))
    values = parsed.rows | beam.FlatMap(lambda b: b.numeric["a"].tolist())
    assert_that(values, equal_to([1.0, 10.0]))
    total = parsed.skipped | beam.CombineGlobally(sum)
    assert_that(total, equal_to([3]), label="Skipped")


@pytest.mark.parametrize("range_bytes", [1, 7, 50, 10_000])
def test_file_ranges_cover_every_line_once_with_its_line_number(tmp_path, range_bytes):
  lines = ["a,y"] + [f"{i},{'x' * (i % 17)}" for i in range(200)]
  path = _write(tmp_path / "data.csv", "\n".join(lines) + "\n")
  ranges = sources.file_ranges([path], range_bytes)
  assert ranges[0] == sources.FileRange(path, 0, ranges[0].end, 1)
  assert (len(ranges) == 1) == (range_bytes >= os.path.getsize(path))
  assert [r.start for r in ranges[1:]] == [r.end for r in ranges[:-1]]
  assert ranges[-1].end is None
  with beam.Pipeline() as p:
    batches = p | sources.ReadCsvLines([path], ("a", "y"), batch_lines=3,
                                       range_bytes=range_bytes)
    numbered = batches | beam.FlatMap(
        lambda b: [(b[1] + k, line) for k, line in enumerate(b[2].split(b"\n"))])
    assert_that(numbered, equal_to([(i + 1, lines[i].encode()) for i in range(1, 201)]))


def test_file_ranges_keep_a_compressed_file_whole(tmp_path):
  path = str(tmp_path / "data.csv.gz")
  with gzip.open(path, "wt") as f:
    f.write("a,y\n" + "1,2\n" * 100)
  assert sources.file_ranges([path], 10) == [sources.FileRange(path, 0, None, 1)]


@pytest.mark.parametrize("typ", ["float", "int"])
def test_numeric_column_with_empty_cells_parses_as_cell_by_cell(typ):
  cells = ["1", "", "-7", "", "250", "12", ""] * 3
  values, errors = sources._parse_numeric(cells, typ)  # pylint: disable=protected-access
  expected = [float(c) if c else np.nan for c in cells]
  np.testing.assert_array_equal(values, expected)
  assert errors == []


def test_bad_cells_beside_empty_cells_are_still_named(tmp_path):
  path = _write(tmp_path / "data.csv", "a,b,y\n1,2.0,3\n")
  layout = _layout(path, column_types={"a": "int"})
  batch, bad = _parse(layout, path, 2, ["1,2,3", ",2,3", "9007199254740993,,3", "x,,3",
                                        "5,,6", "6,abc,"])
  assert [line for line, _ in bad] == [4, 5, 7]
  assert "expected int within +-2**53" in bad[0][1] and "got 'x'" in bad[1][1]
  assert "column 'b': expected float, got 'abc'" in bad[2][1]
  np.testing.assert_array_equal(batch.numeric["a"], [1, np.nan, 5])
  np.testing.assert_array_equal(batch.numeric["b"], [2, 2, np.nan])
