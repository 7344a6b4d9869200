"""The typed run record (components/common/run_history.py): the one schema of history.json
and of the TrainingHistory properties. A key written outside it fails; a field no real
run writes (outside its declared case) fails."""
import dataclasses
import json
import os

import pytest

from tfx_parallel.components.common import keys, run_history
from tfx_parallel.components.common.run_history import RunHistory

FIELDS = {f.name for f in dataclasses.fields(RunHistory)}


def test_a_key_outside_the_schema_is_refused_by_name():
  with pytest.raises(ValueError, match=r"^run: key\(s\) \['wait_fraction'\] are not "
                                       r"fields of the run record"):
    RunHistory.from_dict({"layout": "single", "wait_fraction": -1.0}, "run")


def test_a_history_from_before_the_retired_keys_were_dropped_still_reads():
  old = RunHistory.from_dict({"layout": "single", "input_wait_fraction": -1.0,
                              "padded_features": 0})
  assert old.to_dict() == {"layout": "single"}


def test_json_round_trip_leaves_out_what_was_not_recorded():
  record = RunHistory(layout="mesh", mesh_shape=[2, 2], diverged=False, label_vocabulary=None,
                      examples_per_sec=float("nan"))
  back = RunHistory.from_json(record.to_json())
  assert set(json.loads(record.to_json().replace("NaN", "0"))) == {
      "layout", "mesh_shape", "diverged", "examples_per_sec"}
  assert back.layout == "mesh" and back.mesh_shape == [2, 2] and back.label_vocabulary is None


def test_the_properties_are_named_once_and_typed_as_ml_metadata_stores_them():
  record = RunHistory(
      layout="mesh", replicas=2, mesh_shape=[2, 2], devices=["/cpu:0", "/cpu:1"],
      device_type="CPU", collective="dtensor_cpu", model="linear",
      optimizer="Adam", optimizer_config={"class": "Adam", "config": {"b": 1, "a": 2}},
      loss={"class": "mse", "config": {}}, steps_run=10, examples_per_sec=12.5,
      diverged=True, diverged_reason="", skipped_examples=3,
      input_cache={"mode": "memory", "reason": "fits"}, layout_rules={"k": ["model", None]},
      param_count=3, param_bytes_total=12, state_bytes_per_device=24,
      missing_values={"x": {"train": 1}}, layout_chosen="mesh 2x2", layout_reason="fits",
      total_steps=10)
  assert record.to_properties() == {
      "layout": "mesh", "replicas": 2, "mesh_shape": "2x2",
      "devices": '["/cpu:0", "/cpu:1"]', keys.DEVICE_TYPE: "CPU",
      keys.COLLECTIVE: "dtensor_cpu", "model": "linear",
      "optimizer": "Adam",
      "optimizer_config": '{"class": "Adam", "config": {"a": 2, "b": 1}}',
      "loss": '{"class": "mse", "config": {}}', "steps_run": 10, "examples_per_sec": 12.5,
      "diverged": 1, "skipped_examples": 3, "input_cache": "memory",
      "layout_rules": '{"k": ["model", null]}', keys.PARAM_COUNT: 3,
      keys.PARAM_BYTES_TOTAL: 12, keys.STATE_BYTES_PER_DEVICE: 24,
      "missing_values": '{"x": {"train": 1}}', keys.LAYOUT_CHOSEN: "mesh 2x2",
      keys.LAYOUT_REASON: "fits"}  # diverged_reason "": not set; total_steps: no property.
  names = run_history.property_names()
  assert len(names) == len(set(names))


def _when(case: str) -> set:
  return {name for name, when in run_history.conditional_fields().items() if when == case}


@pytest.mark.slow
def test_real_runs_write_every_field_and_nothing_else(tmp_path):
  """Two tiny runs (single, mesh 1x2 with what an executor decides; a process each): the
  history.json keys are exactly the fields every run writes, plus those of each run's
  own case, written once by the training process. A field declared conditional that
  its case does not write, or a field no run writes, fails here."""
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  feats, _, rows = tu.write_examples(str(tmp_path / "ex"), rows=128, eval_rows=32)
  decided = {"missing_values": {"x0": {"train": 0, "eval": 0, "fill": 0.0}},
             "missing_labels": {"count": 0, "rows": 160, "share": 0.0, "splits": {},
                                "policy": "skip"},
             "input_columns": {"left_out": {"id": "ID-like"}},
             "layout_choice": {keys.LAYOUT_CHOSEN: "mesh 1x2", keys.LAYOUT_REASON: "fits"}}
  jobs = [dict(tu.job_dict(str(tmp_path / layout), str(tmp_path / "ex"), feats, rows,
                           layout=layout, steps=4, batch_size=32, log_every=2,
                           checkpoint_every=0, **extra), **job_extra)
          for layout, extra, job_extra in (("single", {}, {}),
                                           ("mesh", {"mesh": [1, 2]}, decided))]
  for job in jobs:
    tu.run_jobs_in_one_process([job], os.path.dirname(job["history_dir"]))
  written = {}
  for job in jobs:
    with open(os.path.join(job["history_dir"], keys.HISTORY_FILE)) as f:
      written[job["config"]["layout"]] = json.load(f)
  every_run = FIELDS - set(run_history.conditional_fields())
  linear = _when(run_history.WHEN_LINEAR)
  assert set(written["single"]) == every_run | linear, (
      set(written["single"]) ^ (every_run | linear))
  assert set(written["mesh"]) == (every_run | linear | _when(run_history.WHEN_MESH)
                                  | _when(run_history.WHEN_EXECUTOR)
                                  | _when(run_history.WHEN_AUTO))
  assert written["mesh"]["missing_values"] == decided["missing_values"]
  assert written["mesh"]["missing_labels"] == decided["missing_labels"]
  assert written["mesh"]["input_columns"] == decided["input_columns"]
  assert written["mesh"]["layout_chosen"] == "mesh 1x2"
  # What the user wrote (config optimizer sgd), on the mesh too (not MeshSGD).
  for record in written.values():
    assert record["optimizer"] == record["optimizer_config"]["class"] == "SGD"
  assert written["mesh"]["optimizer_config"] == written["single"]["optimizer_config"]
