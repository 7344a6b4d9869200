"""Blessing against a baseline (issue #50 item 3): the TFMA-style change check
(baseline.py), its config (config.py), the latest-blessed lookup in a real ML Metadata
store shaped as TFX and as the KFP launcher write it (lookup.py), and the loop end to end
(item 4): three LocalDagRunner runs on one store, with the stock Pusher."""
import filecmp
import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx.utils import path_utils

from tfx_parallel.components.common import config_util
from tfx_parallel.components.convergence_evaluator import baseline
from tfx_parallel.components.convergence_evaluator import lookup
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator.config import BinaryChange
from tfx_parallel.components.convergence_evaluator.config import ChangeThreshold
from tfx_parallel.components.convergence_evaluator.config import ChangeThresholds
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.convergence_evaluator.config import RegressionChange

FEATURES = ["x0", "x1"]
W, B = [2.0, -1.0], 0.5


# --- The change check (TFMA metrics_validator.py:65-102 semantics). -------------------

def _one(candidate, base, threshold):
  group = RegressionChange(eval_mse=threshold, eval_mae=ChangeThreshold("lower_is_better"),
                           eval_r2=ChangeThreshold())
  return baseline.compare({"eval_mse": candidate}, {"eval_mse": base}, "regression",
                          ChangeThresholds(regression=group), "/base", "channel")


def test_a_metric_at_minus_one_is_not_available_never_the_number():
  """quality.py gives precision -1 when nothing is predicted positive: against a baseline
  at -1, a candidate at 0.0 is no change of +1.0; it is undefined and the bound fails."""
  group = BinaryChange(eval_precision=ChangeThreshold(absolute=-0.01))
  out = baseline.compare({"eval_precision": 0.0}, {"eval_precision": -1.0}, "binary",
                         ChangeThresholds(binary=group), "/base", "channel")
  [entry] = [m for m in out["metrics"] if m["name"] == "eval_precision"]
  assert math.isnan(entry["baseline"]) and not out["passed"], entry
  assert "undefined" in out["reason"] or "nan" in out["reason"], out["reason"]


def test_lower_is_better_bounds_the_change_from_above():
  ok = _one(1.005, 1.0, ChangeThreshold("lower_is_better", relative=0.01))
  assert ok["passed"] and ok["metrics"][0]["relative_change"] == pytest.approx(0.005)
  bad = _one(1.02, 1.0, ChangeThreshold("lower_is_better", relative=0.01))
  assert not bad["passed"]
  assert bad["metrics"][0]["absolute_change"] == pytest.approx(0.02)
  bad = _one(1.02, 1.0, ChangeThreshold("lower_is_better", absolute=0.01))
  assert not bad["passed"] and bad["metrics"][0]["absolute_threshold"] == 0.01
  assert _one(0.5, 1.0, ChangeThreshold("lower_is_better", absolute=0.0))["passed"]


def test_higher_is_better_bounds_the_change_from_below():
  assert _one(0.995, 1.0, ChangeThreshold("higher_is_better", absolute=-0.01))["passed"]
  assert not _one(0.98, 1.0, ChangeThreshold("higher_is_better", absolute=-0.01))["passed"]
  assert not _one(0.98, 1.0, ChangeThreshold("higher_is_better", relative=-0.01))["passed"]
  # Both bounds set: both must hold (TFMA: abs_result and rel_result).
  both = ChangeThreshold("higher_is_better", absolute=-0.5, relative=0.0)
  assert not _one(0.9, 1.0, both)["passed"]


def test_zero_baseline_and_nan_fail_a_relative_bound_as_in_tfma():
  zero = _one(0.1, 0.0, ChangeThreshold("lower_is_better", relative=10.0))
  assert not zero["passed"] and zero["metrics"][0]["relative_change"] is None
  assert "undefined (baseline is 0)" in zero["reason"]
  assert _one(0.1, 0.0, ChangeThreshold("lower_is_better", absolute=0.2))["passed"]
  assert not _one(math.nan, 1.0, ChangeThreshold("lower_is_better", absolute=1.0))["passed"]
  assert _one(math.nan, 1.0, ChangeThreshold("lower_is_better"))["passed"]  # Unchecked.


def test_the_failure_names_metric_values_threshold_and_setting():
  result = baseline.compare({"eval_accuracy": 0.8, "eval_auc": 0.9},
                            {"eval_accuracy": 0.9, "eval_auc": 0.95}, "binary",
                            ChangeThresholds(), "/models/7", "latest_blessed")
  assert not result["passed"]
  message = baseline.blessing_message(result)
  for part in ("/models/7", "eval_accuracy 0.8 vs baseline 0.9", "-0.1",
               "evaluator.change_thresholds.binary.eval_accuracy.absolute -0.01",
               "set evaluator.change_thresholds.binary.eval_accuracy.absolute=-0.1"):
    assert part in message
  # Fixing the setting as suggested makes it pass.
  fixed = config_util.from_dict(EvaluatorConfig, {"change_thresholds": {"binary": {
      "eval_accuracy": {"direction": "higher_is_better", "absolute": -0.1}}}})
  assert baseline.compare({"eval_accuracy": 0.8}, {"eval_accuracy": 0.9}, "binary",
                          fixed.change_thresholds, "/m", "channel")["passed"]


