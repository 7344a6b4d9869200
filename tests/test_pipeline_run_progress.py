"""Start / end lines per component, from TFX's log records and ML Metadata read-back."""
import io
import json
import logging

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.common import keys
from tfx_parallel.components.common.run_history import RunHistory
from tfx_parallel.pipeline import run_progress


def _store(path):
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = path
  config.sqlite.connection_mode = (
      metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE)
  return metadata_store.MetadataStore(config)


def _execution_with_output(store, type_name, uri, **props):
  art_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(name=type_name))
  exe_type = store.put_execution_type(metadata_store_pb2.ExecutionType(name="Node"))
  artifact = metadata_store_pb2.Artifact(type_id=art_type, uri=uri)
  for name, value in props.items():
    if isinstance(value, str):
      artifact.custom_properties[name].string_value = value
    else:
      artifact.custom_properties[name].int_value = value
  execution_id, _, _ = store.put_execution(
      metadata_store_pb2.Execution(type_id=exe_type),
      [(artifact, metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT))], [])
  return execution_id


def _record(msg, *args):
  return logging.LogRecord("absl", logging.INFO, "local_dag_runner.py", 1, msg, args, None)


class Clock:
  def __init__(self):
    self.now = 0.0

  def __call__(self):
    return self.now


def test_start_and_end_lines_say_what_each_component_did(tmp_path):
  store = _store(str(tmp_path / "metadata.sqlite"))
  examples = _execution_with_output(
      store, "Examples", str(tmp_path / "ex"), **{
          keys.ROW_COUNTS: json.dumps({"eval": 2005, "train": 7995}), keys.NUM_SHARDS: 2})
  history_dir = tmp_path / "history"
  history_dir.mkdir()
  (history_dir / keys.HISTORY_FILE).write_text(json.dumps({
      "steps_run": 620, "examples_per_sec": 12773.4,
      "records": [{"step": 620, "loss": 0.00010178999145864509}]}))
  trainer = _execution_with_output(store, "TrainingHistory", str(history_dir))
  stream, clock = io.StringIO(), Clock()
  handler = run_progress.ComponentProgress(
      ["PartitionedExampleGen", "DistributedTrainer", "ConvergenceEvaluator"],
      lambda: store, stream=stream, clock=clock)
  for record, advance in [
      (_record("Component %s is running.", "PartitionedExampleGen"), 0.0),
      (_record("Going to run a new execution %d", examples), 0.0),
      (_record("Component %s is finished.", "PartitionedExampleGen"), 31.2),
      (_record("Component %s is running.", "DistributedTrainer"), 0.0),
      (_record("A cached execution %d is used.", trainer), 0.0),
      (_record("Component %s is finished.", "DistributedTrainer"), 0.3),
      (_record("Component %s is running.", "ConvergenceEvaluator"), 0.0)]:
    clock.now += advance
    handler.handle(record)
  assert stream.getvalue().splitlines() == [
      "[1/3] PartitionedExampleGen: started",
      "[1/3] PartitionedExampleGen: done in 31 s: train 7,995 rows, eval 2,005 rows, "
      "2 shards per split",
      "[2/3] DistributedTrainer: started",
      "[2/3] DistributedTrainer: reused the cached result: 620 steps, final loss 0.0001018, "
      "12,773 ex/s",
      "[3/3] ConvergenceEvaluator: started"]
  assert handler.current == "ConvergenceEvaluator"  # what a failure would be blamed on
  assert handler.finished == ["PartitionedExampleGen", "DistributedTrainer"]


def test_describe_metrics_by_task():
  regression = {"convergence_state": "improving", "eval_mse": 19.6438815810449,
                "eval_r2": "0.82891309238598", "blessed": 1}
  assert run_progress.describe_metrics(regression) == \
      "improving, eval MSE 19.64, R2 0.8289, blessed"
  binary = {"convergence_state": "diverged", "eval_accuracy": 0.5, "eval_auc": "nan",
            "blessed": 0}
  assert run_progress.describe_metrics(binary) == \
      "diverged, eval accuracy 0.5, AUC nan, NOT blessed"
  # eval_auc -1: the eval split lacks one of the classes (properties.py), no AUC to show,
  # as the summary leaves it out (a one-class label: the first rows of iris as pandas
  # writes them, load_iris(as_frame=True).frame.head(7), all of class 0).
  one_class = {"convergence_state": "plateaued", "eval_accuracy": 1.0, "eval_auc": -1.0,
               "blessed": 0}
  assert run_progress.describe_metrics(one_class) == \
      "plateaued, eval accuracy 1, NOT blessed"


def test_describe_history_flags_divergence_and_examples_skipped_rows():
  assert run_progress.describe_history(RunHistory(records=[{"step": 7, "loss": float("inf")}],
                                                  diverged=True)) == \
      "7 steps, final loss inf, DIVERGED"
  assert run_progress.describe_examples({keys.ROW_COUNTS: '{"train": 10}',
                                         keys.SKIPPED_ROWS: 1234}) == \
      "train 10 rows, 1,234 bad rows skipped"


def test_unreadable_outputs_are_said_and_the_end_line_kept():
  def no_store():
    raise OSError("store gone")
  stream, clock = io.StringIO(), Clock()
  handler = run_progress.ComponentProgress(["A"], no_store, stream=stream, clock=clock)
  handler.handle(_record("Component %s is running.", "A"))
  handler.handle(_record("Going to run a new execution %d", 1))
  clock.now = 2.0
  handler.handle(_record("Component %s is finished.", "A"))
  assert stream.getvalue().splitlines() == [
      "[1/1] A: started",
      "[1/1] A: done in 2.0 s: (its outputs could not be read: OSError: store gone)"]


def test_other_records_and_unknown_components_are_ignored_or_tagged():
  stream = io.StringIO()
  handler = run_progress.ComponentProgress(["A"], lambda: None, stream=stream)
  handler.handle(_record("Component %s is running"))  # no args: not TFX's record
  handler.handle(_record("Running launcher for %s", "x"))
  handler.handle(_record("Component %s is running.", "Importer"))
  assert stream.getvalue().splitlines() == ["[Importer]: started"]
