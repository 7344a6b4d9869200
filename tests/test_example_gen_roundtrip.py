"""Every record of every shard round-trips: both CRCs valid, parses as tf.train.Example, and
the multiset of rows read back equals the multiset of input rows.

Sources: the taxi CSV of the tfx wheel that corrupted records (issue 11), 20 seeded
generated CSVs (numeric, int and string columns; missing cells; unicode; quoted commas and
quotes; long strings; batches and part buffers of many sizes), and the synthetic source.
"""
import collections
import csv
import gzip
import os

import numpy as np
import pytest

import apache_beam as beam
import tensorflow as tf

from tfx_parallel.components.partitioned_example_gen import ingest
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen import verify
from tfx_parallel.components.partitioned_example_gen import write
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.components.partitioned_example_gen.rows import ExampleEncoder
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch

# ----------------------------------------------------------------------------- helpers


def _ingest(tmp_path, config):
  """Runs the real Beam ingest; returns (plan, output root, summary)."""
  config = config.validate()
  plan = sources.plan_source(config)
  root = str(tmp_path / "out")
  os.makedirs(root)
  summary = ingest.run(beam.Pipeline(), config, plan, root)
  return plan, root, summary


def _rows_read_back(root, split_names):
  """Every row of every shard, each record's CRCs checked and parsed (verify.read_rows)."""
  rows = []
  for split in split_names:
    for path in verify.split_files(root, split):
      rows.extend(verify.read_rows(path))
  return rows


def _multiset(rows):
  return collections.Counter(frozenset(r.items()) for r in rows)


def _f32(value) -> float:
  return float(np.float32(value))


def _expected_csv_rows(plan: sources.CsvLayout):
  """The input rows as the Examples must hold them: float cells as float32, int cells as
  exact ints, strings as UTF-8 bytes, missing cells (empty or na_values) absent."""
  rows = []
  for path in plan.files:
    with open(path, newline="", encoding="utf-8") as f:
      reader = csv.reader(f)
      header = next(reader)
      for cells in reader:
        if not cells:
          continue
        row = {}
        for name, cell in zip(header, cells):
          typ = plan.types.get(name)
          if typ is None or cell in plan.na_values:
            continue
          if typ == "string":
            row[name] = (cell.encode("utf-8"),)
          else:
            row[name] = (int(cell),) if typ == "int" else (_f32(float(cell)),)
        rows.append(row)
  return rows


def _assert_round_trip(plan, root, summary, expected):
  got = _rows_read_back(root, summary.row_counts)
  assert len(got) == len(expected) == summary.total_rows
  assert _multiset(got) == _multiset(expected)


# ----------------------------------------------------------------------------- framing


def test_framing_of_records_whose_lengths_sum_to_n_times_the_first(tmp_path):
  """The reproduction of issue 11: lengths 15, 14 and 16 sum to 3 x 15. Every record must
  carry its own length and CRCs, byte for byte as TensorFlow's own writer frames them."""
  encoder = ExampleEncoder([], ["s"])
  batch = RowBatch(("src", 0), {}, {"s": [b"bb", b"a", b"ccc"]}, [b"1", b"2", b"3"])
  encoded = encoder.encode(batch)
  assert encoded.ends.tolist() == [15, 29, 45]
  path = str(tmp_path / "tf.tfrecord")
  with tf.io.TFRecordWriter(path) as w:
    for record in encoded.records():
      w.write(record)
  with open(path, "rb") as f:
    assert write.frame_tfrecords(encoded) == f.read()


def test_verify_reports_a_record_whose_data_fails_its_crc(tmp_path):
  encoder = ExampleEncoder(["x"])
  batch = RowBatch(("src", 0), {"x": np.arange(3, dtype=np.float64)}, {}, np.arange(3))
  framed = bytearray(write.frame_tfrecords(encoder.encode(batch)))
  record_len = len(framed) // 3
  framed[record_len + 14] ^= 0xFF  # A data byte of record 1.
  path = str(tmp_path / "bad.gz")
  with open(path, "wb") as f:
    f.write(gzip.compress(bytes(framed)))
  with pytest.raises(verify.CorruptRecordError, match=r"bad\.gz: record 1 .*fails its CRC"):
    verify.read_rows(path)