def test_the_dict_has_exactly_the_interface_fields():
  result = baseline.compare({"eval_mse": 1.0, "eval_mae": 0.5, "eval_r2": 0.8},
                            {"eval_mse": 1.0, "eval_mae": 0.5, "eval_r2": 0.8},
                            "regression", ChangeThresholds(), "/b", "channel")
  assert set(result) == {"baseline_uri", "baseline_source", "metrics", "passed", "reason"}
  assert [m["name"] for m in result["metrics"]] == ["eval_mse", "eval_mae", "eval_r2"]
  assert set(result["metrics"][0]) == {
      "name", "candidate", "baseline", "direction", "absolute_change", "relative_change",
      "absolute_threshold", "relative_threshold", "passed"}
  assert result["passed"] and json.loads(json.dumps(result)) == result
  with pytest.raises(ValueError, match="baseline_source must be one of .* Received: 'x'"):
    baseline.compare({}, {}, "regression", ChangeThresholds(), "/b", "x")


def test_defaults_are_the_headline_metrics_with_small_tolerance():
  t = EvaluatorConfig().change_thresholds
  assert t.regression.eval_mse == ChangeThreshold(None, None, 0.01)  # The metric's own.
  assert t.for_task("regression")["eval_mse"] == ChangeThreshold("lower_is_better", None,
                                                                 0.01)
  assert t.for_task("binary")["eval_accuracy"] == ChangeThreshold("higher_is_better",
                                                                  -0.01, None)
  assert t.for_task("multiclass")["eval_accuracy"] == ChangeThreshold("higher_is_better",
                                                                      -0.01, None)
  assert t.binary.eval_auc.absolute is None and t.binary.eval_auc.relative is None
  assert EvaluatorConfig().baseline is None


@pytest.mark.parametrize("data, key", [
    ({"baseline": "newest"}, "baseline"),
    ({"change_thresholds": {"regression": {"eval_mse": {"direction": "up"}}}},
     "change_thresholds.regression.eval_mse.direction"),
    ({"change_thresholds": {"regression": {"eval_rmse": {}}}},
     "change_thresholds.regression.eval_rmse"),
    ({"change_thresholds": {"binary": {"eval_auc": {"absolute": "a"}}}},
     "change_thresholds.binary.eval_auc.absolute"),
    # Upside down: a worse model would pass.
    ({"change_thresholds": {"regression": {"eval_mse": {"direction": "higher_is_better",
                                                        "relative": 0.05}}}},
     "change_thresholds.regression.eval_mse.direction"),
    ({"change_thresholds": {"binary": {"eval_auc": {"direction": "lower_is_better"}}}},
     "change_thresholds.binary.eval_auc.direction"),
])
def test_bad_settings_name_the_key(data, key):
  with pytest.raises(config_util.ConfigError) as e:
    config_util.from_dict(EvaluatorConfig, data).validate()
  assert e.value.key == key


def test_a_threshold_without_a_direction_takes_its_metrics_own():
  """ChangeThreshold(relative=0.05) on eval_mse, in Python or as {"eval_mse":
  {"relative": 0.05}}, bounds a rise: a 50 % worse candidate fails. (The default was
  higher_is_better, which blessed it; TFMA has no default: tensorflow_model_analysis
  0.47.1 evaluators/metrics_validator.py:86-98 raises on an unset direction.)"""
  python = ChangeThresholds(regression=RegressionChange(
      eval_mse=ChangeThreshold(relative=0.05)))
  typed = config_util.from_dict(EvaluatorConfig, {"change_thresholds": {"regression": {
      "eval_mse": {"relative": 0.05}}}}).validate().change_thresholds
  for thresholds in (python, typed):
    EvaluatorConfig(change_thresholds=thresholds).validate()
    worse = baseline.compare({"eval_mse": 1.5}, {"eval_mse": 1.0}, "regression",
                             thresholds, "/base", "channel")
    assert not worse["passed"] and worse["metrics"][0]["direction"] == "lower_is_better"
    assert baseline.compare({"eval_mse": 0.5}, {"eval_mse": 1.0}, "regression",
                            thresholds, "/base", "channel")["passed"]


