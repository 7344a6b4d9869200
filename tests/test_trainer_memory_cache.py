"""The in-memory cache of the training split (memory_cache.py, config ``cache``): it holds
exactly the examples the streamed path parses, visits each once per epoch in a seeded
order, resumes at the same batch, shards by data, and trains to the same weights."""
import os

import numpy as np
import pytest

import trainer_util as tu
import tensorflow as tf
import tf_keras

from tfx_parallel.components.common import tfenv

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.inputs import memory_cache, stats, tf_data
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor

ROWS = 300   # Not a multiple of BATCH: batches run across epoch boundaries.
BATCH = 64
tfenv.skip_tf_keras_autograph()  # As the training process: fit starts in 1 s, not 15.


@pytest.fixture(scope="module")
def split(tmp_path_factory):
  """(train files, Preprocessor with normalisation and a string vocabulary)."""
  root = str(tmp_path_factory.mktemp("cache"))
  tu.write_classification_examples(root, rows=ROWS, eval_rows=20)
  spec, norm, _ = stats.prepare(root, ["x"], ["color"], "y", task=None, max_vocabulary=100,
                                hash_buckets=0, hparams={}, skip_missing_labels=False,
                                normalize=True)
  files = sorted(tf.io.gfile.glob(os.path.join(root, "Split-train", "*")))
  return files, Preprocessor(spec, norm)


@pytest.fixture(scope="module")
def columns(split):
  files, pre = split
  return memory_cache.load(files, pre)


def _rows(x, y) -> np.ndarray:
  """One row per example: (x, color id, label); x (a unique random float) identifies it."""
  return np.concatenate([x["x"].numpy().astype(np.float64),
                         x["color"].numpy().astype(np.float64),
                         y.numpy().reshape(-1, 1).astype(np.float64)], axis=1)


def _sorted(rows: np.ndarray) -> np.ndarray:
  return rows[np.argsort(rows[:, 0], kind="stable")]


def _batches(ds, n):
  return [_rows(x, y) for x, y in ds.take(n)]


def test_the_cache_holds_exactly_the_streamed_examples_preprocessed(split, columns):
  files, pre = split
  streamed = np.concatenate([_rows(x, y) for x, y in tf_data.make_dataset(
      files, pre, BATCH, shuffle=False, drop_remainder=False)])
  cached = _rows(columns.features, columns.labels)
  assert columns.rows == ROWS and len(np.unique(cached[:, 0])) == ROWS
  np.testing.assert_array_equal(_sorted(cached), _sorted(streamed))
  assert columns.features["color"].dtype == tf.int64  # ids, looked up once at load
  assert abs(float(np.mean(cached[:, 0]))) < 1e-3     # x standardised, as streamed
  assert columns.nbytes() == ROWS * memory_cache.example_bytes(pre.spec)


def test_each_epoch_visits_every_example_once_and_batches_run_across_epochs(columns):
  ds = memory_cache.dataset(columns, BATCH, seed=7)
  x_spec, y_spec = ds.element_spec  # Static batch shapes, as the strategies expect.
  assert x_spec["x"].shape == [BATCH, 1] and y_spec.shape == [BATCH, 1]
  batches = _batches(ds, 9)
  assert all(b.shape == (BATCH, 3) for b in batches)
  stream = np.concatenate(batches)             # 576 rows: epoch 0, then most of epoch 1
  everything = _sorted(_rows(columns.features, columns.labels))
  np.testing.assert_array_equal(_sorted(stream[:ROWS]), everything)
  second = stream[ROWS:]
  assert len(np.unique(second[:, 0])) == len(second) == 9 * BATCH - ROWS
  assert not np.array_equal(stream[:len(second), 0], second[:, 0])  # reshuffled per epoch


