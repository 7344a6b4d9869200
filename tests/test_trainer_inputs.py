"""description.describe on Examples that are not PartitionedExampleGen's: features and types
from the data or a schema, the label from config, splits from config, row counts counted,
and the multi-worker DATA-sharding fallback."""
import os

import numpy as np
import pytest

import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts
from tfx.utils import io_utils

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.inputs import description, stats, tf_data
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor


def _example(fare: float, hour: int, company: str, label: int) -> bytes:
  f = tf.train.Feature
  return tf.train.Example(features=tf.train.Features(feature={
      "fare": f(float_list=tf.train.FloatList(value=[fare])),
      "hour": f(int64_list=tf.train.Int64List(value=[hour])),
      "company": f(bytes_list=tf.train.BytesList(value=[company.encode()])),
      "big_tipper": f(int64_list=tf.train.Int64List(value=[label])),
  })).SerializeToString()


def write_stock_examples(uri: str, splits=("train", "eval"), rows=(120, 40),
                         files_per_split=1) -> standard_artifacts.Examples:
  """An Examples artifact as a stock ExampleGen writes it: Split-<name>/ gzip
  TFRecords, split_names, no custom properties."""
  rng = np.random.default_rng(0)
  for split, n in zip(splits, rows):
    d = os.path.join(uri, f"Split-{split}")
    os.makedirs(d, exist_ok=True)
    writers = [tf.io.TFRecordWriter(os.path.join(d, f"data_tfrecord-{i:05d}-of-"
                                                    f"{files_per_split:05d}.gz"),
                                    options="GZIP") for i in range(files_per_split)]
    for i in range(n):
      fare = float(rng.uniform(2, 40))
      writers[i % files_per_split].write(
          _example(fare, int(rng.integers(0, 24)), ["a", "b", "c"][i % 3], int(fare > 15)))
    for w in writers:
      w.close()
  examples = standard_artifacts.Examples()
  examples.uri = uri
  examples.split_names = artifact_utils.encode_split_names(list(splits))
  return examples


def write_schema(uri: str, types: dict, domains: dict = None) -> str:
  schema = schema_pb2.Schema()
  for name, t in types.items():
    feature = schema.feature.add(name=name, type=t)
    if domains and name in domains:
      feature.string_domain.value.extend(domains[name])
  os.makedirs(uri, exist_ok=True)
  io_utils.write_pbtxt_file(os.path.join(uri, description.SCHEMA_FILE), schema)
  return uri


@pytest.fixture(scope="module")
def stock(tmp_path_factory):
  return write_stock_examples(str(tmp_path_factory.mktemp("stock")))


FULL_SCHEMA = {"fare": schema_pb2.FLOAT, "hour": schema_pb2.INT,
               "company": schema_pb2.BYTES, "big_tipper": schema_pb2.INT}


def test_features_and_types_come_from_the_data_without_custom_properties(stock):
  d = description.describe(stock, label_key="big_tipper")
  assert d.source == "data" and d.label_key == "big_tipper"
  assert d.numeric == (("fare", "float32"), ("hour", "int64"))
  assert d.string_keys == ("company",)
  assert d.rows is None and d.num_shards == 0
  assert [os.path.basename(os.path.dirname(f)) for f in d.files["train"]] == ["Split-train"]


def test_the_label_must_come_from_config_when_the_artifact_has_none(stock):
  with pytest.raises(ConfigError, match=r"^label_key: not set, and the Examples artifact at "
                                        r".* has no 'label_key' property .* Received: None"):
    description.describe(stock)
  with pytest.raises(description.InputError, match=r"label 'tip' \(config label_key\) is not a "
                                              r"feature of the first examples of split 'train'"):
    description.describe(stock, label_key="tip")


def test_splits_are_named_in_config(tmp_path):
  examples = write_stock_examples(str(tmp_path), splits=("fit", "holdout"))
  d = description.describe(examples, "fit", "holdout", "big_tipper")
  assert set(d.files) == {"fit", "holdout"}
  with pytest.raises(ConfigError, match=r"^eval_split: split 'eval' is not in the Examples "
                                        r"artifact .* whose splits are \['fit', 'holdout'\]"):
    description.describe(examples, "fit", "eval", "big_tipper")


def test_another_payload_format_is_rejected(tmp_path):
  examples = write_stock_examples(str(tmp_path))
  examples_utils.set_payload_format(examples, example_gen_pb2.FORMAT_PARQUET)
  with pytest.raises(description.InputError, match=r"holds FORMAT_PARQUET; the trainer reads "
                                              r"FORMAT_TF_EXAMPLE"):
    description.describe(examples, label_key="big_tipper")


