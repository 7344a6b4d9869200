"""The training process, started before it is needed.

A new training process spends its first seconds importing TensorFlow, tf_keras and
matplotlib (benchmarks/results/e2e_overhead.md). On a local run the pipeline process
starts one such process as soon as the config is valid; it imports them while the
pipeline process checks the inputs, imports TFX and runs the ExampleGen, then waits for
its command. The launcher hands it the command it would have run (``python -m MODULE
--job job.json``) and waits for it like any child; the process runs the module with
``runpy``, as ``python -m`` does.

The early process is used only when it is the same as a new one: the same interpreter,
a ``-m`` command, and the environment the launcher would give a new process. Importing
TensorFlow sets a few variables (``TF2_BEHAVIOR``, ``TPU_ML_PLATFORM``), and the
pipeline process has imported it too; so the early process reports its environment
after its imports, and every variable where the launcher's environment differs from
the one the early process started with must have reached the launcher's value there.
Two variables are exempt: ``KMP_DUPLICATE_LIB_OK`` and ``KMP_INIT_AT_FORK`` are read
only by an Intel/LLVM OpenMP runtime when it loads, and the early process's imports load
none (tests/test_pipeline_prestart.py checks /proc/self/maps); scikit-learn, joblib and
threadpoolctl set them on import in the pipeline process (``os.environ.setdefault`` in
sklearn/__init__.py:53-57, joblib/__init__.py:163, threadpoolctl.py:83). The early
process takes the launcher's values for them before it runs the command.
Otherwise (say a variable TensorFlow reads at import changed) the early process is
stopped and the launcher starts a new process as before, with one log line naming the
variables that differed. The working directory must match too. The early process
keeps the pipeline process's stdin, stdout and stderr, as a new process would; its
command and its report travel on two pipes of their own. A process not taken is stopped
when the run ends (:func:`held`), or when its parent exits (its command pipe closes).

    python -m tfx_parallel.components.distributed_trainer.run.prestart REPORT_FD COMMAND_FD
"""
import contextlib
import dataclasses
import importlib
import json
import os
import subprocess
import sys
from typing import BinaryIO, Dict, List, Mapping, Optional

from absl import logging

# What every training process imports (run/train.py: the loss plot uses a matplotlib
# Figure, no pyplot): about 4 s on an idle core of this machine, 18 s at load 10.
PRELOAD = ("tensorflow", "tf_keras", "matplotlib.figure")

# Read only when an OpenMP runtime loads (none has in the early process): see above.
SET_BEFORE_COMMAND = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")


@dataclasses.dataclass
class _Early:
  """The early process, what it started with, and its two pipes."""
  proc: subprocess.Popen
  env: Dict[str, str]
  cwd: str
  report: BinaryIO   # Its environment after its imports (JSON), then EOF.
  command: BinaryIO  # Its one command (JSON line); closing it unsent makes it exit.

  def stop(self):
    for pipe in (self.report, self.command):
      if not pipe.closed:
        pipe.close()
    if self.proc.poll() is None:
      self.proc.kill()
    self.proc.wait()


_held: Optional[_Early] = None  # This pipeline process's early process, if any.


def start(environ: Optional[Mapping[str, str]] = None) -> bool:
  """Starts the early training process unless one is held; True if this call started it."""
  global _held
  if _held is not None:
    return False
  env = dict(os.environ if environ is None else environ)
  report_read, report_write = os.pipe()
  command_read, command_write = os.pipe()
  try:
    proc = subprocess.Popen(
        [sys.executable, "-m", __name__, str(report_write), str(command_read)], env=env,
        pass_fds=(report_write, command_read))
  except BaseException:
    for fd in (report_read, command_write):
      os.close(fd)
    raise
  finally:
    for fd in (report_write, command_read):
      os.close(fd)
  _held = _Early(proc, env, os.getcwd(), os.fdopen(report_read, "rb"),
                 os.fdopen(command_write, "wb"))
  logging.info("Started the training process early (pid %d): it imports TensorFlow "
               "while the pipeline starts", proc.pid)
  return True


def unmatched_keys(started: Mapping[str, str], imported: Mapping[str, str],
                   wanted: Mapping[str, str]) -> List[str]:
  """The variables that make the early process differ from a new one: those where
  ``wanted`` (the launcher's environment) differs from ``started`` (the early process's
  at its start) and ``imported`` (the early process's after its imports) did not reach
  the wanted value either."""
  return sorted(k for k in set(started) | set(wanted)
                if started.get(k) != wanted.get(k) and imported.get(k) != wanted.get(k)
                and k not in SET_BEFORE_COMMAND)


def take(command: List[str], environ: Mapping[str, str]) -> Optional[subprocess.Popen]:
  """The early process, now running ``command``, if it can stand in for
  ``subprocess.Popen(command, env=environ)``; else None (and the early process is stopped).
  Waits for the early process to finish its imports."""
  global _held
  early, _held = _held, None
  if early is None:
    return None
  text = early.report.read()  # Until the early process has imported TensorFlow.
  early.report.close()
  imported = json.loads(text) if text else {}
  reason = ""
  if not text:
    reason = f"it exited with code {early.proc.wait()}"
  elif command[:2] != [sys.executable, "-m"]:
    reason = f"the command is not `{sys.executable} -m ...`: {command[:2]}"
  elif os.getcwd() != early.cwd:
    reason = f"the working directory changed from {early.cwd}"
  else:
    keys = unmatched_keys(early.env, imported, environ)
    if keys:
      reason = f"the environment differs in {', '.join(keys)}"
  if reason:
    logging.info("Not using the early training process (pid %d): %s; starting a new one",
                 early.proc.pid, reason)
    early.stop()
    return None
  updates = {k: environ.get(k) for k in SET_BEFORE_COMMAND if imported.get(k) != environ.get(k)}
  with early.command:
    early.command.write((json.dumps({"argv": command[2:], "env": updates}) + "\n").encode())
  logging.info("Training in the process started early (pid %d): %s", early.proc.pid,
               " ".join(command))
  return early.proc


def discard():
  """Stops the early process if it was not taken."""
  global _held
  early, _held = _held, None
  if early is not None:
    early.stop()


@contextlib.contextmanager
def held(wanted: bool = True):
  """Starts the early process on entry (if ``wanted`` and none is held) and stops it on
  exit if nobody took it. Nested uses share the outer one's process."""
  try:
    owner = wanted and start()
  except OSError as e:  # No process to spare: the launcher starts one when it is needed.
    logging.warning("Could not start the training process early: %s", e)
    owner = False
  try:
    yield
  finally:
    if owner:
      discard()


def main(argv: List[str]) -> int:
  """The early process: imports, reports its environment on the pipe whose fd is
  ``argv[0]``, then runs the one command read from the pipe ``argv[1]`` (nothing if that
  pipe closes first)."""
  # Start-up: the waiting process loads nothing it may not need before the command comes.
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()
  for module in PRELOAD:  # The seconds this process is started early for.
    importlib.import_module(module)
  with os.fdopen(int(argv[0]), "w") as report:
    report.write(json.dumps(dict(os.environ)))
  with os.fdopen(int(argv[1]), "r") as pipe:
    line = pipe.readline()
  if not line:
    return 0
  sent = json.loads(line)
  for key, value in sent["env"].items():  # SET_BEFORE_COMMAND: None means unset.
    if value is None:
      os.environ.pop(key, None)
    else:
      os.environ[key] = value
  command = sent["argv"]
  sys.argv = list(command)
  # Start-up: only once a command came.
  import runpy  # pylint: disable=g-import-not-at-top
  runpy.run_module(command[0], run_name="__main__", alter_sys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
