"""Drop-in use in a stock TFX pipeline (issue #14), under LocalDagRunner with SQLite MLMD,
on the taxi CSV from the tfx wheel (string and int columns included, a binary label
derived here; the main run keeps the taxi data's empty cells, issue #28):

  CsvExampleGen -> StatisticsGen -> SchemaGen -> DistributedTrainer (mesh 2x2, user
  module, schema input) -> ConvergenceEvaluator -> stock Evaluator (TFMA) -> Pusher
                                            \\-> stock Trainer (run_fn) -> ConvergenceEvaluator

One pipeline run is shared by the tests of this module.
"""
import contextlib
import csv
import pathlib
import os
import textwrap

import numpy as np
import pytest

import tensorflow as tf
from ml_metadata.proto import metadata_store_pb2
from tfx import v1 as tfx

from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import tfma_stage
from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator
from tfx_parallel.components.convergence_evaluator.config import (BinaryThresholds,
                                                                  EvaluatorConfig)
from tfx_parallel.components.distributed_trainer.component import DistributedTrainer
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.pipeline import summary

ROWS = 2000
LABEL = "big_tipper"
COLUMNS = ["trip_start_hour", "trip_start_day", "trip_miles", "trip_seconds", "fare",
           "payment_type", "company"]
# Columns with empty cells as the taxi data ships them (float, int; 'company', a string,
# has them too), kept in the main run's CSV (write_taxi_csv(holes=True)).
HOLED = ["dropoff_latitude", "dropoff_community_area"]
BLANK_EVERY = 13  # ... where 'payment_type' is also blanked in every 13th row.
REQUIRED = ["trip_start_hour", "trip_start_day", "trip_miles", "trip_seconds", "fare"]
TRAINER_CONFIG = dict(layout="mesh", mesh=(2, 2), label_key=LABEL, steps=60, batch_size=64,
                      learning_rate=0.01, optimizer="adam", log_every=10, checkpoint_every=0)

# TFX's switch (tfx 1.16.0 components/util/udf_utils.py should_package_user_modules, read
# when Transform, Tuner and Trainer are built): the user module is imported from its file
# instead of built into a wheel that each get_fn pip-installs (3 installs in Transform, 1
# in Tuner). Measured side by side on a loaded 2-core box: :func:`run_tft`'s Transform
# 63 s without wheels, 106 s with; the README loop's second Transform 30 s and 46 s, its
# Tuner 10 s and 13 s. The README loop's first run (tests/test_readme.py) and
# :func:`run`'s stock Trainer keep the user's path.
NO_WHEELS = {"UNSUPPORTED_DO_NOT_PACKAGE_USER_MODULES": "1"}


@contextlib.contextmanager
def no_wheels():
  """Stock components built inside this block take their module from its file."""
  with pytest.MonkeyPatch.context() as patch:
    for name, value in NO_WHEELS.items():
      patch.setenv(name, value)
    yield


USER_MODULE = textwrap.dedent('''
    import tensorflow as tf
    import tf_keras

    from tfx_parallel.components.distributed_trainer import models


    def build_model(spec):
      inputs = models.inputs(spec)
      parts = [models.numeric_block(spec, inputs)]
      for f in spec.string_features:
        e = tf_keras.layers.Embedding(f.num_ids, 4, name=f"{f.name}_embedding")(inputs[f.name])
        parts.append(tf_keras.layers.Reshape((4,))(e))
      x = parts[0] if len(parts) == 1 else tf_keras.layers.Concatenate()(parts)
      x = tf_keras.layers.Dense(8, activation="relu", name="hidden")(x)
      return tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="logit")(x))
''')

