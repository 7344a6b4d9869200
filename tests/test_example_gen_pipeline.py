"""PartitionedExampleGen in a LocalDagRunner pipeline, read by stock StatisticsGen + SchemaGen
(int columns typed INT: ints stay ints), then DistributedTrainer with that schema."""
import os

import numpy as np

import pytest

from tensorflow_metadata.proto.v0 import schema_pb2
from tfx import v1 as tfx
from tfx.orchestration import metadata
from tfx.types import artifact_utils
from tfx.utils import io_utils

import tensorflow as tf

from tfx_parallel.components.common import keys
from tfx_parallel.components.distributed_trainer.component import DistributedTrainer
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.partitioned_example_gen.component import PartitionedExampleGen
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig


@pytest.mark.slow
def test_local_dag_runner_with_stock_statistics_gen_and_schema_gen(tmp_path):
  csv_path = tmp_path / "data" / "data.csv"
  os.makedirs(csv_path.parent)
  with open(csv_path, "w", encoding="utf-8") as f:
    f.write("x0,n,city,y\n")
    f.writelines(f"{i * 0.1 if i % 9 else ''},{1000 + 7 * (i % 30)},c{i % 4},{i % 40}\n"
                 for i in range(300))
  example_gen = PartitionedExampleGen(config=ExampleGenConfig(label="y", source=str(csv_path)))
  statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs[keys.EXAMPLES_KEY])
  schema_gen = tfx.components.SchemaGen(statistics=statistics_gen.outputs["statistics"])
  trainer = DistributedTrainer(
      examples=example_gen.outputs[keys.EXAMPLES_KEY], schema=schema_gen.outputs["schema"],
      config=TrainerConfig(model="mlp", steps=20, batch_size=32, normalize=True,
                           learning_rate=0.01,
                           checkpoint_every=0))
  db = str(tmp_path / "metadata.sqlite")
  pipeline = tfx.dsl.Pipeline(
      pipeline_name="example_gen_e2e", pipeline_root=str(tmp_path / "root"),
      components=[example_gen, statistics_gen, schema_gen, trainer],
      metadata_connection_config=metadata.sqlite_metadata_connection_config(db),
      enable_cache=False)
  tfx.orchestration.LocalDagRunner().run(pipeline)

  with metadata.Metadata(metadata.sqlite_metadata_connection_config(db)) as m:
    by_type = {}
    for artifact in m.store.get_artifacts():
      type_name = m.store.get_artifact_types_by_id([artifact.type_id])[0].name
      by_type.setdefault(type_name, []).append(artifact)
  examples = by_type["Examples"][0]
  assert examples.custom_properties[keys.NUM_SHARDS].int_value == 2
  assert examples.custom_properties[keys.LABEL_KEY].string_value == "y"
  assert artifact_utils.decode_split_names(
      examples.properties["split_names"].string_value) == ["eval", "train"]

  schema = io_utils.SchemaReader().read(os.path.join(by_type["Schema"][0].uri, "schema.pbtxt"))
  types = {f.name: f.type for f in schema.feature}
  assert types == {"x0": schema_pb2.FLOAT, "n": schema_pb2.INT, "y": schema_pb2.INT,
                   "city": schema_pb2.BYTES}
  stats_splits = os.listdir(by_type["ExampleStatistics"][0].uri)
  assert sorted(stats_splits) == ["Split-eval", "Split-train"]

  # The trainer read the schema's INT feature as int64, standardised it (normalize), and
  # the exported signature parses it from int64_list (as a stock client sends it).
  [model] = by_type["Model"]
  served = tf.saved_model.load(os.path.join(model.uri, "Format-Serving"))
  fn = served.signatures["serving_default"]
  rows = [tf.train.Example(features=tf.train.Features(feature={
      "x0": tf.train.Feature(float_list=tf.train.FloatList(value=[x0])),
      "n": tf.train.Feature(int64_list=tf.train.Int64List(value=[n])),
      "city": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"c1"]))}))
      .SerializeToString() for x0, n in ((1.0, 1000), (1.0, 1203))]
  [out] = fn(examples=tf.constant(rows)).values()
  history = by_type["TrainingHistory"][0].custom_properties
  assert history["diverged"].int_value == 0 and history["steps_run"].int_value == 20
  assert out.shape[0] == 2 and np.all(np.isfinite(out.numpy())), out