def test_every_dtype_and_shape_comes_back_exactly_and_the_padding_never_does():
  """97 rows in blocks of 2 (batch 64): the last block is padded. Over three epochs
  every row comes back once per epoch, whole: 8-byte values beyond 2**32, a [2, 3]
  column, strings and rank-1 labels, row for row."""
  rows, batch = 97, 64
  rng = np.random.default_rng(5)
  features = {
      "id": tf.constant(np.arange(rows, dtype=np.int32).reshape(-1, 1)),
      "f": tf.constant(rng.standard_normal((rows, 1)).astype(np.float32)),
      "big": tf.constant(rng.integers(-2**40, 2**40, (rows, 2)), tf.int64),
      "cube": tf.constant(rng.standard_normal((rows, 2, 3)), tf.float64),
      "word": tf.constant([[f"w{i}".encode()] for i in range(rows)]),
  }
  labels = tf.constant(rng.integers(-5, 5, rows), tf.int64)
  cols = memory_cache.Columns(features, labels, rows, 0.0)
  assert memory_cache.block_rows(batch) == 2
  ids = []
  for x, y in memory_cache.dataset(cols, batch, seed=9).take(3 * rows // batch + 1):
    assert {k: v.dtype for k, v in x.items()} == {k: v.dtype for k, v in features.items()}
    assert x["cube"].shape == [batch, 2, 3] and y.shape == [batch]
    i = x["id"].numpy()[:, 0]
    for name, t in features.items():
      np.testing.assert_array_equal(x[name].numpy(), t.numpy()[i], err_msg=name)
    np.testing.assert_array_equal(y.numpy(), labels.numpy()[i])
    ids.extend(i)
  for epoch in range(3):
    assert sorted(ids[epoch * rows:(epoch + 1) * rows]) == list(range(rows)), epoch
  # A resume 128 rows in starts inside a block of epoch 1 (row 31), on the same rows.
  resumed = [x["id"].numpy()[:, 0] for x, _ in
             memory_cache.dataset(cols, batch, seed=9, skip_batches=2).take(2)]
  assert list(np.concatenate(resumed)) == ids[2 * batch:4 * batch]


def test_rows_are_shuffled_once_then_blocks_reshuffled_each_epoch(columns):
  """Batch 64: blocks of 2 rows. Both epochs pair the same rows (a block stays whole),
  the pairs are not neighbours in the files, and the blocks come in a new order."""
  k = memory_cache.block_rows(BATCH)
  assert k == 2 and memory_cache.block_rows(512) == memory_cache.BLOCK_ROWS == 16
  assert memory_cache.block_rows(63) == 1
  stream = np.concatenate(_batches(memory_cache.dataset(columns, BATCH, seed=7), 9))[:, 0]
  file_order = _rows(columns.features, columns.labels)[:, 0]
  position = {v: i for i, v in enumerate(file_order)}
  epochs = [stream[:ROWS].reshape(-1, k), stream[ROWS:2 * ROWS - ROWS % BATCH].reshape(-1, k)]
  pairs = [{frozenset(p) for p in e} for e in epochs]
  assert pairs[1] <= pairs[0]  # the blocks of epoch 0 again
  assert not np.array_equal(epochs[0][:len(epochs[1])], epochs[1])  # in a new order
  gaps = [abs(position[a] - position[b]) for a, b in epochs[0]]
  assert np.median(gaps) > 10  # shuffled once before blocking: not file neighbours


def test_the_batches_do_not_depend_on_the_chunk_size(columns, monkeypatch):
  whole = _batches(memory_cache.dataset(columns, BATCH, seed=2), 12)
  monkeypatch.setattr(memory_cache, "CHUNK_ROWS", 2 * BATCH)  # 2 batches per gather
  chunked = _batches(memory_cache.dataset(columns, BATCH, seed=2), 12)
  for i, (a, b) in enumerate(zip(whole, chunked)):
    np.testing.assert_array_equal(b, a, err_msg=f"batch {i}")


def test_the_order_depends_on_the_seed_only(columns):
  first = _batches(memory_cache.dataset(columns, BATCH, seed=3), 6)
  again = _batches(memory_cache.dataset(columns, BATCH, seed=3), 6)
  other = _batches(memory_cache.dataset(columns, BATCH, seed=4), 6)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)
  assert not all(np.array_equal(a, b) for a, b in zip(first, other))


@pytest.mark.parametrize("chunk_rows", [memory_cache.CHUNK_ROWS, 3 * BATCH])
@pytest.mark.parametrize("skip", [2, 6])  # 6 * 64 = 384: resumes inside epoch 1
def test_a_resume_starts_at_the_batch_an_uninterrupted_run_takes(columns, skip, chunk_rows,
                                                                 monkeypatch):
  monkeypatch.setattr(memory_cache, "CHUNK_ROWS", chunk_rows)  # 1 or several per epoch
  straight = _batches(memory_cache.dataset(columns, BATCH, seed=1), 10)
  resumed = _batches(memory_cache.dataset(columns, BATCH, seed=1, skip_batches=skip), 10 - skip)
  for i, (a, b) in enumerate(zip(straight[skip:], resumed)):
    np.testing.assert_array_equal(b, a, err_msg=f"batch {skip + i}")