RUN_FN_MODULE = textwrap.dedent('''
    import tensorflow as tf
    import tf_keras
    from tensorflow_transform.tf_metadata import schema_utils
    from tfx.utils import io_utils
    from tensorflow_metadata.proto.v0 import schema_pb2

    NUMERIC = ["fare", "trip_miles", "trip_seconds", "trip_start_hour"]
    LABEL = "big_tipper"


    def _spec(schema_path):
      schema = io_utils.parse_pbtxt_file(schema_path, schema_pb2.Schema())
      spec = schema_utils.schema_as_feature_spec(schema).feature_spec
      return {k: tf.io.FixedLenFeature([1], spec[k].dtype, default_value=0)
              for k in NUMERIC + [LABEL]}


    def _features(parsed):
      x = tf.concat([tf.cast(parsed[k], tf.float32) for k in NUMERIC], axis=1)
      return tf.math.log1p(tf.maximum(x, 0.0))


    def run_fn(fn_args):
      spec = _spec(fn_args.schema_path)

      def dataset(files):
        ds = tf.data.TFRecordDataset(tf.io.gfile.glob(files[0]) if len(files) == 1 else files,
                                     compression_type="GZIP")
        ds = ds.repeat().batch(64).map(lambda s: tf.io.parse_example(s, spec))
        return ds.map(lambda p: (_features(p), tf.cast(p[LABEL], tf.float32)))

      model = tf_keras.Sequential([tf_keras.layers.Dense(1, activation="sigmoid",
                                                         input_shape=(len(NUMERIC),))])
      model.compile(optimizer=tf_keras.optimizers.Adam(0.05), loss="binary_crossentropy")
      model.fit(dataset(fn_args.train_files), steps_per_epoch=fn_args.train_steps, epochs=1,
                verbose=0)
      serving_spec = {k: v for k, v in spec.items() if k != LABEL}

      @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
      def serve(examples):
        return {"outputs": model(_features(tf.io.parse_example(examples, serving_spec)))}

      model.save(fn_args.serving_model_dir, save_format="tf",
                 signatures={"serving_default": serve})
''')


PREPROCESSING_MODULE = textwrap.dedent('''
    import tensorflow as tf
    import tensorflow_transform as tft

    NUMERIC = ["trip_start_hour", "trip_start_day", "trip_miles", "trip_seconds", "fare"]
    STRINGS = ["payment_type", "company"]
    LABEL = "big_tipper"


    def preprocessing_fn(inputs):
      out = {k + "_xf": tft.scale_to_z_score(tf.cast(inputs[k], tf.float32)) for k in NUMERIC}
      for k in STRINGS:
        out[k + "_xf"] = tft.compute_and_apply_vocabulary(inputs[k], num_oov_buckets=1)
      out[LABEL] = inputs[LABEL]
      return out
''')


def write_taxi_csv(path: str, rows: int = ROWS, holes: bool = False):
  """The first ``rows`` rows of the taxi CSV with a fare and tips, label = tips > 0.2 *
  fare. ``holes``: the HOLED columns too, and rows with empty cells are kept
  (payment_type blanked in every BLANK_EVERY-th row); else only complete rows."""
  source = os.path.join(os.path.dirname(tfx.__file__), "..", "examples",
                        "chicago_taxi_pipeline", "data", "simple", "data.csv")
  columns = COLUMNS + (HOLED if holes else [])
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(source) as f, open(path, "w", newline="") as out:
    writer = csv.writer(out)
    writer.writerow(columns + [LABEL])
    n = 0
    for row in csv.DictReader(f):
      if row["fare"] == "" or row["tips"] == "" or float(row["fare"]) <= 0:
        continue
      if not holes and any(row[c] == "" for c in columns):
        continue
      cells = [row[c] for c in columns]
      if holes and n % BLANK_EVERY == 0:
        cells[columns.index("payment_type")] = ""
      writer.writerow(cells + [int(float(row["tips"]) > 0.2 * float(row["fare"]))])
      n += 1
      if n == rows:
        break


def _front(root, holes=False):
  """The taxi CSV and the user module under ``root``; CsvExampleGen, StatisticsGen and
  SchemaGen over it. Returns (user module path, example_gen, statistics, schema)."""
  write_taxi_csv(str(root / "data" / "data.csv"), holes=holes)
  user_module = root / "model_module.py"
  user_module.write_text(USER_MODULE)
  example_gen = tfx.components.CsvExampleGen(input_base=str(root / "data"))
  statistics = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
  schema = tfx.components.SchemaGen(statistics=statistics.outputs["statistics"])
  return str(user_module), example_gen, statistics, schema


def _downstream(trainer, example_gen, push_dir):
  """ConvergenceEvaluator, stock Evaluator (TFMA) and Pusher of ``trainer``'s model, all
  on the RAW examples."""
  ours = ConvergenceEvaluator(
      model=trainer.outputs["model"], examples=example_gen.outputs["examples"],
      history=trainer.outputs["history"],
      config=EvaluatorConfig(require_converged=False,
                             binary=BinaryThresholds(min_accuracy=0.55)))
  tfma_evaluator = tfma_stage.stock_evaluator(trainer.outputs["model"],
                                              example_gen.outputs["examples"], LABEL,
                                              task="binary")
  pusher = tfx.components.Pusher(
      model=trainer.outputs["model"], model_blessing=ours.outputs["blessing"],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(base_directory=push_dir)))
  return [ours, tfma_evaluator, pusher]