def test_every_change_metric_has_a_known_direction_and_an_unknown_needs_one():
  from tfx_parallel.components.convergence_evaluator import config as c  # pylint: disable=g-import-not-at-top
  fields = {f for task in ("regression", "binary", "multiclass")
            for f in ChangeThresholds().for_task(task)}
  assert fields == set(c.METRIC_DIRECTIONS)
  with pytest.raises(config_util.ConfigError, match="eval_mse is lower_is_better.*set "
                     "change_thresholds.regression.eval_mse.direction=lower_is_better"):
    ChangeThreshold("higher_is_better").validate("change_thresholds.regression.eval_mse.",
                                                 "eval_mse")
  with pytest.raises(config_util.ConfigError) as e:
    ChangeThreshold(relative=0.1).validate("change_thresholds.regression.eval_new.",
                                           "eval_new")
  assert e.value.key == "change_thresholds.regression.eval_new.direction"
  ChangeThreshold("lower_is_better").validate("x.", "eval_new")  # Given: fine.


def test_an_infinite_candidate_metric_is_written_not_a_crash(tmp_path):
  """A diverged candidate whose eval_mse is inf: json.dumps(allow_nan=False) raised 'Out
  of range float values are not JSON compliant: inf'. Written as metrics.json writes it
  (properties.encode_json) and read back as a float."""
  from tfx_parallel.components.convergence_evaluator import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import summary  # pylint: disable=g-import-not-at-top
  comparison = baseline.compare({"eval_mse": math.inf, "eval_r2": math.nan},
                                {"eval_mse": 1.0, "eval_r2": 0.5}, "regression",
                                ChangeThresholds(), "/base", "channel")
  assert not comparison["passed"]
  executor.write_comparison(str(tmp_path), comparison)
  with open(tmp_path / baseline.FILE_NAME) as f:
    written = json.load(f)
  assert written["passed"] is False and written["metrics"][0]["candidate"] == "inf"
  assert written["metrics"][1]["candidate"] == "nan"
  back = summary.read_comparison(str(tmp_path))
  assert back["metrics"][0]["candidate"] == math.inf
  assert math.isnan(back["metrics"][1]["candidate"])
  # No bound accepts an infinite change: the fix is to leave it unchecked, not "=inf".
  assert "=inf" not in comparison["reason"]
  assert ("no bound accepts a change of inf; to leave it unchecked, set "
          "evaluator.change_thresholds.regression.eval_mse.relative=null"
          in comparison["reason"])


def test_a_nan_candidate_is_not_blamed_on_a_zero_baseline():
  comparison = baseline.compare({"eval_mse": math.nan}, {"eval_mse": 1.0}, "regression",
                                ChangeThresholds(), "/base", "channel")
  assert "baseline is 0" not in comparison["reason"]
  assert "relative change undefined (the candidate's value is NaN)" in comparison["reason"]
  assert "nan vs baseline 1" in comparison["reason"]


# --- The baseline scored as its own task, with its own labels. -------------------------

def _info(task, k=1, vocabulary=None):
  from tfx_parallel.components.convergence_evaluator import task as task_lib  # pylint: disable=g-import-not-at-top
  return task_lib.TaskInfo(task, k, None if vocabulary is None else tuple(vocabulary))


def test_the_baseline_is_read_with_its_own_task_and_labels():
  recorded = baseline.BaselineModel("/b", "channel", 3, {
      "task": "multiclass", "num_classes": 3, "label_vocabulary": ("bird", "cat", "dog")})
  candidate = _info("multiclass", 3, ["cat", "dog", "eel"])
  assert baseline.task_of(recorded, candidate, ("regression", 1)) == _info(
      "multiclass", 3, ["bird", "cat", "dog"]).__class__(
          "multiclass", 3, ("bird", "cat", "dog"),
          "the baseline model (given as baseline_model) at /b (its Model artifact)")
  unrecorded = baseline.BaselineModel("/b", "channel", 3)
  assert baseline.task_of(unrecorded, candidate, ("multiclass", 4)).num_classes == 4
  assert baseline.task_of(unrecorded, candidate, ("regression", 1)).label_vocabulary == (
      "cat", "dog", "eel")  # A stock model records nothing: as the candidate.


def test_a_baseline_of_another_task_says_both_tasks_and_the_fix():
  looked_up = baseline.BaselineModel("/b", "latest_blessed", 3)
  with pytest.raises(ValueError, match=r"the baseline is binary, the candidate is "
                     r"regression .*/b.*set evaluator.baseline=null for this run"):
    baseline.check_comparable(_info("regression"), _info("binary", 2), [], looked_up)
  given = baseline.BaselineModel("/b", "channel", 3)
  with pytest.raises(ValueError, match="the baseline is multiclass, the candidate is "
                     "binary.*do not pass baseline_model"):
    baseline.check_comparable(_info("binary", 2), _info("multiclass", 3), [], given)