def test_data_shards_partition_the_split(split, columns):
  files, pre = split
  shards = [memory_cache.load(files, pre, data_shard=(2, i)) for i in range(2)]
  assert [s.rows for s in shards] == [ROWS // 2, ROWS // 2]
  both = np.concatenate([_rows(s.features, s.labels) for s in shards])
  np.testing.assert_array_equal(_sorted(both), _sorted(_rows(columns.features,
                                                             columns.labels)))


def test_examples_without_a_label_are_skipped_when_asked(tmp_path):
  root = str(tmp_path)
  tu.write_classification_examples(root, rows=200, eval_rows=20, drop_label_every=40)
  spec, _, skipped = stats.prepare(root, ["x"], ["color"], "y", task=None, max_vocabulary=10,
                                   hash_buckets=0, hparams={}, skip_missing_labels=True,
                                   normalize=False)
  files = sorted(tf.io.gfile.glob(os.path.join(root, "Split-train", "*")))
  assert memory_cache.load(files, Preprocessor(spec), skip_missing_labels=True).rows == 195
  with pytest.raises(tf.errors.InvalidArgumentError, match="y"):
    memory_cache.load(files, Preprocessor(spec))


def _train(ds, steps):
  tf_keras.utils.set_random_seed(0)
  model = tf_keras.Sequential([tf_keras.layers.Dense(3)])
  model.compile(optimizer=tf_keras.optimizers.SGD(0.5),
                loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  features = ds.map(lambda x, y: (tf.concat([x["x"], tf.cast(x["color"], tf.float32)], 1), y))
  model.fit(features, epochs=1, steps_per_epoch=steps, verbose=0)
  return model.get_weights()


def test_full_batch_training_gives_the_streamed_paths_weights(split, columns):
  """With the batch = the split, every step sees one whole epoch on both paths (in a
  different order, which a mean gradient ignores): the same weights after 3 steps."""
  files, pre = split
  cached = _train(tf_data.training_dataset(files, pre, ROWS, cache="memory", seed=5), 3)
  streamed = _train(tf_data.training_dataset(files, pre, ROWS, cache="none", seed=5,
                                          shuffle_buffer=50), 3)
  dropped = _train(tf_data.training_dataset(files, pre, ROWS - 1, cache="memory", seed=5), 3)
  for a, b in zip(cached, streamed):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert not np.allclose(dropped[0], cached[0], rtol=1e-5, atol=1e-6)  # the test can fail


def test_training_dataset_takes_a_resolved_mode(split):
  files, pre = split
  with pytest.raises(ValueError, match=r"resolve 'auto' with memory_cache.choose\). "
                                       r"Received: 'auto'"):
    tf_data.training_dataset(files, pre, BATCH, cache="auto")


# ------------------------------------------------------------------------- the choice


def test_auto_caches_under_the_budget_and_streams_over_it():
  gib = 2**30
  under = memory_cache.choose("auto", 1_000_000, 52, available=8 * gib)
  assert under.mode == "memory" and under.estimated_bytes == 52_000_000
  assert under.budget_bytes == 2 * gib and "under the budget" in under.reason
  over = memory_cache.choose("auto", 50_000_000, 52, available=8 * gib)  # 2.4 GiB > 2 GiB
  assert over.mode == "none" and "over the budget" in over.reason
  assert memory_cache.choose("auto", 10, 52, available=None).mode == "none"
  for mode in ("memory", "none"):  # As configured, whatever the size.
    assert memory_cache.choose(mode, 50_000_000, 52, available=8 * gib).mode == mode


def test_example_bytes_counts_inputs_as_parsed_and_the_label():
  spec = ms.ModelSpec(features=(ms.FeatureSpec("a", ms.FLOAT32),
                                ms.FeatureSpec("n", ms.INT64),
                                ms.FeatureSpec("s", ms.STRING, vocabulary=("u",), num_ids=2)),
                      label_key="y", task=ms.MULTICLASS, num_classes=3)
  assert memory_cache.example_bytes(spec) == 4 + 8 + 8 + 8


def test_available_memory_reads_memavailable(tmp_path):
  meminfo = tmp_path / "meminfo"
  meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:    1000000 kB\n")
  assert memory_cache.available_memory(str(meminfo)) == 1_024_000_000


def test_an_unknown_cache_mode_is_rejected_naming_the_key():
  with pytest.raises(ConfigError, match=r"^cache: must be one of \['auto', 'memory', "
                                        r"'none'\]. Received: 'disk'$") as e:
    TrainerConfig(cache="disk").validate()
  assert e.value.key == "cache"
  assert TrainerConfig().cache == "auto"


def test_the_cli_sets_the_cache_and_rejects_other_values(capsys):
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  parse = lambda *a: cli.config_from_args(cli.build_parser().parse_args(["run", *a])).trainer
  assert parse().cache == "auto"
  assert parse("--input-cache", "none").cache == "none"
  with pytest.raises(SystemExit):
    parse("--input-cache", "disk")
  assert "argument --input-cache: invalid choice: 'disk'" in capsys.readouterr().err