def _run_pipeline(root, name, components):
  """Runs ``components`` under LocalDagRunner with SQLite MLMD; returns the store."""
  metadata_path = str(root / "metadata.sqlite")
  tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
      pipeline_name=name, pipeline_root=str(root / "root"), components=components,
      metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
          metadata_path)))
  return summary.open_store(metadata_path)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  root = tmp_path_factory.mktemp("stock_pipeline")
  user_module, example_gen, statistics, schema = _front(root, holes=True)
  run_fn_module = root / "run_fn_module.py"
  run_fn_module.write_text(RUN_FN_MODULE)
  trainer = DistributedTrainer(
      examples=example_gen.outputs["examples"], schema=schema.outputs["schema"],
      module_file=user_module, config=TrainerConfig(**TRAINER_CONFIG, normalize=True))
  push_dir = str(root / "serving")
  stock_trainer = tfx.components.Trainer(
      module_file=str(run_fn_module), examples=example_gen.outputs["examples"],
      schema=schema.outputs["schema"], train_args=tfx.proto.TrainArgs(num_steps=40),
      eval_args=tfx.proto.EvalArgs(num_steps=1))
  on_stock = ConvergenceEvaluator(
      model=stock_trainer.outputs["model"], examples=example_gen.outputs["examples"],
      config=EvaluatorConfig(task="binary", label_key=LABEL,
                             binary=BinaryThresholds(min_accuracy=0.55))
  ).with_id("StockModelEvaluator")
  store = _run_pipeline(root, "stock14", [example_gen, statistics, schema, trainer,
                                          *_downstream(trainer, example_gen, push_dir),
                                          stock_trainer, on_stock])
  return store, push_dir


@pytest.fixture(scope="module")
def run_tft(tmp_path_factory):
  """The same pipeline with Transform: the trainer reads transformed examples, its
  model serves raw ones; ConvergenceEvaluator and TFMA evaluate it on the RAW examples."""
  root = tmp_path_factory.mktemp("stock_pipeline_tft")
  user_module, example_gen, statistics, schema = _front(root)
  preprocessing = root / "preprocessing.py"
  preprocessing.write_text(PREPROCESSING_MODULE)
  with no_wheels():
    transform = tfx.components.Transform(examples=example_gen.outputs["examples"],
                                         schema=schema.outputs["schema"],
                                         module_file=str(preprocessing))
  trainer = DistributedTrainer(
      examples=transform.outputs["transformed_examples"],
      transform_graph=transform.outputs["transform_graph"], schema=schema.outputs["schema"],
      module_file=user_module, config=TrainerConfig(**TRAINER_CONFIG))
  push_dir = str(root / "serving")
  store = _run_pipeline(root, "stock14tft", [example_gen, statistics, schema, transform,
                                             trainer,
                                             *_downstream(trainer, example_gen, push_dir)])
  return store, push_dir


def _artifacts(store, type_name):
  types = {t.id: t.name for t in store.get_artifact_types()}
  return [a for a in store.get_artifacts() if types[a.type_id] == type_name]


def _metrics_of(store, component_id):
  [artifact] = [a for a in _artifacts(store, "ConvergenceMetrics")
                if f"/{component_id}/" in a.uri]
  return P.read_properties(artifact.custom_properties)


def _completed_executions(store, count):
  """(component, state) of every execution; asserts ``count`` of them, all COMPLETE."""
  types = {t.id: t.name for t in store.get_execution_types()}
  states = [(types[e.type_id].split(".")[-1], e.last_known_state)
            for e in store.get_executions()]
  assert len(states) == count, states
  assert all(s == metadata_store_pb2.Execution.COMPLETE for _, s in states), states
  return states


def _served_probability(push_dir, raw):
  """The pushed model's probability for one raw tf.Example of ``raw`` {feature: value}
  (float -> float_list, int -> int64_list, str -> bytes_list)."""
  def feature(v):
    if isinstance(v, float):
      return tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
    if isinstance(v, int):
      return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
  [version] = tf.io.gfile.listdir(push_dir)
  served = tf.saved_model.load(os.path.join(push_dir, version))
  example = tf.train.Example(features=tf.train.Features(
      feature={k: feature(v) for k, v in raw.items()})).SerializeToString()
  p = served.signatures["serving_default"](examples=tf.constant([example]))["probabilities"]
  assert p.shape == (1, 1) and 0.0 <= float(p[0, 0]) <= 1.0
  return float(p[0, 0])


