"""Drop-in use in a stock TFX pipeline (issue #14), under LocalDagRunner with SQLite MLMD,
on the taxi CSV from the tfx wheel (string and int columns included, a binary label
derived here):

  CsvExampleGen -> StatisticsGen -> SchemaGen -> DistributedTrainer (mesh 2x2, user
  module, schema input) -> ConvergenceEvaluator -> stock Evaluator (TFMA) -> Pusher
                                            \\-> stock Trainer (run_fn) -> ConvergenceEvaluator

One pipeline run is shared by the tests of this module.
"""
import csv
import os
import textwrap

import numpy as np
import pytest

import tfx_parallel.pipeline.tfenv  # noqa: F401  (before TensorFlow)
import trainer_util as tu
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

pytestmark = pytest.mark.skipif(not tu.MESH_AVAILABLE, reason="needs the mesh layout")

ROWS = 2000
LABEL = "big_tipper"
COLUMNS = ["trip_start_hour", "trip_start_day", "trip_miles", "trip_seconds", "fare",
           "payment_type", "company"]
TRAINER_CONFIG = dict(layout="mesh", mesh=(2, 2), label_key=LABEL, steps=60, batch_size=64,
                      learning_rate=0.01, optimizer="adam", log_every=10, checkpoint_every=0)

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


def write_taxi_csv(path: str, rows: int = ROWS):
  """The first ``rows`` complete rows of the taxi CSV, label = tips > 0.2 * fare."""
  source = os.path.join(os.path.dirname(tfx.__file__), "..", "examples",
                        "chicago_taxi_pipeline", "data", "simple", "data.csv")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(source) as f, open(path, "w", newline="") as out:
    writer = csv.writer(out)
    writer.writerow(COLUMNS + [LABEL])
    n = 0
    for row in csv.DictReader(f):
      if any(row[c] == "" for c in COLUMNS + ["tips"]) or float(row["fare"]) <= 0:
        continue
      writer.writerow([row[c] for c in COLUMNS] +
                      [int(float(row["tips"]) > 0.2 * float(row["fare"]))])
      n += 1
      if n == rows:
        break


def _front(root):
  """The taxi CSV and the user module under ``root``; CsvExampleGen, StatisticsGen and
  SchemaGen over it. Returns (user module path, example_gen, statistics, schema)."""
  write_taxi_csv(str(root / "data" / "data.csv"))
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
  user_module, example_gen, statistics, schema = _front(root)
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
  assert sorted(record["feature_keys"]) == sorted(COLUMNS)


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
  from tfx_parallel.components.distributed_trainer import inputs  # pylint: disable=g-import-not-at-top
  store, _ = run_tft
  [graph] = _artifacts(store, "TransformGraph")
  [transformed] = [a for a in _artifacts(store, "Examples") if "/Transform/" in a.uri]
  examples = standard_artifacts.Examples()
  examples.uri = transformed.uri
  examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
  with pytest.raises(inputs.InputError, match=r"^the transform graph at .* is missing the "
                                              r"label 'tips' \(config label_key\)"):
    inputs.describe(examples, label_key="tips", transform_graph_uri=graph.uri)
