"""Encoding to gzip TFRecord chunks, shard writing (exact file count), staged commit."""
import glob
import gzip
import os

import numpy as np
import pytest

import apache_beam as beam
import tensorflow as tf
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from tfx_parallel.components.partitioned_example_gen import write
from tfx_parallel.components.partitioned_example_gen.rows import EncodedBatch
from tfx_parallel.components.partitioned_example_gen.rows import ExampleEncoder
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch


def _batch(start, n):
  return RowBatch(("src", start), {"x": np.arange(start, start + n, dtype=np.float64)}, {},
                  np.arange(start, start + n))


def _x_values(path):
  """The x feature of every Example in a gzip TFRecord file, read by TensorFlow."""
  return [tf.train.Example.FromString(r.numpy()).features.feature["x"].float_list.value[0]
          for r in tf.data.TFRecordDataset(path, compression_type="GZIP")]


def test_tfrecord_framing_and_concatenated_gzip_members_read_back_in_tensorflow(tmp_path):
  encoder = ExampleEncoder(["x"])
  chunks = [write.to_gzip_chunk(encoder.encode(_batch(s, 3))) for s in (0, 3)]
  path = str(tmp_path / "f.gz")
  with open(path, "wb") as f:
    f.write(b"".join(c.data for c in chunks))
  assert _x_values(path) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
  assert [c.num_rows for c in chunks] == [3, 3]


def test_encode_examples_transform():
  encoder = ExampleEncoder(["x"])
  with beam.Pipeline() as p:
    out = (p | beam.Create([(("train", 1), _batch(0, 4))])
           | write.EncodeExamples(encoder)
           | beam.MapTuple(lambda key, chunk: (key, chunk.sort_key, chunk.num_rows,
                                               gzip.decompress(chunk.data))))
    expected_data = write.frame_tfrecords(encoder.encode(_batch(0, 4)))
    assert_that(out, equal_to([(("train", 1), ("src", 0), 4, expected_data)]))


@pytest.mark.parametrize("part_buffer_bytes", [1, write.PART_BUFFER_BYTES])
def test_write_shards_writes_every_shard_even_empty_ones(tmp_path, part_buffer_bytes):
  root = str(tmp_path)
  encoder = ExampleEncoder(["x"])
  # Batches arrive out of order; the shard file keeps source order.
  parts = [(("train", 0), _batch(10, 2)), (("train", 0), _batch(0, 3)),
           (("eval", 2), _batch(20, 1))]
  with beam.Pipeline() as p:
    written = (p | beam.Create(parts) | write.EncodeExamples(encoder)
               | write.WriteShards(root, ["eval", "train"], 3, part_buffer_bytes))
    assert_that(written, equal_to([("train", 5), ("train", 0), ("train", 0),
                                   ("eval", 0), ("eval", 0), ("eval", 1)]))
  for split in ("train", "eval"):
    files = sorted(os.listdir(os.path.join(root, f"Split-{split}")))
    assert files == [f"data_tfrecord-0000{i}-of-00003.gz" for i in range(3)]
  assert _x_values(os.path.join(root, "Split-train", "data_tfrecord-00000-of-00003.gz")) == [
      0.0, 1.0, 2.0, 10.0, 11.0]
  assert _x_values(os.path.join(root, "Split-train", "data_tfrecord-00001-of-00003.gz")) == []
  # One part file per flush: per chunk with a 1-byte buffer, per bundle otherwise.
  parts = os.listdir(os.path.join(root, write.PARTS_DIR))
  assert len(parts) == 3 if part_buffer_bytes == 1 else 1 <= len(parts) <= 3


def test_write_summary_transform_and_read_summary(tmp_path):
  root = str(tmp_path)
  with beam.Pipeline() as p:
    written = p | "Written" >> beam.Create([("train", 3), ("train", 4), ("eval", 0)])
    skipped = p | "Skipped" >> beam.Create([2, 5])
    _ = written | write.WriteSummary(skipped, root)
  summary = write.read_summary(root, ["eval", "train", "test"])
  assert summary == write.IngestSummary({"eval": 0, "train": 7, "test": 0}, skipped_rows=7)
  assert summary.total_rows == 7


def _stage_files(staging):
  for split in ("train", "eval"):
    os.makedirs(os.path.join(staging, f"Split-{split}"))
    with open(os.path.join(staging, f"Split-{split}", "data_tfrecord-00000-of-00001.gz"),
              "wb") as f:
      f.write(b"x")