@pytest.mark.slow
def test_every_execution_completes_and_the_blessed_model_is_pushed(run):
  store, push_dir = run
  states = _completed_executions(store, 9)
  assert sorted(name for name, _ in states).count("ConvergenceEvaluator") == 2
  _served_probability(push_dir, {"fare": 12.0, "trip_start_hour": 9, "payment_type": "Cash"})


@pytest.mark.slow
def test_the_trainer_took_types_and_label_from_the_schema_and_config(run):
  store, _ = run
  [history] = _artifacts(store, "TrainingHistory")
  props = {k: v.string_value or v.int_value for k, v in history.custom_properties.items()}
  assert props["task"] == "binary" and props["mesh_shape"] == "2x2"
  import json  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(os.path.join(history.uri, "history.json")) as f:
    record = json.load(f)
  assert record["label_key"] == LABEL
  assert sorted(record["feature_keys"]) == sorted(COLUMNS + HOLED)


@pytest.mark.slow
def test_tfma_accuracy_equals_ours(run):
  store, _ = run
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  [evaluation] = _artifacts(store, "ModelEvaluation")
  [result] = tfma.load_metrics(evaluation.uri)
  theirs = {kv.key.name: kv.value.double_value.value for kv in result.metric_keys_and_values}
  ours = _metrics_of(store, "ConvergenceEvaluator")
  assert ours[P.EVAL_ACCURACY] == pytest.approx(theirs["binary_accuracy"], abs=1e-4)
  assert ours[P.EVAL_EXAMPLES] == int(theirs["example_count"])
  assert ours[P.EVAL_ACCURACY] > 0.55 and ours[P.BLESSED] == 1, ours


@pytest.mark.slow
def test_a_stock_trainer_model_is_evaluated_without_history(run):
  store, _ = run
  props = _metrics_of(store, "StockModelEvaluator")
  assert props[P.CONVERGENCE_STATE] == P.NO_HISTORY and P.FINAL_LOSS not in props
  assert props[P.TASK] == "binary" and props[P.EVAL_EXAMPLES] > 0
  assert props[P.BLESSED] == int(props[P.EVAL_ACCURACY] >= 0.55)
  assert np.isfinite(props[P.EVAL_LOG_LOSS])


@pytest.mark.slow
def test_with_transform_every_execution_completes_and_tfma_agrees(run_tft):
  store, push_dir = run_tft
  _completed_executions(store, 8)
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  [evaluation] = _artifacts(store, "ModelEvaluation")
  [result] = tfma.load_metrics(evaluation.uri)
  theirs = {kv.key.name: kv.value.double_value.value for kv in result.metric_keys_and_values}
  ours = _metrics_of(store, "ConvergenceEvaluator")
  assert ours[P.EVAL_ACCURACY] == pytest.approx(theirs["binary_accuracy"], abs=1e-4)
  assert ours[P.EVAL_ACCURACY] > 0.55 and ours[P.BLESSED] == 1, ours
  # The pushed model takes RAW serialized examples (strings as strings).
  _served_probability(push_dir, {"fare": 12.0, "trip_miles": 2.0, "trip_seconds": 600,
                                 "trip_start_hour": 9, "trip_start_day": 3,
                                 "payment_type": "Cash", "company": "Flash Cab"})


@pytest.mark.slow
def test_the_trainer_trained_on_the_transformed_features(run_tft):
  store, _ = run_tft
  import json  # pylint: disable=g-import-not-at-top
  [history] = _artifacts(store, "TrainingHistory")
  with tf.io.gfile.GFile(os.path.join(history.uri, "history.json")) as f:
    record = json.load(f)
  assert sorted(record["feature_keys"]) == sorted(c + "_xf" for c in COLUMNS)


@pytest.mark.slow
def test_a_transform_graph_missing_the_label_fails_naming_it(run_tft):
  from tfx.types import artifact_utils, standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs import description  # pylint: disable=g-import-not-at-top
  store, _ = run_tft
  [graph] = _artifacts(store, "TransformGraph")
  [transformed] = [a for a in _artifacts(store, "Examples") if "/Transform/" in a.uri]
  examples = standard_artifacts.Examples()
  examples.uri = transformed.uri
  examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
  with pytest.raises(description.InputError, match=r"^the transform graph at .* is missing the "
                                              r"label 'tips' \(config label_key\)"):
    description.describe(examples, label_key="tips", transform_graph_uri=graph.uri)