def test_labels_compare_by_name_and_a_class_the_baseline_lacks_is_an_error():
  looked_up = baseline.BaselineModel("/b", "latest_blessed", 3)
  candidate = _info("multiclass", 3, ["cat", "dog", "eel"])
  base = _info("multiclass", 3, ["bird", "cat", "dog"])
  baseline.check_comparable(candidate, base, ["cat", "dog"], looked_up)  # Fair.
  with pytest.raises(ValueError) as e:
    baseline.check_comparable(candidate, base, ["cat", "dog", "eel"], looked_up)
  for part in ("['bird', 'cat', 'dog']", "['cat', 'dog', 'eel']", "['eel']",
               "set evaluator.baseline=null"):
    assert part in str(e.value)
  # Without vocabularies the class ids are the names: 3 classes vs 2.
  with pytest.raises(ValueError, match=r"\['2'\], which the baseline does not know"):
    baseline.check_comparable(_info("multiclass", 3), _info("multiclass", 2),
                              ["0", "1", "2"], looked_up)
  baseline.check_comparable(_info("multiclass", 2), _info("multiclass", 3), ["0", "1"],
                            looked_up)
  with pytest.raises(ValueError, match=r"\['ok', 'yes'\].*\['no'\], which the baseline"):
    baseline.check_comparable(_info("binary", 2, ["no", "yes"]),
                              _info("binary", 2, ["ok", "yes"]), ["no", "yes"], looked_up)
  with pytest.raises(ValueError, match="class 1 must be the same class"):
    baseline.check_comparable(_info("binary", 2, ["no", "yes"]),
                              _info("binary", 2, ["yes", "no"]), ["no", "yes"], looked_up)


def test_a_baseline_with_another_label_vocabulary_is_scored_with_its_own(tmp_path):
  """Continuous training: a new class ("eel") appears, so the candidate's sorted label
  vocabulary is [cat, dog, eel] and the blessed baseline's [bird, cat, dog]. The
  baseline is the very same cat/dog classifier: scored with the candidate's class ids
  it had accuracy 0.04 and the candidate was blessed against it. The ModelBlessing
  names the baseline as the stock Evaluator's does (tfx 1.16.0
  components/evaluator/executor.py:312-319)."""
  import evaluator_fixtures as testing  # pylint: disable=g-import-not-at-top
  from test_evaluator_executor import _run  # pylint: disable=g-import-not-at-top
  cat_dog = np.array([[2.0, -2.0], [-1.0, 1.0]])
  x, ids = testing.classification_data(300, cat_dog, [0.0, 0.0], noise=0.3)
  names = np.array(["cat", "dog"])[ids]
  train = names[:150].copy()
  train[:5] = "eel"
  examples = testing.write_examples(str(tmp_path / "ex"), {
      "train": testing.serialize_examples(x[:150], train, FEATURES, "y", label_type="bytes"),
      "eval": testing.serialize_examples(x[150:], names[150:], FEATURES, "y",
                                         label_type="bytes")}, FEATURES, "y")
  never = np.zeros((2, 1))
  candidate = testing.export_classifier_model(
      str(tmp_path / "cand"), "multiclass", np.concatenate([cat_dog, never], 1),
      [0.0, 0.0, -50.0], FEATURES, ["cat", "dog", "eel"])
  base = testing.export_classifier_model(
      str(tmp_path / "base"), "multiclass", np.concatenate([never, cat_dog], 1),
      [-50.0, 0.0, 0.0], FEATURES, ["bird", "cat", "dog"])
  candidate.id, base.id = 12, 7
  history = testing.linear_history(2.0 * np.exp(-np.arange(1, 31)) + 0.3, steps_per_epoch=100)
  _, blessing, props = _run(tmp_path, (examples, candidate), history, EvaluatorConfig(),
                            baseline_model=base, task="multiclass", num_classes=3,
                            label_vocabulary=["cat", "dog", "eel"])
  assert props["eval_accuracy"] > 0.9
  assert props["baseline_eval_accuracy"] == props["eval_accuracy"]
  assert props["baseline_passed"] == 1
  assert blessing.get_string_custom_property("baseline_model") == base.uri
  assert blessing.get_int_custom_property("baseline_model_id") == 7
  assert blessing.get_int_custom_property("current_model_id") == 12


def test_channel_and_lookup_together_are_rejected():
  from tfx import types  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator  # pylint: disable=g-import-not-at-top
  channel = types.Channel(type=standard_artifacts.Model)
  with pytest.raises(config_util.ConfigError, match="baseline: is 'latest_blessed' but a "
                     "baseline_model channel is given too.*evaluator.baseline=null"):
    ConvergenceEvaluator(model=channel, examples=types.Channel(
        type=standard_artifacts.Examples), baseline_model=channel,
                         config=EvaluatorConfig(baseline="latest_blessed"))


def test_lookup_without_a_store_says_how_to_give_one():
  with pytest.raises(ValueError, match="metadata_connection_config=.*baseline_model="):
    lookup.open_store("", {})


# --- The lookup, on stores shaped as TFX and the KFP launcher write them. ---------------

def _store():
  config = metadata_store_pb2.ConnectionConfig()
  config.fake_database.SetInParent()
  return metadata_store.MetadataStore(config)