@pytest.mark.parametrize("normalize", [False, True], ids=["raw", "normalize"])
def test_the_scan_counts_rows_and_ints_stay_ints_unless_standardised(stock, normalize):
  """int64 features reach the model as int64; with normalize they are standardised like
  the floats and the spec says float32 (raw int64), so no model casts them back."""
  d = description.describe(stock, label_key="big_tipper")
  p = stats.prepare_all(stock.uri, d.feature_keys, d.string_keys, d.label_key, task=None,
                        max_vocabulary=10, hash_buckets=0, hparams={},
                        skip_missing_labels=False, normalize=normalize, normalize_clip=5.0,
                        dtypes=d.dtypes, files=d.files)
  assert p.rows == {"train": 120, "eval": 40}
  hour = p.spec.feature("hour")
  assert p.spec.task == "binary" and hour.example_dtype == "int64"
  x, _ = next(iter(tf_data.make_dataset(d.files["train"], Preprocessor(p.spec, p.normalization),
                                     120, shuffle=False)))
  assert x["fare"].dtype == tf.float32
  if normalize:
    assert (hour.dtype, hour.raw_dtype) == ("float32", "int64")
    assert 1.0 < p.normalization["mean"][1] < 23.0 and p.normalization["std"][1] > 0.5
    assert 2.0 < p.normalization["mean"][0] < 40.0
    assert x["hour"].dtype == tf.float32
    assert abs(float(tf.reduce_mean(x["hour"]))) < 0.2  # standardised over the train split
    assert abs(float(tf.reduce_mean(x["fare"]))) < 0.5
  else:
    assert (hour.dtype, hour.raw_dtype) == ("int64", None) and p.normalization is None
    assert x["hour"].dtype == tf.int64 and int(tf.reduce_max(x["hour"])) >= 1


def test_a_schema_gives_types_and_string_domains(stock, tmp_path):
  schema_uri = write_schema(str(tmp_path / "schema"), FULL_SCHEMA, {"company": ["c", "a", "b"]})
  d = description.describe(stock, label_key="big_tipper", schema_uri=schema_uri)
  assert d.source == "schema"
  assert d.numeric == (("fare", "float32"), ("hour", "int64"))
  assert d.vocabularies == {"company": ("c", "a", "b")}
  p = stats.prepare_all(stock.uri, d.feature_keys, d.string_keys, d.label_key, task=None,
                        max_vocabulary=10, hash_buckets=0, hparams={},
                        skip_missing_labels=False, normalize=False, dtypes=d.dtypes,
                        files=d.files, vocabularies=d.vocabularies)
  assert p.spec.feature("company").vocabulary == ("c", "a", "b")


def test_a_schema_without_the_label_fails_naming_it(stock, tmp_path):
  types = {k: v for k, v in FULL_SCHEMA.items() if k != "big_tipper"}
  schema_uri = write_schema(str(tmp_path / "schema"), types)
  with pytest.raises(description.InputError, match=r"^the schema lacks the label 'big_tipper'"):
    description.describe(stock, label_key="big_tipper", schema_uri=schema_uri)


def test_a_schema_type_that_disagrees_with_the_data_fails_naming_the_feature(stock, tmp_path):
  schema_uri = write_schema(str(tmp_path / "schema"), dict(FULL_SCHEMA, hour=schema_pb2.FLOAT))
  with pytest.raises(description.InputError, match=r"^feature 'hour' is float32 in the schema but "
                                              r"int64 in the data \(split 'train'"):
    description.describe(stock, label_key="big_tipper", schema_uri=schema_uri)


def test_custom_properties_are_hints(tmp_path):
  examples = write_stock_examples(str(tmp_path))
  examples.set_string_custom_property("feature_keys", '["fare"]')
  examples.set_string_custom_property("label_key", "big_tipper")
  examples.set_string_custom_property("row_counts", '{"train": 120, "eval": 40}')
  examples.set_int_custom_property("num_shards", 1)
  d = description.describe(examples)
  assert d.source == "custom properties" and d.label_key == "big_tipper"
  assert d.numeric == (("fare", "float32"),) and d.string_keys == ()
  assert d.rows == {"train": 120, "eval": 40} and d.num_shards == 1


def test_multi_worker_falls_back_to_data_sharding(stock, capsys):
  files = list(description.describe(stock, label_key="big_tipper").files["train"])
  assert tf_data.shard_files(files * 4, "train", 2, 1) == ((files * 4)[1::2], None)
  got = {}
  for index in (0, 1):
    shard_files, shard = tf_data.shard_files(files, "train", 2, index)
    assert shard_files == files and shard == (2, index)
    ds = tf.data.TFRecordDataset(shard_files, compression_type="GZIP").shard(*shard)
    got[index] = [r.numpy() for r in ds]
  assert "falling back to DATA sharding" in capsys.readouterr().out
  assert len(got[0]) == len(got[1]) == 60 and not set(got[0]) & set(got[1])


@pytest.mark.slow
def test_two_workers_train_on_a_single_file_by_data_sharding(tmp_path):
  """A stock ExampleGen writes one file per split: multi_worker falls back to DATA
  sharding (and says so) instead of failing."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / "ex")
  keys_, _, rows = tu.write_examples(root, rows=1024, eval_rows=128, shards=1)
  job = tu.job_dict(str(tmp_path), root, keys_, rows, layout="multi_worker", workers=2,
                    steps=40, batch_size=32, learning_rate=0.1, log_every=10,
                    checkpoint_every=0)
  job["num_shards"] = 1
  path = tmp_path / "job.json"
  path.write_text(json.dumps(job))
  code = ("import json, sys; from tfx_parallel.components.distributed_trainer.run import "
          "launcher; from tfx_parallel.components.distributed_trainer.run.train import Job; "
          f"launcher.launch(Job(**json.load(open({str(path)!r}))), 'multi_worker', 2)")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  assert "falling back to DATA sharding" in proc.stdout + proc.stderr
  with open(os.path.join(job["history_dir"], "history.json")) as f:
    history = json.load(f)
  assert history["layout"] == "multi_worker" and history["replicas"] == 2
  assert np.isfinite(history["records"][-1]["loss"])
  assert history["records"][-1]["loss"] < history["records"][0]["loss"]