# ------------------------------------------------------------- missing values (issue #28)


def _history_record(store):
  import json  # pylint: disable=g-import-not-at-top
  [history] = _artifacts(store, "TrainingHistory")
  with tf.io.gfile.GFile(os.path.join(history.uri, "history.json")) as f:
    return history, json.load(f)


def _stock_artifacts(store):
  """The stock CsvExampleGen Examples and SchemaGen Schema of a run, as TFX artifacts."""
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  [stored] = [a for a in _artifacts(store, "Examples") if "/CsvExampleGen/" in a.uri]
  examples = standard_artifacts.Examples()
  examples.uri = stored.uri
  examples.split_names = stored.properties["split_names"].string_value
  [schema] = _artifacts(store, "Schema")
  return examples, schema.uri


def _trainer_job(store, root, schema_uri=None):
  """The Job the trainer's executor prepares for the run's stock Examples (its spec,
  fills and normalisation), built as the executor builds it; schema_uri overrides."""
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  examples, stock_schema = _stock_artifacts(store)
  schema = tfx.types.standard_artifacts.Schema()
  schema.uri = schema_uri or stock_schema
  config = TrainerConfig(**TRAINER_CONFIG, normalize=True,
                         module_file=str(root / "model_module.py")).validate()
  out = root / "job"
  job = executor.job_from_artifacts(config, examples, str(out / "model"), str(out / "run"),
                                    str(out / "history"), schema)
  return executor.prepare(job, config)


def _records(files):
  return [r.numpy() for r in tf.data.TFRecordDataset(sorted(files), compression_type="GZIP")]


def _row_key(serialized):
  """A row's raw CSV values (None where the cell was empty), whatever wrote it."""
  feature = tf.train.Example.FromString(serialized).features.feature
  key = []
  for name in COLUMNS + HOLED + [LABEL]:
    kind = feature[name].WhichOneof("kind") if name in feature else None
    values = list(getattr(feature[name], kind).value) if kind else []
    key.append(values[0] if values else None)
  return tuple(key)


@pytest.mark.slow
def test_missing_values_are_counted_filled_and_recorded(run):
  store, _ = run
  history, record = _history_record(store)
  counts = record["missing_values"]
  assert sorted(counts) == sorted(HOLED + ["company", "payment_type"]), counts
  for name, entry in counts.items():
    assert entry["train"] > 0 and entry["eval"] >= 0, (name, entry)
  assert counts["payment_type"]["train"] + counts["payment_type"]["eval"] >= ROWS // BLANK_EVERY
  assert counts["company"]["fill"] == "" and counts["payment_type"]["fill"] == ""
  assert isinstance(counts["dropoff_community_area"]["fill"], int)
  assert 41.0 < counts["dropoff_latitude"]["fill"] < 43.0  # Chicago's latitude.
  import json  # pylint: disable=g-import-not-at-top
  assert json.loads(history.custom_properties["missing_values"].string_value) == counts


@pytest.mark.slow
def test_an_example_without_its_optional_features_is_served_as_with_the_fills(run):
  store, push_dir = run
  _, record = _history_record(store)
  fills = {name: entry["fill"] for name, entry in record["missing_values"].items()}
  required = {"trip_start_hour": 9, "trip_start_day": 3, "trip_miles": 2.5,
              "trip_seconds": 600, "fare": 12.0}
  assert sorted(required) == sorted(REQUIRED)
  without = _served_probability(push_dir, required)
  with_fills = _served_probability(push_dir, dict(required, **fills))
  assert without == with_fills
  # Other values of the optional features do move the prediction (the test can fail).
  moved = _served_probability(push_dir, dict(required, dropoff_latitude=fills[
      "dropoff_latitude"] + 0.3, company="Flash Cab", payment_type="Cash",
      dropoff_community_area=fills["dropoff_community_area"] + 30))
  assert moved != without


