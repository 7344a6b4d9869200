"""End to end: `tfx-parallel run --layout auto --device-memory ...` on 4 logical CPU devices.

The seed problem with the built-in mlp, one hidden layer of 4096 and Adam: its training
state is (4 x 4096 + 1) parameters x 4 B x (parameter + gradient + 2 slots) = 256 KiB on
one device (320 KiB with two copies of the 2 x 4096 kernel in transit at an update, the
export or a restore), over a 200 KiB budget; the planner picks a model axis of 2 (160 KiB
per device) and 2 replicas. One CLI run is shared by the assertions (plus a second, cached ingest, with a budget
nothing fits). ML Metadata is read with the plain ml_metadata API.
"""
import json
import os
import subprocess
import sys

import pytest
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

HIDDEN = 4096
PARAMS = 4 * HIDDEN + 1          # hidden_1 kernel 2xH + bias H, output kernel Hx1 + bias 1
# Per device on a model axis of 2: hidden_1 kernel (2xH) and bias (H) and the output
# kernel (H) halved, the output bias whole, times (param + grad + 2 Adam slots), plus
# Adam's int64 step counter, plus two blocks of the largest variable in transit: hidden_1's
# kernel half, 2 x H/2 x 4 B (the planner counts the same, without the step counter).
STATE_ON_2 = (4 * HIDDEN // 2 + 1) * 4 * 4 + 8 + 2 * (2 * HIDDEN // 2 * 4)

pytestmark = pytest.mark.slow


def _cli(home, *args):
  cmd = [sys.executable, "-m", "tfx_parallel.pipeline.cli", *args]
  return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False,
                        cwd=home)


def _run_args(home, memory):
  return ["run", "--home", home, "--layout", "auto", "--device-memory", memory,
          "--devices", "4", "--model", "mlp", "--hparams", json.dumps({"hidden_units": [HIDDEN]}),
          "--optimizer", "adam", "--steps", "10", "--epochs", "1", "--rows", "1000"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  home = str(tmp_path_factory.mktemp("auto"))
  first = _cli(home, *_run_args(home, "200KiB"))
  assert first.returncode == 0, first.stderr[-4000:]
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = os.path.join(home, "metadata.sqlite")
  store = metadata_store.MetadataStore(cfg)
  return home, first, store


def _artifact(store, type_name):
  found = store.get_artifacts_by_type(type_name)
  assert len(found) == 1, [a.uri for a in found]
  return found[0]


def _props(artifact):
  out = {}
  for name, value in artifact.custom_properties.items():
    out[name] = getattr(value, value.WhichOneof("value"))
  return out


def test_the_planner_choice_is_printed_and_trains_on_that_mesh(run):
  _, first, store = run
  assert ("[trainer] layout auto on 4 logical CPU device(s), device_memory of 200.0 KiB: "
          "mesh 2x2 (the state needs 320.0 KiB on one device") in first.stdout
  assert "[trainer] layout mesh replicas 2 mesh 2x2 devices 4" in first.stdout
  history = _props(_artifact(store, "TrainingHistory"))
  assert (history["layout"], history["mesh_shape"], history["replicas"]) == ("mesh", "2x2", 2)
  assert len(json.loads(history["devices"])) == 4
  assert (history["device_type"], history["collective"]) == ("CPU", "dtensor_cpu")


def test_ml_metadata_holds_the_choice_and_its_reason(run):
  _, _, store = run
  history = _artifact(store, "TrainingHistory")
  props = _props(history)
  assert props["layout_chosen"] == "mesh 2x2"
  assert props["layout_reason"] == (
      "the state needs 320.0 KiB on one device, more than its 200.0 KiB; a model axis of 2 "
      "is the smallest that fits (160.0 KiB per device), with 2 data-parallel replica(s); "
      # The host figure (plan/layout_search.host_bytes): the export's host model,
      # (4 x 4096 + 1) x 4 B = 64.0 KiB, + one block of a 2 x 4096 kernel in transit
      # (split over the model axis of 2: 16.0 KiB), + the best evaluation's weights kept
      # for the export, whole parameters again, 64.0 KiB (every run keeps them:
      # layout_choice.keeps_best_weights).
      "the host holds 144.0 KiB at the export")
  with open(os.path.join(history.uri, "history.json")) as f:
    assert json.load(f)["layout_chosen"] == "mesh 2x2"


def test_measured_bytes_are_on_the_history_and_the_metrics(run):
  _, _, store = run
  for type_name in ("TrainingHistory", "ConvergenceMetrics"):
    props = _props(_artifact(store, type_name))
    assert props["param_count"] == PARAMS, type_name
    assert props["param_bytes_total"] == PARAMS * 4, type_name
    assert props["state_bytes_per_device"] == STATE_ON_2, type_name
  assert STATE_ON_2 < 200 * 1024 < PARAMS * 4 * 4


def test_metrics_command_shows_the_bytes(run):
  home, _, _ = run
  out = _cli(home, "metrics", "--home", home)
  assert out.returncode == 0, out.stderr[-2000:]
  header, row = out.stdout.splitlines()[:2]
  assert "params" in header and "state B/device" in header
  assert f"{PARAMS:,}" in row and f"{STATE_ON_2:,}" in row


def test_a_model_that_fits_nowhere_fails_before_training_with_the_numbers(run):
  home, _, _ = run
  second = _cli(home, *_run_args(home, "32KiB"))
  assert second.returncode != 0
  # M=4: (4 x 4096 / 4 + 1) x 4 B x 4 + two of hidden_1's 2 x 1024 kernel blocks in transit.
  assert ("needs 80.0 KiB per device even on the widest model axis possible here "
          "(M=4 of 4 device(s)), and each device has 32.0 KiB") in second.stderr
  assert "[trainer] model " not in second.stdout  # No training process started.
