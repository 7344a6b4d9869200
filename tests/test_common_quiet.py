"""components/common/quiet.py: what quiet() drops (only known noise) and what it keeps."""
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from tfx_parallel.components.common import quiet
from tfx_parallel.components.distributed_trainer import failures


def _record(name, message, level=logging.WARNING, exc_info=None):
  return logging.LogRecord(name, level, "x.py", 1, message, None, exc_info)


def test_the_filter_drops_only_known_noise():
  f = quiet.LogNoiseFilter()
  assert not f.filter(_record("tensorflow", "`fare ($)` is not a valid node name. Accepted "
                                            "names conform to Regex /x/"))
  assert not f.filter(_record("absl", "ArtifactQuery.property_predicate is not supported."))
  assert not f.filter(_record(quiet.BEAM_RERAISE_LOGGER, "x.csv:3: bad [while running 'P']",
                              logging.ERROR, (ValueError, ValueError("x"), None)))
  assert f.filter(_record("tensorflow", "5 out of the last 5 calls triggered retracing"))
  assert f.filter(_record("absl", "Execution 3 failed."))
  assert f.filter(_record(quiet.BEAM_RERAISE_LOGGER, "a plain Beam error", logging.ERROR))


# A user's pipeline script: noise from TF's and TFX's loggers, a teardown error, and
# real lines, with and without quiet(); then a child process (the trainer's training
# process) that inherits the quiet.
_SCRIPT = textwrap.dedent("""
    import logging, subprocess, sys
    from absl import logging as absl_logging
    if sys.argv[1] == "quiet":
      import tfx_parallel.components as tfxp
      tfxp.quiet()
    logging.getLogger("tensorflow").warning(
        "`trip miles` is not a valid node name. Accepted names conform to Regex /x/")
    absl_logging.warning("ArtifactQuery.property_predicate is not supported.")
    absl_logging.warning("a real warning")

    class AtomicFunction:  # What TF 2.16's teardown reports (atomic_function.py, __del__).
      def __del__(self):
        None[0]
    AtomicFunction.__del__.__qualname__ = "AtomicFunction.__del__"
    keep = AtomicFunction()

    class Other:
      def __del__(self):
        None[0]
    Other()  # A real bug in a __del__: reported.
    subprocess.run([sys.executable, "-c", "import logging, tfx_parallel.components; "
                    "logging.getLogger('tensorflow').warning("
                    "'`a b` is not a valid node name. Accepted names conform to Regex')"
                    "; print('child done', flush=True)"])
    print("done", flush=True)
""")


def _run(mode):
  env = {k: v for k, v in os.environ.items() if k != quiet.QUIET_ENV}
  proc = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True,
                        text=True, timeout=120, env=env)
  assert proc.returncode == 0, proc.stderr
  return proc.stdout + proc.stderr


def test_quiet_keeps_a_users_pipeline_console_free_of_known_noise():
  """Issue 31, case 7 (and 5 in a child process)."""
  loud, calm = _run("loud"), _run("quiet")
  for noise in ("is not a valid node name", "property_predicate", "AtomicFunction.__del__"):
    assert noise in loud, noise  # The script really makes the noise...
    assert noise not in calm, noise  # ...and quiet() drops it, in the child too.
  for kept in ("a real warning", "Other.__del__", "child done", "done"):
    assert kept in loud and kept in calm, kept


def test_which_training_failures_are_resumable_is_decided_in_one_place():
  from tfx_parallel.components.common.config_util import ConfigError
  assert not failures.resumable(ConfigError("trainer.mesh", "x"))
  assert failures.resumable(MemoryError())
  said = str(failures.process_failed("trainer", failures.NOT_RESUMABLE_EXIT_CODE))
  assert "rerun" not in said.lower().replace("a rerun as is fails", "")
  assert "Rerun to resume" in str(failures.process_failed("worker 1", 1))


def test_the_launcher_names_a_not_resumable_exit_without_rerun():
  from tfx_parallel.components.distributed_trainer.run import launcher
  procs = [subprocess.Popen([sys.executable, "-c",
                             f"import sys; sys.exit({failures.NOT_RESUMABLE_EXIT_CODE})"])]
  try:
    launcher._wait_all(procs, ["trainer"])  # pylint: disable=protected-access
  except failures.NotResumableError as e:
    assert "Rerun to resume" not in str(e) and "Training process trainer" in str(e)
  else:
    raise AssertionError("no error")


_MESH_STEP = textwrap.dedent("""
    import numpy as np
    from tfx_parallel.components.common import tfenv
    tfenv.split_cpu(2)
    import tf_keras
    from tfx_parallel.components.distributed_trainer.engines import mesh_runtime
    def build():
      x = tf_keras.Input((4,), name="x")
      h = tf_keras.layers.Dense(8, activation="relu", name="hidden_1")(x)
      h = tf_keras.layers.Dense(4, activation="relu", name="hidden_2")(h)
      return tf_keras.Model({"x": x}, tf_keras.layers.Dense(1, name="head")(h))
    trainer = mesh_runtime.MeshTrainer(build, mesh_shape=(1, 2), rules=None,
                                       loss_fn=tf_keras.losses.MeanSquaredError(),
                                       optimizer="adam", learning_rate=0.01, global_batch=8)
    x = np.ones((2, 8, 4), np.float32)
    print("LOSSES", trainer.fetch([trainer.steps_async({"x": x}, x[..., :1])]))
""")


@pytest.mark.slow
def test_a_healthy_mesh_runs_grappler_shape_errors_reach_the_log_not_the_console():
  """A mesh run (1x2, Megatron pair, Adam) makes TensorFlow's C++ log 'Incompatible Matrix
  dimensions' at ERROR level (Grappler's cost estimate: quiet.NOISE says why it is
  harmless); through the console's filter none of those lines is left, the rest is."""
  import io  # pylint: disable=g-import-not-at-top
  env = {k: v for k, v in os.environ.items()
         if k not in (quiet.QUIET_ENV, quiet.STDERR_FILTERED_ENV, "TF_CPP_MIN_LOG_LEVEL")}
  proc = subprocess.run([sys.executable, "-c", _MESH_STEP], capture_output=True, env=env,
                        timeout=600, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert b"LOSSES" in proc.stdout
  raw = proc.stderr.decode()
  assert "] Incompatible Matrix dimensions" in raw  # What the filter has to route.
  console, log = io.BytesIO(), io.BytesIO()
  quiet.filter_lines(io.BytesIO(proc.stderr), console, log)
  assert "Incompatible Matrix" not in console.getvalue().decode()
  assert "Incompatible Matrix dimensions" in log.getvalue().decode()
