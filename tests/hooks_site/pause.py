"""A checkpoint that pauses between its files and its commit, so that a test can
SIGKILL the training process mid-write (tests/test_trainer_resume_layouts.py). Test code
only: production code has no such hook (issue #39 item 9).

``TFXP_TEST_PAUSE_BEFORE_COMMIT=<step>``: ``checkpoint.save`` of that step writes its
files (``tf.train.Checkpoint.write`` and the ``.json`` meta), then, where it would write
the ``checkpoint`` state file that commits it (run/checkpoint.py, ``_write_atomic`` of
``_STATE``), this process prints a line and sleeps instead.
"""
import os
import re
import time

from tfx_parallel.components.distributed_trainer.run import checkpoint

PAUSE_ENV = "TFXP_TEST_PAUSE_BEFORE_COMMIT"
SITE = os.path.dirname(os.path.abspath(__file__))
PAUSE_SECONDS = 600  # Longer than any test waits for its SIGKILL.


def install(setattr_=setattr, environ=None) -> None:
  """Patches ``checkpoint._write_atomic`` to pause before the commit of the step."""
  environ = os.environ if environ is None else environ
  step = int(environ[PAUSE_ENV])
  real = checkpoint._write_atomic  # pylint: disable=protected-access

  def write_atomic(path, text):
    latest = re.search(r'^model_checkpoint_path: "[^"]*-(\d+)"$', text, re.M)
    if os.path.basename(path) == checkpoint._STATE and latest and int(latest.group(1)) == step:  # pylint: disable=protected-access
      print(f"[trainer] checkpoint: step {step} written, pausing before its commit "
            f"({PAUSE_ENV})", flush=True)
      time.sleep(PAUSE_SECONDS)
    return real(path, text)

  setattr_(checkpoint, "_write_atomic", write_atomic)


def env(step: int, environ=None) -> dict:
  """The environment for a child process whose checkpoint of ``step`` pauses."""
  environ = os.environ if environ is None else environ
  path = os.pathsep.join(p for p in (SITE, environ.get("PYTHONPATH", "")) if p)
  return {PAUSE_ENV: str(step), "PYTHONPATH": path}
