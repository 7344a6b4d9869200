"""The training process, started before it is needed.

A new training process spends its first seconds importing TensorFlow and tf_keras
(benchmarks/results/e2e_overhead.md). On a local run the pipeline process starts one
such process as soon as the config is valid; it imports them while the pipeline process
imports TFX and the ExampleGen runs, then waits for its command on stdin. The launcher
hands it the command it would have run (``python -m MODULE --job job.json``) and waits
for it like any child; the process runs the module with ``runpy``, as ``python -m`` does.

The early process is used only when it is the same as a new one: the same interpreter,
a ``-m`` command, and the environment the launcher would give a new process. Importing
TensorFlow sets a few variables (``TF2_BEHAVIOR``, ``KMP_INIT_AT_FORK``, ...), and the
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
variables that differed. A process not taken is stopped when the run ends
(:func:`held`), or when its parent exits (its stdin closes).

    python -m tfx_parallel.components.distributed_trainer.prestart   # the early process
"""
import contextlib
import importlib
import json
import os
import subprocess
import sys
from typing import BinaryIO, Dict, List, Mapping, Optional

from absl import logging

# Read only when an OpenMP runtime loads (none has in the early process): see above.
SET_BEFORE_COMMAND = ("KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")

# The early process of this pipeline process, the environment it started with, and the
# pipe on which it reports its environment after its imports.
_held: Optional[subprocess.Popen] = None
_held_env: Dict[str, str] = {}
_held_report: Optional[BinaryIO] = None


def start(environ: Optional[Mapping[str, str]] = None) -> bool:
  """Starts the early training process unless one is held; True if this call started it."""
  global _held, _held_env, _held_report
  if _held is not None:
    return False
  _held_env = dict(os.environ if environ is None else environ)
  read_end, write_end = os.pipe()
  try:
    _held = subprocess.Popen([sys.executable, "-m", __name__, str(write_end)],
                             stdin=subprocess.PIPE, env=_held_env, pass_fds=(write_end,))
  finally:
    os.close(write_end)
  _held_report = os.fdopen(read_end, "rb")
  logging.info("Started the training process early (pid %d): it imports TensorFlow "
               "while the pipeline starts", _held.pid)
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
  global _held, _held_report
  proc, report, _held, _held_report = _held, _held_report, None, None
  if proc is None:
    return None
  with report:
    text = report.read()  # Until the early process has imported TensorFlow.
  reason = ""
  if not text:
    reason = f"it exited with code {proc.wait()}"
  elif command[:2] != [sys.executable, "-m"]:
    reason = f"the command is not `{sys.executable} -m ...`: {command[:2]}"
  else:
    imported = json.loads(text)
    keys = unmatched_keys(_held_env, imported, environ)
    if keys:
      reason = f"the environment differs in {', '.join(keys)}"
    updates = {k: environ.get(k) for k in SET_BEFORE_COMMAND
               if imported.get(k) != environ.get(k)}
  if reason:
    logging.info("Not using the early training process (pid %d): %s; starting a new one",
                 proc.pid, reason)
    _stop(proc)
    return None
  proc.stdin.write((json.dumps({"argv": command[2:], "env": updates}) + "\n").encode())
  proc.stdin.close()
  logging.info("Training in the process started early (pid %d): %s", proc.pid,
               " ".join(command))
  return proc


def discard():
  """Stops the early process if it was not taken."""
  global _held, _held_report
  proc, report, _held, _held_report = _held, _held_report, None, None
  if proc is not None:
    report.close()
    _stop(proc)


def _stop(proc: subprocess.Popen):
  if proc.poll() is None:
    proc.kill()
  proc.wait()
  if proc.stdin is not None and not proc.stdin.closed:
    proc.stdin.close()


@contextlib.contextmanager
def held(wanted: bool = True):
  """Starts the early process on entry (if ``wanted`` and none is held) and stops it on
  exit if nobody took it. Nested uses share the outer one's process."""
  owner = wanted and start()
  try:
    yield
  finally:
    if owner:
      discard()


def main(argv: List[str]) -> int:
  """The early process: imports, reports its environment on the pipe whose fd is
  ``argv[0]``, then runs the one command it is sent (nothing if its stdin closes first)."""
  from tfx_parallel.pipeline import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()
  importlib.import_module("tensorflow")  # The seconds this process is started early for.
  importlib.import_module("tf_keras")
  with os.fdopen(int(argv[0]), "w") as report:
    report.write(json.dumps(dict(os.environ)))
  line = sys.stdin.readline()
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
  import runpy  # pylint: disable=g-import-not-at-top
  runpy.run_module(command[0], run_name="__main__", alter_sys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