def test_staged_output_moves_files_into_place_and_cleans_up(tmp_path):
  uri = str(tmp_path / "examples")
  os.makedirs(uri)
  with write.staged_output(uri) as staging:
    assert staging.startswith(uri)
    _stage_files(staging)
    assert not os.path.exists(os.path.join(uri, "Split-train"))
  assert sorted(os.listdir(uri)) == ["Split-eval", "Split-train"]
  assert os.listdir(os.path.join(uri, "Split-train")) == ["data_tfrecord-00000-of-00001.gz"]


def test_staged_output_leaves_nothing_when_the_body_fails(tmp_path):
  uri = str(tmp_path / "examples")
  os.makedirs(uri)
  with pytest.raises(RuntimeError, match="boom"):
    with write.staged_output(uri) as staging:
      _stage_files(staging)
      raise RuntimeError("boom")
  assert os.listdir(uri) == []


def test_commit_refuses_to_overwrite_and_rolls_back(tmp_path):
  uri = str(tmp_path / "examples")
  os.makedirs(os.path.join(uri, "Split-train"))
  with pytest.raises(FileExistsError, match="Split-train already exists"):
    with write.staged_output(uri) as staging:
      _stage_files(staging)
  assert sorted(os.listdir(uri)) == ["Split-train"]  # Split-eval was rolled back.
  assert glob.glob(os.path.join(uri, ".staging-*")) == []


@pytest.mark.parametrize("records", [[b"abc", b"def", b"ghi"], [b"a", b"", b"bcdefgh" * 40]])
def test_frame_tfrecords_matches_tensorflow(tmp_path, records):
  path = str(tmp_path / "tf.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(record)
  ends = np.cumsum([len(r) for r in records])
  with open(path, "rb") as f:
    assert write.frame_tfrecords(EncodedBatch(("s", 0), b"".join(records), ends)) == f.read()


def test_encoded_batch_records_round_trip():
  encoded = EncodedBatch(("s", 0), b"abcdef", np.array([1, 3, 6]))
  assert list(encoded.records()) == [b"a", b"bc", b"def"]


def _mixed_batch(n, seed):
  rng = np.random.default_rng(seed)
  f = rng.normal(size=n)
  f[rng.random(n) < 0.2] = np.nan
  i = rng.integers(-5, 10**6, n).astype(np.float64)
  i[rng.random(n) < 0.2] = np.nan
  s = [None if k % 4 == 0 else ("é" * int(m)).encode() for k, m in
       enumerate(rng.integers(1, 40, n))]
  keys = [b"key%d" % k for k in rng.integers(0, 10**9, n)]
  return RowBatch(("src", seed), {"f": f, "i": i}, {"s": s}, keys)


@pytest.mark.parametrize("num_shards", [1, 3])
@pytest.mark.parametrize("mixed", [True, False])
def test_encode_and_partition_writes_the_chunks_of_partition_then_encode(num_shards, mixed):
  """One encoding per batch, records dealt out to (split, shard), gives the chunks of
  partitioning first and encoding each part: the same keys, rows and gzip bytes."""
  from tfx_parallel.components.partitioned_example_gen.partition import Partitioner  # pylint: disable=g-import-not-at-top
  splits = [("train", 4), ("eval", 1)]
  if mixed:  # Floats and ints with missing values, strings: records of many lengths.
    batch, encoder = _mixed_batch(300, num_shards), ExampleEncoder(["f", "i"], ["s"], ["i"])
  else:  # Complete floats: every record the same length.
    batch, encoder = _batch(0, 300), ExampleEncoder(["x"])
  partitioner = Partitioner(splits, num_shards)
  expected = [(key, write.to_gzip_chunk(encoder.encode(part)))
              for key, part in partitioner.partition(batch)]
  dealt = list(write._EncodeAndPartition(encoder, partitioner).process(batch))  # pylint: disable=protected-access
  assert len(expected) == 2 * num_shards
  assert dealt == expected


def test_a_retry_removes_the_staging_a_killed_attempt_left(tmp_path):
  """A pod killed mid-ingest never runs its `finally`: its .staging-* stays inside the
  output, which KFP's retry writes again (the same URI). The retry removes it first, so
  the committed artifact holds only Split-*."""
  uri = str(tmp_path / "examples")
  _stage_files(os.path.join(uri, ".staging-killedattempt"))  # The killed attempt's.
  with write.staged_output(uri) as staging:
    _stage_files(staging)
  assert sorted(os.listdir(uri)) == ["Split-eval", "Split-train"]