def _put(store, type_name, uri="", **props):
  type_id = store.put_artifact_type(metadata_store_pb2.ArtifactType(name=type_name))
  artifact = metadata_store_pb2.Artifact(type_id=type_id, uri=uri)
  for k, v in props.items():
    field = {int: "int_value", float: "double_value", str: "string_value"}[type(v)]
    setattr(artifact.custom_properties[k], field, v)
  return store.put_artifacts([artifact])[0]


def _attribute(store, context_type, name, artifact_ids):
  type_id = store.put_context_type(metadata_store_pb2.ContextType(name=context_type))
  found = store.get_context_by_type_and_name(context_type, name)
  context_id = found.id if found else store.put_contexts(
      [metadata_store_pb2.Context(type_id=type_id, name=name)])[0]
  store.put_attributions_and_associations(
      [metadata_store_pb2.Attribution(context_id=context_id, artifact_id=a)
       for a in artifact_ids], [])


def _run(store, run_id, namespace, artifact_ids):
  """A KFP run context as the launcher writes it (client.go 2.4.1:312 GetPipeline: the
  run's ``namespace`` a custom property of its ``system.PipelineRun`` context)."""
  type_id = store.put_context_type(metadata_store_pb2.ContextType(name="system.PipelineRun"))
  context = metadata_store_pb2.Context(type_id=type_id, name=run_id)
  context.custom_properties["namespace"].string_value = namespace
  [context_id] = store.put_contexts([context])
  store.put_attributions_and_associations(
      [metadata_store_pb2.Attribution(context_id=context_id, artifact_id=a)
       for a in artifact_ids], [])


def test_on_kfp_another_namespace_s_blessed_model_of_the_same_pipeline_name_is_not_the_baseline():
  """KFP keys ``system.Pipeline`` by the pipeline's name alone (client.go 2.4.1:306), so
  two profiles running pipelines of one name share it: only this run's namespace counts."""
  store = _store()
  mine = _put(store, "tfx.Model", "minio://mlpipeline/v2/artifacts/a/mine")
  b_mine = _put(store, "tfx.ModelBlessing", "/b1", blessed=1.0, current_model_id=float(mine))
  theirs = _put(store, "tfx.Model", "minio://mlpipeline/v2/artifacts/b/theirs")
  b_theirs = _put(store, "tfx.ModelBlessing", "/b2", blessed=1.0,
                  current_model_id=float(theirs))  # Blessed later.
  candidate = _put(store, "tfx.Model", "/m3")
  _attribute(store, "system.Pipeline", "loop", [mine, b_mine, theirs, b_theirs, candidate])
  _run(store, "run-1", "alice", [mine, b_mine])
  _run(store, "run-2", "bob", [theirs, b_theirs])
  _run(store, "run-3", "alice", [candidate])
  assert lookup.latest_blessed(store, candidate).model_id == mine
  other = _put(store, "tfx.Model", "/m4")
  _attribute(store, "system.Pipeline", "loop", [other])
  _run(store, "run-4", "carol", [other])
  assert lookup.latest_blessed(store, other) is None  # Nothing blessed in carol's runs.


@pytest.mark.parametrize("shape", ["tfx", "kfp"])
def test_latest_blessed_is_the_newest_blessed_model_of_the_same_pipeline(shape):
  store = _store()
  model_type, blessing_type, context_type = (
      ("Model", "ModelBlessing", "pipeline") if shape == "tfx" else
      ("tfx.Model", "tfx.ModelBlessing", "system.Pipeline"))
  one = 1 if shape == "tfx" else 1.0  # KFP: every number a double.
  zero = 0 if shape == "tfx" else 0.0
  num = int if shape == "tfx" else float
  m1 = _put(store, model_type, "/m1")
  b1 = _put(store, blessing_type, "/b1", blessed=one, current_model_id=num(m1))
  m2 = _put(store, model_type, "/m2")
  b2 = _put(store, blessing_type, "/b2", blessed=zero, current_model_id=num(m2))
  other = _put(store, model_type, "/other")  # Another pipeline's, blessed later.
  b_other = _put(store, blessing_type, "/bo", blessed=one, current_model_id=num(other))
  candidate = _put(store, model_type, "/m3")
  _attribute(store, context_type, "mine", [m1, b1, m2, b2, candidate])
  _attribute(store, context_type, "theirs", [other, b_other])

  found = lookup.latest_blessed(store, candidate)
  assert (found.uri, found.model_id, found.blessing_id, found.pipeline) == (
      "/m1", m1, b1, "mine")
  m4 = _put(store, model_type, "/m4")
  b4 = _put(store, blessing_type, "/b4", blessed=one, current_model_id=num(m4))
  _attribute(store, context_type, "mine", [m4, b4])
  assert lookup.latest_blessed(store, candidate).uri == "/m4"
  # The candidate's own blessing is never its baseline; the first run has none.
  assert lookup.latest_blessed(store, m4).uri == "/m1"
  first = _store()
  lone = _put(first, model_type, "/lone")
  _attribute(first, context_type, "p", [lone])
  assert lookup.latest_blessed(first, lone) is None


