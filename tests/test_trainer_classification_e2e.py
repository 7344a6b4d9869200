"""Classification end to end on the shipped taxi CSV, string columns included: a binary
label derived here (tip above 20% of the fare; tips dropped), through LocalDagRunner with
PartitionedExampleGen -> DistributedTrainer (built-in mlp, embeddings for payment_type
and company) -> ConvergenceEvaluator and the stock Evaluator (TFMA). One pipeline run
is shared by the assertions."""
import csv
import json

import pytest

import tfx_parallel.pipeline.tfenv  # noqa: F401
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import local_runner, summary

ROWS = 4000
COLUMNS = ("trip_miles", "trip_seconds", "trip_start_hour", "fare", "payment_type",
           "company", "big_tip")
# 23% of these trips are big tippers: always answering "no" scores 0.77.
MIN_ACCURACY = 0.85
MIN_AUC = 0.85


def _derive_csv(path):
  with open(sources.taxi_csv_path()) as f:
    rows = [r for r in csv.DictReader(f) if r["fare"] and r["tips"] and float(r["fare"]) > 0]
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(COLUMNS)
    for r in rows[:ROWS]:
      big_tip = int(float(r["tips"]) > 0.2 * float(r["fare"]))
      writer.writerow([r[c] for c in COLUMNS[:-1]] + [big_tip])


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("taxi_cls")
  data = tmp / "taxi_big_tip.csv"
  _derive_csv(data)
  config = config_lib.PipelineConfig(
      pipeline_name="taxi-cls",
      example_gen=ExampleGenConfig(source=str(data), label="big_tip"),
      trainer=TrainerConfig(layout="single", model="mlp", hidden_units=(16,), task="binary",
                            normalize=True, epochs=3, batch_size=64, learning_rate=0.01,
                            optimizer="adam", log_every=10),
      evaluator=EvaluatorConfig(require_converged=False), with_tfma=True)
  path = local_runner.run(config, str(tmp / "home"))
  store = summary.open_store(path)
  found = summary.latest_run(store, "taxi-cls")
  atypes = {t.id: t.name for t in store.get_artifact_types()}
  artifacts = {atypes[a.type_id]: a for a in store.get_artifacts()}
  return found, artifacts


@pytest.mark.slow
def test_string_columns_reach_the_model_and_the_task_is_recorded(run):
  found, artifacts = run
  examples = artifacts["Examples"]
  assert json.loads(examples.custom_properties["string_feature_keys"].string_value) == [
      "payment_type", "company"]
  for name in ("Model", "TrainingHistory"):
    props = artifacts[name].custom_properties
    assert props["task"].string_value == "binary" and props["num_classes"].int_value == 1
  with open(f"{artifacts['TrainingHistory'].uri}/history.json") as f:
    history = json.load(f)
  assert {"payment_type", "company"} <= set(history["feature_keys"])


@pytest.mark.slow
def test_binary_taxi_model_reaches_the_stated_accuracy(run):
  found, _ = run
  metrics = found["ConvergenceMetrics"]
  assert metrics["eval_accuracy"] >= MIN_ACCURACY, metrics
  assert metrics["eval_auc"] >= MIN_AUC, metrics


@pytest.mark.slow
def test_tfma_agrees_with_convergence_evaluator_on_accuracy_and_auc(run):
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  found, artifacts = run
  [result] = tfma.load_metrics(artifacts["ModelEvaluation"].uri)
  theirs = {kv.key.name: kv.value.double_value.value for kv in result.metric_keys_and_values}
  ours = found["ConvergenceMetrics"]
  assert ours["eval_accuracy"] == pytest.approx(theirs["binary_accuracy"], abs=1e-4)
  assert ours["eval_auc"] == pytest.approx(theirs["auc"], abs=1e-4)