def test_verify_output_reports_a_row_count_mismatch(tmp_path):
  _, root, summary = _ingest(tmp_path, ExampleGenConfig(rows=50))
  counts = dict(summary.row_counts, train=summary.row_counts["train"] + 1)
  with pytest.raises(verify.CorruptRecordError, match=r"Split-train: read back \d+ rows"):
    verify.verify_output(root, counts, ["eval", "train"])


# ----------------------------------------------------------------------------- sources


TAXI_DROPPED = ("tips", "trip_start_timestamp")


@pytest.fixture(scope="module")
def big_tipper_csv(tmp_path_factory):
  """The big_tipper taxi CSV of the tfx wheel without tips and trip_start_timestamp."""
  source = os.path.join(os.path.dirname(sources.taxi_csv_path()), os.pardir,
                        "big_tipper_label", "data.csv")
  path = str(tmp_path_factory.mktemp("taxi") / "big_tipper.csv")
  with open(source, newline="", encoding="utf-8") as f, open(path, "w", newline="",
                                                               encoding="utf-8") as out:
    reader, writer = csv.reader(f), csv.writer(out, lineterminator="\n")
    header = next(reader)
    keep = [i for i, name in enumerate(header) if name not in TAXI_DROPPED]
    for cells in [header] + list(reader):
      writer.writerow([cells[i] for i in keep])
  return path


def test_taxi_big_tipper_csv_round_trips_and_tensorflow_reads_every_shard(
    tmp_path, big_tipper_csv):
  config = ExampleGenConfig(source=big_tipper_csv, label="big_tipper", verify_output=True)
  plan, root, summary = _ingest(tmp_path, config)
  assert summary.total_rows == 15002
  assert {"payment_type", "company"} <= set(plan.string_keys)
  _assert_round_trip(plan, root, summary, _expected_csv_rows(plan))
  # TensorFlow's reader checks the data CRCs too (it raised DataLossError before the fix).
  files = [p for s in summary.row_counts for p in verify.split_files(root, s)]
  count = sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))
  assert count == 15002


_TEXTS = ["naïve café", "日本語のテキスト", "emoji 🚀 rocket", "a, b, c", 'say "hi", then go',
          "trailing space ", "x", "comma,at,end,", "tab\tinside", "ünïcödé, quoted \"bits\""]
_CATEGORIES = ["red", "green", "blue", "ultra-violet", "Ωmega"]


