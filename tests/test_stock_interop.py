"""Stock TFX components accept our artifacts: the trained Model (from a sharded mesh)
goes through the stock Evaluator (TFMA) and the stock Pusher in one LocalDagRunner
pipeline, and our eval MSE agrees with TFMA's. The pipeline is a user's own script, not
our CLI, started without the environment our entry points set."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorflow as tf
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.pipeline import summary


# A model sharded over the model axis of a 1x2 mesh.
LAYOUT = dict(layout="mesh", mesh=(1, 2))


# A pipeline script of the user's own (no CLI), run in a fresh process whose environment
# has neither TF_USE_LEGACY_KERAS nor TF_CPP_MIN_LOG_LEVEL: importing our components sets
# nothing; each of our executors' Do prepares what it needs (components/common/tfenv.py).
_USER_SCRIPT = textwrap.dedent("""
    import json, os, sys
    NAMES = ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")
    before = {k: os.environ.get(k) for k in NAMES}
    from tfx import v1 as tfx
    from tfx_parallel.components.distributed_trainer.config import TrainerConfig
    from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
    from tfx_parallel.pipeline import config as config_lib
    from tfx_parallel.pipeline import pipeline as pipeline_lib
    tmp, layout = sys.argv[1], json.loads(sys.argv[2])
    config = config_lib.PipelineConfig(
        pipeline_name="interop", example_gen=ExampleGenConfig(rows=3000, noise=0.1),
        trainer=TrainerConfig(**layout, epochs=10, learning_rate=0.1, optimizer="adam"),
        with_tfma=True).validate()
    imported = {k: os.environ.get(k) for k in NAMES}
    components = pipeline_lib.create_components(config)
    trainer = next(c for c in components if c.id == "DistributedTrainer")
    ours = next(c for c in components if c.id == "ConvergenceEvaluator")
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"], model_blessing=ours.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(
                base_directory=os.path.join(tmp, "serving"))))
    tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
        pipeline_name=config.pipeline_name, pipeline_root=os.path.join(tmp, "root"),
        components=components + [pusher],
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            os.path.join(tmp, "metadata.sqlite"))))
    print(json.dumps({"before": before, "imported": imported,
                      "after": {k: os.environ.get(k) for k in NAMES}}))
""")


@pytest.mark.slow
def test_stock_evaluator_and_pusher_accept_mesh_trained_model(tmp_path):
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")}
  proc = subprocess.run([sys.executable, "-c", _USER_SCRIPT, str(tmp_path), json.dumps(LAYOUT)],
                        env=env, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  seen = json.loads(proc.stdout.strip().splitlines()[-1])
  assert seen["before"] == {"TF_USE_LEGACY_KERAS": None, "TF_CPP_MIN_LOG_LEVEL": None}
  # TFX itself sets TF_USE_LEGACY_KERAS=1 when it imports tensorflow_transform
  # (tensorflow_transform/keras_lib.py:20-22); our imports add nothing to it.
  assert seen["imported"]["TF_CPP_MIN_LOG_LEVEL"] is None, seen
  assert seen["after"] == {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}, seen
  push_dir = str(tmp_path / "serving")
  metadata_path = str(tmp_path / "metadata.sqlite")
  store = summary.open_store(metadata_path)
  types = {t.id: t.name for t in store.get_execution_types()}
  states = {types[e.type_id].split(".")[-1]: e.last_known_state for e in store.get_executions()}
  assert states and all(s == metadata_store_pb2.Execution.COMPLETE for s in states.values()), states
  assert any("Evaluator" in t and "Convergence" not in t for t in states)
  assert any("Pusher" in t for t in states)

  # Pusher pushed our blessed model; it serves serialized tf.Example.
  [version] = tf.io.gfile.listdir(push_dir)
  served = tf.saved_model.load(os.path.join(push_dir, version))
  fn = served.signatures["serving_default"]
  x = np.array([[0.5, -1.0], [2.0, 1.0]], np.float32)
  examples = [tf.train.Example(features=tf.train.Features(feature={
      f"x{j}": tf.train.Feature(float_list=tf.train.FloatList(value=[row[j]]))
      for j in range(2)})).SerializeToString() for row in x]
  pred = fn(examples=tf.constant(examples))["predictions"].numpy().ravel()
  np.testing.assert_allclose(pred, x @ [1.0, 2.0] + 3.0, atol=0.1)

  # Our eval MSE agrees with TFMA's on the same model and eval split.
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  atypes = {t.id: t.name for t in store.get_artifact_types()}
  [evaluation] = [a for a in store.get_artifacts() if atypes[a.type_id] == "ModelEvaluation"]
  [result] = tfma.load_metrics(evaluation.uri)
  theirs = {kv.key.name: kv.value.double_value.value for kv in result.metric_keys_and_values}
  found = summary.latest_run(store, "interop")
  assert found["ConvergenceMetrics"]["eval_mse"] == pytest.approx(
      theirs["mean_squared_error"], rel=1e-4)
