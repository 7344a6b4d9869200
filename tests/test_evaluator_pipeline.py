"""ConvergenceEvaluator in a LocalDagRunner pipeline: a binary model's metrics reach the
SQLite ML Metadata store at full precision, read back with plain ``ml_metadata``."""
import json
import os

import numpy as np
import pytest

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.pipeline import metrics_report

FEATURES = ["x0", "x1"]
W, B = [2.0, -1.0], 0.2
# ML Metadata's SQLite store keeps 6 decimals of a double: these would read back as
# 0.000104 and 0.0.
INITIAL_LOSS, FINAL_LOSS = 1.0369e-4, 3.2e-9


def _pipeline(root, examples, model, history):
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator.config import BinaryThresholds  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig  # pylint: disable=g-import-not-at-top

  def imported(artifact, artifact_type, name):
    # Importer takes only int / str custom properties.
    props = {k: (str(v) if isinstance(v, float) else v) for k, v in (
        (k, artifact.get_custom_property(k)) for k in artifact.mlmd_artifact.custom_properties)}
    return tfx.dsl.Importer(source_uri=artifact.uri, artifact_type=artifact_type,
                            properties={"split_names": artifact.split_names}
                            if name == "examples" else {},
                            custom_properties=props).with_id(name)

  nodes = [imported(examples, standard_artifacts.Examples, "examples"),
           imported(model, standard_artifacts.Model, "model"),
           imported(history, artifacts.TrainingHistory, "history")]
  evaluator = ConvergenceEvaluator(
      examples=nodes[0].outputs["result"], model=nodes[1].outputs["result"],
      history=nodes[2].outputs["result"],
      config=EvaluatorConfig(target_loss=1e-8,
                             binary=BinaryThresholds(min_accuracy=0.6, min_auc=0.7)))
  return tfx.dsl.Pipeline(
      pipeline_name="binary", pipeline_root=os.path.join(root, "pipelines"),
      components=nodes + [evaluator], enable_cache=False,
      metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
          os.path.join(root, "metadata.sqlite")))


@pytest.mark.slow
def test_binary_metrics_in_sqlite_metadata_at_full_precision(tmp_path):
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  import evaluator_fixtures as testing  # pylint: disable=g-import-not-at-top
  x, y = testing.classification_data(200, W, B, noise=0.5, seed=3)
  examples = testing.write_examples(
      str(tmp_path / "data"),
      {"eval": testing.serialize_examples(x, y.astype(np.float32), FEATURES, "y")},
      FEATURES, "y")
  model = testing.export_classifier_model(str(tmp_path / "model"), "binary", W, B, FEATURES)
  losses = np.geomspace(INITIAL_LOSS, FINAL_LOSS, 12).tolist()
  losses[0], losses[-1] = INITIAL_LOSS, FINAL_LOSS  # Exactly, not via exp(log(.)).
  losses += [FINAL_LOSS] * 5  # A flat tail: the training loss stopped falling.
  history = testing.write_history(str(tmp_path / "history"), testing.linear_history(
      losses, layout="single", mesh_shape=(), replicas=1), task="binary", num_classes=1)
  home = str(tmp_path / "home")
  tfx.orchestration.LocalDagRunner().run(_pipeline(home, examples, model, history))

  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = os.path.join(home, "metadata.sqlite")
  store = metadata_store.MetadataStore(config)
  [artifact] = store.get_artifacts_by_type("ConvergenceMetrics")
  rounded = {k: P.decode(v) for k, v in artifact.custom_properties.items()}
  assert rounded[P.FINAL_LOSS] == 0.0 and rounded[P.INITIAL_LOSS] == 0.000104
  exact = P.read_properties(artifact.custom_properties)
  assert exact[P.FINAL_LOSS] == FINAL_LOSS and exact[P.INITIAL_LOSS] == INITIAL_LOSS
  assert exact[P.BEST_LOSS] == FINAL_LOSS
  assert exact[P.TASK] == "binary" and exact[P.BLESSED] == 1, exact[P.BLESSING_MESSAGE]
  z = x.astype(np.float64) @ np.float32(W) + np.float32(B)
  assert exact[P.EVAL_ACCURACY] == np.mean((z > 0) == (y == 1))
  assert exact[P.EVAL_LOG_LOSS] == pytest.approx(np.mean(np.logaddexp(0, z) - y * z),
                                                 rel=1e-5)
  assert exact[P.EVAL_LOG_LOSS] != round(exact[P.EVAL_LOG_LOSS], 6)
  assert rounded[P.EVAL_LOG_LOSS] == round(exact[P.EVAL_LOG_LOSS], 6)

  # `tfx-parallel metrics` reads the precise values from ML Metadata, not from the file.
  os.remove(os.path.join(artifact.uri, P.METRICS_FILE_NAME))
  [row] = metrics_report.find_runs(store)
  assert row.properties[P.FINAL_LOSS] == FINAL_LOSS
  assert row.properties[P.EVAL_LOG_LOSS] == exact[P.EVAL_LOG_LOSS]
  assert json.loads(json.dumps(row.to_json()))["properties"][P.INITIAL_LOSS] == INITIAL_LOSS