# --- The loop end to end (issue #50 item 4), locally with the stock Pusher. -------------

# A user's own pipeline script (no CLI: it has no push destination): PartitionedExampleGen
# -> DistributedTrainer -> ConvergenceEvaluator (evaluator.baseline=latest_blessed) ->
# the stock Pusher, run three times on one SQLite ML Metadata store, training for real:
# good (enough steps), worse (far fewer steps), better (more steps than good). The same
# seed and data each run (ExampleGen is served from TFX's cache after the first).
STEPS = {"good": 60, "worse": 3, "better": 300}
_LOOP_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from tfx import v1 as tfx
    from tfx_parallel.pipeline import config as config_lib
    from tfx_parallel.pipeline import pipeline as pipeline_lib
    home, steps = sys.argv[1], json.loads(sys.argv[2])
    connection = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        os.path.join(home, "metadata.sqlite"))
    for name, n in steps.items():
      config = config_lib.PipelineConfig.from_dict({
          "pipeline_name": "loop",
          "example_gen": {"rows": 400, "noise": 0.1},
          "trainer": {"layout": "single", "steps": n, "min_steps": 0, "batch_size": 32,
                      "learning_rate": 0.1, "log_every": 1, "steps_per_execution": 1},
          "evaluator": {"baseline": "latest_blessed", "require_converged": False,
                        "min_eval_examples": 50}}).validate()
      components = pipeline_lib.create_components(config, connection)
      trainer = next(c for c in components if c.id == "DistributedTrainer")
      evaluator = next(c for c in components if c.id == "ConvergenceEvaluator")
      pusher = tfx.components.Pusher(
          model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
          push_destination=tfx.proto.PushDestination(
              filesystem=tfx.proto.PushDestination.Filesystem(
                  base_directory=os.path.join(home, "serving"))))
      print(f"=== run {name} ===", file=sys.stderr, flush=True)
      tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
          pipeline_name=config.pipeline_name, pipeline_root=os.path.join(home, "root"),
          components=components + [pusher], metadata_connection_config=connection))
      print(f"=== done {name} ===", file=sys.stderr, flush=True)
""")


def _by_run(store, type_name):
  """The three runs' artifacts of a type, in run order (ids grow with the runs)."""
  found = sorted(store.get_artifacts_by_type(type_name), key=lambda a: a.id)
  assert len(found) == len(STEPS), (type_name, [a.uri for a in found])
  return dict(zip(STEPS, found))


@pytest.fixture(scope="module")
def local_loop(tmp_path_factory):
  """Runs good, worse, better on one store; {name: (metrics, blessing, pushed, model)},
  and ``"console"``: {name: that run's console output}, ``"home"``: the directory."""
  home = str(tmp_path_factory.mktemp("loop"))
  proc = subprocess.run([sys.executable, "-c", _LOOP_SCRIPT, home, json.dumps(STEPS)],
                        capture_output=True, text=True, timeout=1500)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  console = {name: proc.stderr.split(f"=== run {name} ===")[1].split(
      f"=== done {name} ===")[0] for name in STEPS}
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = os.path.join(home, "metadata.sqlite")
  store = metadata_store.MetadataStore(config)
  columns = [_by_run(store, t) for t in ("ConvergenceMetrics", "ModelBlessing",
                                         "PushedModel", "Model")]
  runs = {name: tuple(c[name] for c in columns) for name in STEPS}
  runs["console"], runs["home"] = console, home
  return runs


def _comparison(metrics):
  path = os.path.join(metrics.uri, baseline.FILE_NAME)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


@pytest.mark.slow
def test_first_run_is_judged_alone_blessed_and_pushed(local_loop):
  metrics, blessing, pushed, model = local_loop["good"]
  assert blessing.custom_properties["blessed"].int_value == 1
  assert blessing.custom_properties["current_model_id"].int_value == model.id
  assert _comparison(metrics) is None
  assert baseline.BASELINE_URI not in metrics.custom_properties
  assert "no blessed model in this pipeline yet" in local_loop["console"]["good"]
  _assert_pushed(local_loop, "good")