def _generated_csv(directory, seed):
  """A seeded CSV (1 or 2 files) of float, int, text, category and label columns."""
  rng = np.random.default_rng(seed)
  n = int(rng.integers(400, 2600))
  header = ["f_float", "i_int", "s_text", "s_cat", "y"]
  rows = []
  for _ in range(n):
    scale = 10.0 ** int(rng.integers(-3, 7))
    f_val = "" if rng.random() < 0.1 else f"{rng.normal() * scale:.6f}"
    i_val = "" if rng.random() < 0.1 else str(int(rng.integers(-2**40, 2**40)))
    pick = rng.random()
    if pick < 0.1:
      text = ""
    elif pick < 0.2:  # Long strings, up to several kB.
      text = "L" + "".join(rng.choice(list("abcdefgh ,\"ü"), int(rng.integers(100, 5000))))
    else:
      text = _TEXTS[int(rng.integers(len(_TEXTS)))] + f" #{int(rng.integers(1000))}"
    cat = "" if rng.random() < 0.05 else _CATEGORIES[int(rng.integers(len(_CATEGORIES)))]
    rows.append([f_val, i_val, text, cat, f"{rng.normal():.5f}"])
  files = 2 if seed % 4 == 1 else 1
  terminator = "\r\n" if seed % 2 else "\n"
  per_file = -(-n // files)
  for k in range(files):
    with open(os.path.join(directory, f"part-{k}.csv"), "w", newline="",
              encoding="utf-8") as f:
      writer = csv.writer(f, lineterminator=terminator)
      writer.writerow(header)
      for i, row in enumerate(rows[k * per_file:(k + 1) * per_file]):
        writer.writerow(row)
        if i % 397 == 5:
          f.write(terminator)  # Blank lines are neither rows nor bad rows.
  return os.path.join(directory, "part-*.csv"), n


@pytest.mark.parametrize("seed", range(20))
def test_generated_csv_round_trips(tmp_path, monkeypatch, seed):
  directory = tmp_path / "csv"
  directory.mkdir()
  pattern, n = _generated_csv(str(directory), seed)
  if seed % 3 == 0:  # Many small part files: chunks cross part-buffer boundaries.
    monkeypatch.setattr(write, "PART_BUFFER_BYTES", 2000 + 1000 * seed)
  types = ({"f_float": "float", "i_int": "int", "s_text": "string", "s_cat": "string"}
           if seed % 2 == 0 else None)  # Odd seeds: the types are inferred.
  config = ExampleGenConfig(source=pattern, label="y", column_types=types,
                            num_workers=1 + seed % 3, shards_per_worker=1 + seed % 2,
                            verify_output=seed % 5 == 0)
  plan, root, summary = _ingest(tmp_path, config)
  assert plan.types == {"f_float": "float", "i_int": "int", "s_text": "string",
                        "s_cat": "string", "y": "float"}
  assert summary.total_rows == n
  _assert_round_trip(plan, root, summary, _expected_csv_rows(plan))


def test_synthetic_source_round_trips(tmp_path):
  config = ExampleGenConfig(rows=3 * sources.SYNTHETIC_CHUNK_ROWS + 17, num_features=3,
                            verify_output=True)
  plan, root, summary = _ingest(tmp_path, config)
  expected = []
  for chunk in sources.synthetic_chunks(plan.rows):
    batch = sources.generate_synthetic_chunk(plan, chunk)
    for i in range(batch.num_rows):
      expected.append({k: (_f32(v[i]),) for k, v in batch.numeric.items()})
  _assert_round_trip(plan, root, summary, expected)


class _Sinks(beam.pipeline.PipelineVisitor):
  """The primitive transforms in the order a runner visits them, and which of them are
  sinks (no output read by another transform, as a main or side input)."""

  def __init__(self):
    self.order = []
    self.read = set()

  def visit_transform(self, transform_node):
    self.order.append(transform_node)
    self.read.update(transform_node.inputs)
    self.read.update(getattr(s, "pvalue", s) for s in transform_node.side_inputs)

  def sinks(self):
    return [n for n in self.order if not any(o in self.read for o in n.outputs.values())]


@pytest.mark.parametrize("source", ["csv", "synthetic"])
def test_the_ingest_has_one_sink_the_last_transform_so_dask_runs_it_all(tmp_path, source):
  """Beam's DaskRunner computes only the last primitive it visits and its inputs
  (apache_beam/runners/dask/dask_runner.py, run_pipeline, Beam 2.74.0): a second sink
  (split_stats.json next to summary.json) was never run there, and the ingest on Dask
  wrote no shards (test_example_gen_dask's MissingOutputError)."""
  if source == "csv":
    lines = ["a,s,y"] + [f"{i},s{i % 3},{i * 0.5}" for i in range(20)]
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n")
    config = ExampleGenConfig(label="y", source=str(tmp_path / "data.csv")).validate()
  else:
    config = ExampleGenConfig(rows=100, num_features=2).validate()
  pipeline = beam.Pipeline()
  splits = ingest.partition.shorthand_splits(config.split_ratios, config.split_key)
  ingest.build(pipeline, config, sources.plan_source(config), str(tmp_path / "out"), splits)
  visitor = _Sinks()
  pipeline.visit(visitor)
  sinks = visitor.sinks()
  assert [s.full_label for s in sinks] == [visitor.order[-1].full_label], [
      s.full_label for s in sinks]