@pytest.mark.slow
def test_stock_and_partitioned_example_gen_rows_parse_and_predict_identically(
    run, tmp_path):
  """The same CSV through stock CsvExampleGen (an empty cell: an empty list) and through
  PartitionedExampleGen (an empty cell: no feature): row by row, the same model inputs
  and the same prediction of the pushed model."""
  import collections  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import base_beam_executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import config_util, keys  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.executor import Executor  # pylint: disable=g-import-not-at-top
  store, push_dir = run
  root = os.path.dirname(push_dir)
  ours = tfx.types.standard_artifacts.Examples()
  ours.uri = str(tmp_path / "ours")
  os.makedirs(ours.uri)
  Executor(base_beam_executor.BaseBeamExecutor.Context(tmp_dir=str(tmp_path / "tmp"))).Do(
      {}, {keys.EXAMPLES_KEY: [ours]}, {keys.CONFIG_KEY: config_util.to_json(ExampleGenConfig(
          source=os.path.join(root, "data", "data.csv"), label=LABEL, shards_per_worker=1))})
  stock, _ = _stock_artifacts(store)
  # One order for both (by row content): the served model's float math depends slightly
  # on a row's position in the batch (1-8 ulps of a probability when a batch is
  # reversed), so equal rows are compared at equal positions.
  records = {name: sorted(_records(tf.io.gfile.glob(os.path.join(a.uri, "Split-*", "*"))),
                          key=lambda r: repr(_row_key(r)))
             for name, a in (("stock", stock), ("ours", ours))}
  assert len(records["stock"]) == len(records["ours"]) == ROWS
  # The two ways of writing an empty cell really are different.
  kinds = {name: collections.Counter() for name in records}
  for name, rows in records.items():
    for r in rows:
      feature = tf.train.Example.FromString(r).features.feature
      for column in HOLED + ["company", "payment_type"]:
        value = _row_key(r)[(COLUMNS + HOLED).index(column)]
        kinds[name]["absent" if column not in feature else
                    "empty" if value is None else "value"] += 1
  assert kinds["stock"]["empty"] > 0 and kinds["stock"]["absent"] == 0, kinds
  assert kinds["ours"]["absent"] == kinds["stock"]["empty"] and kinds["ours"]["empty"] == 0

  job = _trainer_job(store, pathlib.Path(root))
  pre = Preprocessor(ms.ModelSpec.from_dict(job.model_spec), job.normalization)
  [version] = tf.io.gfile.listdir(push_dir)
  serve = tf.saved_model.load(os.path.join(push_dir, version)).signatures["serving_default"]
  by_key = {}
  for name, rows in records.items():
    inputs = {k: v.numpy() for k, v in pre.serving_inputs(tf.constant(rows)).items()}
    probabilities = serve(examples=tf.constant(rows))["probabilities"].numpy()
    keyed = collections.defaultdict(set)
    for i, r in enumerate(rows):
      parsed = tuple((k, v[i].tobytes()) for k, v in sorted(inputs.items()))
      keyed[_row_key(r)].add((parsed, probabilities[i].tobytes()))
    by_key[name] = keyed
  assert collections.Counter(map(_row_key, records["stock"])) == collections.Counter(
      map(_row_key, records["ours"]))
  holed = [k for k in by_key["stock"] if None in k]
  assert len(holed) > 100, len(holed)
  for key, parsed in by_key["stock"].items():
    assert len(parsed) == 1 and parsed == by_key["ours"][key], key


@pytest.mark.slow
def test_a_required_feature_that_is_missing_fails_before_training(run, tmp_path):
  """The stock schema with a shape on 'dropoff_latitude' (required: in every example)."""
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  from tfx.utils import io_utils  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs import description, missing  # pylint: disable=g-import-not-at-top
  store, push_dir = run
  _, schema_uri = _stock_artifacts(store)
  schema = io_utils.parse_pbtxt_file(os.path.join(schema_uri, description.SCHEMA_FILE),
                                     schema_pb2.Schema())
  by_name = {f.name: f for f in schema.feature}
  for name in HOLED:  # Stock SchemaGen: present in every example, but no shape.
    assert by_name[name].presence.min_fraction == 1.0 and not by_name[name].HasField("shape")
  for name in REQUIRED:
    assert by_name[name].HasField("shape")
  by_name["dropoff_latitude"].shape.dim.add(size=1)
  io_utils.write_pbtxt_file(str(tmp_path / description.SCHEMA_FILE), schema)
  with pytest.raises(missing.RequiredFeatureError,
                     match=r"feature 'dropoff_latitude' is required by the schema .* "
                           r"example\(s\) in split 'train' file .*/CsvExampleGen/examples/.*"
                           r"Split-train/.* have no value for it"):
    _trainer_job(store, pathlib.Path(os.path.dirname(push_dir)), str(tmp_path))