def _assert_pushed(runs, name):
  """The stock Pusher pushed the run's Model: ``pushed`` 1 in ML Metadata and its
  SavedModel in a version directory under <home>/serving."""
  pushed, model = runs[name][2], runs[name][3]
  assert pushed.custom_properties["pushed"].int_value == 1
  destination = pushed.custom_properties["pushed_destination"].string_value
  assert os.path.dirname(destination) == os.path.join(runs["home"], "serving")
  assert os.path.isfile(os.path.join(destination, "saved_model.pb"))
  # The Pusher's execution read this run's Model (ML Metadata's events: TFX 1.16's Pusher
  # records no pushed_model_id property, tfx/components/pusher/executor.py).
  store = metadata_store.MetadataStore(_store_config(runs))
  [pusher] = [e.execution_id for e in store.get_events_by_artifact_ids([pushed.id])
              if e.type == metadata_store_pb2.Event.OUTPUT]
  read = [e.artifact_id for e in store.get_events_by_execution_ids([pusher])
          if e.type == metadata_store_pb2.Event.INPUT]
  assert model.id in read, (read, model.id)
  # The stock Pusher records no model id (tfx 1.16.0 components/pusher/executor.py
  # _MarkPushed: pushed, pushed_destination, pushed_version): it pushed this run's model.
  assert filecmp.cmp(os.path.join(destination, "saved_model.pb"),
                     os.path.join(path_utils.serving_model_path(model.uri),
                                  "saved_model.pb"), shallow=False)


@pytest.mark.slow
def test_only_the_blessed_runs_reach_the_push_directory(local_loop):
  pushed = [local_loop[n][2].custom_properties["pushed_destination"].string_value
            for n in ("good", "better")]
  assert sorted(os.listdir(os.path.join(local_loop["home"], "serving"))) == sorted(
      os.path.basename(p) for p in pushed)


@pytest.mark.slow
def test_worse_model_is_not_blessed_nor_pushed_and_says_why(local_loop):
  metrics, blessing, pushed, _ = local_loop["worse"]
  good_model = local_loop["good"][3]
  assert blessing.custom_properties["blessed"].int_value == 0
  assert pushed.custom_properties["pushed"].int_value == 0
  assert "pushed_destination" not in pushed.custom_properties
  comparison = _comparison(metrics)
  assert comparison["baseline_source"] == "latest_blessed"
  assert comparison["baseline_uri"] == good_model.uri and not comparison["passed"]
  [mse] = [m for m in comparison["metrics"] if m["name"] == "eval_mse"]
  assert mse["candidate"] > mse["baseline"] and not mse["passed"]
  values = P.read_properties(metrics.custom_properties)
  assert values[P.EVAL_MSE] == pytest.approx(mse["candidate"])
  assert values["baseline_eval_mse"] == pytest.approx(mse["baseline"])
  assert values[baseline.BASELINE_PASSED] == 0
  message = values[P.BLESSING_MESSAGE]
  print("worse model:", message)
  assert f"eval_mse {mse['candidate']:.6g} vs baseline {mse['baseline']:.6g}" in message
  assert "evaluator.change_thresholds.regression.eval_mse.relative 0.01" in message
  # The run's console output says why, as the user sees it.
  console = local_loop["console"]["worse"]
  assert "ConvergenceEvaluator: not blessed: " + baseline.blessing_message(comparison) in (
      console), console[-3000:]


@pytest.mark.slow
def test_better_model_is_blessed_and_pushed_against_the_last_blessed(local_loop):
  metrics, blessing, _, model = local_loop["better"]
  assert blessing.custom_properties["blessed"].int_value == 1
  _assert_pushed(local_loop, "better")
  comparison = _comparison(metrics)
  # The baseline is run 1's model (run 2's was not blessed), recorded in ML Metadata too.
  good_model = local_loop["good"][3]
  assert comparison["baseline_uri"] == good_model.uri != model.uri
  assert comparison["baseline_uri"] != local_loop["worse"][3].uri
  assert metrics.custom_properties[baseline.BASELINE_URI].string_value == good_model.uri
  # The ModelBlessing names it as the stock Evaluator's does (executor.py:312-319).
  assert blessing.custom_properties["baseline_model"].string_value == good_model.uri
  assert blessing.custom_properties["baseline_model_id"].int_value == good_model.id
  assert "baseline_model" not in local_loop["good"][1].custom_properties  # First run.
  [mse] = [m for m in comparison["metrics"] if m["name"] == "eval_mse"]
  assert comparison["passed"] and mse["candidate"] < mse["baseline"]
  good_mse = P.read_properties(local_loop["good"][0].custom_properties)[P.EVAL_MSE]
  assert mse["baseline"] == pytest.approx(good_mse)


@pytest.mark.slow
def test_summary_and_metrics_table_show_the_comparison(local_loop):
  from tfx_parallel.pipeline import metrics_report  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import summary  # pylint: disable=g-import-not-at-top
  metrics = local_loop["worse"][0]
  line = summary.format_baseline(summary.read_comparison(metrics.uri))
  assert line.startswith(f"baseline   failed against {local_loop['good'][3].uri} "
                         "(latest_blessed): eval_mse ")
  assert "FAILED" in line and "eval_mae" in line
  text = summary.format_summary({"ConvergenceMetrics": {
      "uri": metrics.uri, **P.read_properties(metrics.custom_properties)},
      "ModelBlessing": {"blessed": 0}})
  assert line in text and "blessed    False (worse than the baseline at" in text
  table = metrics_report.format_table(metrics_report.find_runs(
      metadata_store.MetadataStore(_store_config(local_loop)), "loop"))
  assert "vs baseline" in table
  cells = [l for l in table.splitlines() if "loop" in l]
  assert len(cells) == 3
  assert [("passed" in c, "failed" in c) for c in cells] == [
      (False, False), (False, True), (True, False)]


