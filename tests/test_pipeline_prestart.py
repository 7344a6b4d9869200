"""The training process started early (components/distributed_trainer/run/prestart.py): a real
early process (it imports TensorFlow and tf_keras), handed a real ``-m`` command."""
import json
import logging
import os
import sys

import pytest

from tfx_parallel.components.distributed_trainer.run import prestart

# Run by the early process as `python -m probe_early`: what a command sees there.
PROBE = '''
import json, os, sys
libs = {l.split()[-1] for l in open("/proc/self/maps") if ".so" in l}
omp = sorted(l for l in libs if os.path.basename(l).startswith(("libiomp", "libomp", "libgomp")))
with open(sys.argv[1], "w") as f:
  json.dump({"argv": sys.argv[1:], "name": __name__, "omp": omp,
             "kmp": os.environ.get("KMP_INIT_AT_FORK"), "cwd": os.getcwd(),
             "stdin": list(os.fstat(0)[1:3]),
             "preloaded": sorted(m for m in ("tensorflow", "tf_keras", "matplotlib.figure")
                                 if m in sys.modules)}, f)
sys.exit(int(sys.argv[2]))
'''


@pytest.fixture(name="probe_env")
def _probe_env(tmp_path):
  (tmp_path / "probe_early.py").write_text(PROBE)
  path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
  env = dict(os.environ, PYTHONPATH=path)
  env.pop("KMP_INIT_AT_FORK", None)
  yield env
  prestart.discard()


def test_unmatched_keys_are_those_the_imports_did_not_reach():
  started = {"A": "1", "B": "1", "GONE": "x"}
  imported = {"A": "1", "B": "1", "GONE": "x", "SET_BY_IMPORT": "on"}
  wanted = {"A": "1", "B": "2", "SET_BY_IMPORT": "on", "NEW": "y"}
  assert prestart.unmatched_keys(started, imported, wanted) == ["B", "GONE", "NEW"]
  assert prestart.unmatched_keys(started, imported, dict(started, SET_BY_IMPORT="on")) == []
  # Read only when an OpenMP runtime loads: the early process takes the wanted value.
  assert prestart.unmatched_keys(started, imported,
                                 dict(started, KMP_INIT_AT_FORK="FALSE")) == []


def test_held_stops_a_process_nobody_took(probe_env):
  with prestart.held():
    early = prestart._held  # pylint: disable=protected-access
    proc = early.proc
    assert proc.poll() is None
    with prestart.held():  # Nested: shares the outer process.
      assert prestart._held is early  # pylint: disable=protected-access
    assert proc.poll() is None
  assert proc.poll() is not None and prestart._held is None  # pylint: disable=protected-access
  with prestart.held(wanted=False):
    assert prestart._held is None  # pylint: disable=protected-access


@pytest.mark.slow
def test_early_process_runs_the_command_as_python_m_would(tmp_path, probe_env):
  out = tmp_path / "seen.json"
  assert prestart.start(probe_env)
  # The pipeline process imported scikit-learn meanwhile (sklearn/__init__.py:57).
  wanted = dict(probe_env, KMP_INIT_AT_FORK="FALSE")
  proc = prestart.take([sys.executable, "-m", "probe_early", str(out), "3"], wanted)
  assert proc is not None
  assert proc.wait(timeout=300) == 3  # The command's exit code is the process's.
  seen = json.loads(out.read_text())
  assert seen["argv"] == [str(out), "3"] and seen["name"] == "__main__"
  assert seen["preloaded"] == sorted(prestart.PRELOAD)  # Imported before the command came.
  assert seen["kmp"] == "FALSE"
  assert seen["cwd"] == os.getcwd()
  assert seen["stdin"] == list(os.fstat(0)[1:3])  # This process's stdin, as with Popen.
  assert seen["omp"] == [], "an OpenMP runtime read KMP_* before the command set them"
  assert prestart.take([sys.executable, "-m", "probe_early"], wanted) is None  # Used once.


@pytest.mark.slow
def test_a_changed_environment_gets_a_new_process(tmp_path, probe_env, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  assert prestart.start(probe_env)
  early = prestart._held.proc  # pylint: disable=protected-access
  wanted = dict(probe_env, TF_CPP_MIN_LOG_LEVEL="0")  # TensorFlow reads it at import.
  assert prestart.take([sys.executable, "-m", "probe_early", str(tmp_path / "x"), "0"],
                       wanted) is None
  assert early.poll() is not None  # Stopped, not left waiting.
  assert not (tmp_path / "x").exists()
  assert "the environment differs in TF_CPP_MIN_LOG_LEVEL" in caplog.text


def test_a_process_that_cannot_start_leaves_the_launch_to_the_launcher(monkeypatch, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  monkeypatch.setattr(sys, "executable", "/nonexistent/python3")  # A real spawn failure.
  with prestart.held():
    assert prestart._held is None  # pylint: disable=protected-access
    assert prestart.take(["/nonexistent/python3", "-m", "x"], dict(os.environ)) is None
  assert "Could not start the training process early" in caplog.text