def _store_config(runs):
  """The loop's SQLite store: <home>/metadata.sqlite."""
  home = runs["home"]
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = os.path.join(home, "metadata.sqlite")
  return config


# --- On Kubeflow: KFP's own ML Metadata, reached through metadata-grpc-service. ---------

def test_on_kfp_the_lookup_finds_the_blessed_model_through_metadata_grpc(tmp_path):
  """Two runs recorded as the KFP launcher records them (tests/kubeflow_launcher.py's
  KfpMetadata: RecordArtifact, PublishExecution with the pipeline and run contexts,
  every number a double), served over ML Metadata's gRPC API as metadata-grpc-service
  serves the cluster's; the step sees the candidate's MLMD id as kubeflow/entrypoint.py
  passes it (TFX's entry point hashes the ids)."""
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from kubeflow_launcher import KfpMetadata  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.kubeflow import entrypoint  # pylint: disable=g-import-not-at-top
  kfp = KfpMetadata(str(tmp_path / "mlmd.sqlite"))
  root = "minio://mlpipeline/v2/artifacts"

  def run(run_id, blessed, pipeline="loop"):
    contexts = kfp.pipeline(pipeline, run_id, root)
    model_uri = f"{root}/{pipeline}/{run_id}/DistributedTrainer/model"
    model = kfp.record_artifact("model", {"schemaTitle": "tfx.Model"}, model_uri, {
        "task": "multiclass", "num_classes": 3, "label_vocabulary": '["a", "b", "c"]'})
    trainer = kfp.create_execution("DistributedTrainer", contexts)
    kfp.publish_execution(trainer, contexts, {"model": model})
    if blessed is not None:
      blessing = kfp.record_artifact(
          "blessing", {"schemaTitle": "tfx.ModelBlessing"},
          f"{root}/{pipeline}/{run_id}/ConvergenceEvaluator/blessing",
          {"blessed": blessed, "current_model": model_uri, "current_model_id": model})
      evaluator = kfp.create_execution("ConvergenceEvaluator", contexts)
      kfp.publish_execution(evaluator, contexts, {"blessing": blessing})
    return model, model_uri

  good, good_uri = run("run-1", 1)
  run("run-2", 0)
  run("other-1", 1, pipeline="another")  # Another pipeline's, later: not ours.
  candidate, _ = run("run-3", None)
  executor_input = {"inputs": {"artifacts": {"model": {"artifacts": [
      {"name": str(candidate), "uri": "minio://x"}]}}}}
  environ = {lookup.MLMD_HOST_ENV: "127.0.0.1", lookup.MLMD_PORT_ENV: str(kfp.serve()),
             lookup.INPUT_IDS_ENV: json.dumps(entrypoint.input_ids_by_key(executor_input))}
  model = standard_artifacts.Model()
  model.id = 1234567890123  # As TFX's KFP entry point sets it: a hash of the name.
  config = EvaluatorConfig(baseline="latest_blessed")
  try:
    found = executor.find_baseline({}, {}, config, model, environ)
    assert (found.uri, found.source, found.model_id) == (good_uri, "latest_blessed", good)
    # Its own labels, to score it with (num_classes a double as the launcher records it).
    assert found.properties == {"task": "multiclass", "num_classes": 3,
                                "label_vocabulary": ("a", "b", "c")}
    assert lookup.readable_uri(good_uri).startswith("s3://mlpipeline/v2/artifacts/loop/")
    # Without the id from the entry point, the hashed id finds nothing to compare with.
    del environ[lookup.INPUT_IDS_ENV]
    assert executor.find_baseline({}, {}, config, model, environ) is None
  finally:
    kfp.close()


def test_an_unreadable_baseline_says_where_and_what_to_change(tmp_path):
  # A local path: asking TensorFlow about an s3:// path without tensorflow-io's
  # filesystem leaves it to abort at the exit of a process that ran a LocalDagRunner.
  from tfx_parallel.components.convergence_evaluator import executor  # pylint: disable=g-import-not-at-top
  missing = str(tmp_path / "gone")
  with pytest.raises(FileNotFoundError, match=r"baseline model \(latest_blessed\) at "
                     r".*gone cannot be read.*entry point sets up the pipeline root.s object store.*"
                     r"evaluator.baseline=null"):
    executor.compare_with_baseline(baseline.BaselineModel(missing, "latest_blessed", 7),
                                   None, None,
                                   EvaluatorConfig(), str(tmp_path), [], "y", True)
