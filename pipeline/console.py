"""The console of `tfx-parallel run`: the project's own lines, real warnings and errors.

Everything the run prints also goes to a log file, ``<home>/logs/<pipeline>-<time>.log``.
By default (``verbose=False``) the console drops only *known* noise, listed in
:data:`NOISE` with the reason each line is harmless, and absl / TFX INFO logs:

* Python logging: the root logger writes INFO and up to the log file and WARNING and up
  to stderr, minus :data:`NOISE`; Python warnings are routed into logging
  (``logging.captureWarnings``), so a third-party ``FutureWarning`` lands in the file.
* Everything else written to file descriptor 2 -- TensorFlow's C++ logs, and the
  trainer's child processes, which inherit it -- passes through a small filter process
  (:func:`filter_lines`): every line is appended to the log file, and every line that is
  not known noise is copied to the real stderr. An unknown line always reaches the
  console, and the filter is a separate process, so a crash of the run (even a
  segfault) cannot lose the lines it had not printed yet.

``verbose=True`` keeps the log file but filters nothing: INFO logs, warnings and the
C++ logs (``TF_CPP_MIN_LOG_LEVEL=0`` unless the user set it) reach the console.
"""
import datetime
import logging
import os
import signal
import subprocess
import sys
from typing import Callable, List, Optional

from tfx_parallel.components.common import quiet
from tfx_parallel.components.common import tfenv

LOG_DIR = "logs"

# The known noise and the line filter are quiet.py's, shared with tfxp.quiet() (a
# pipeline of the user's own) and `tfx-parallel compile`.
NOISE = quiet.NOISE
is_noise = quiet.is_noise
LineFilter = quiet.LineFilter
filter_lines = quiet.filter_lines


def _filter_main(argv: List[str]) -> int:
  """``python -m tfx_parallel.pipeline.console LOG``: filters stdin to stdout."""
  # Ctrl-C reaches the whole process group: the run handles it and its last words
  # (a traceback) must still get through, so the filter only ends at end of input.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  with open(argv[0], "ab") as log:
    filter_lines(sys.stdin.buffer, sys.stdout.buffer, log)
  return 0


class NoiseLogFilter(logging.Filter):
  """Drops log records (and captured warnings) whose first line is known noise, and
  Beam's logged copy of an exception it raises next (quiet.is_reraised)."""

  def filter(self, record: logging.LogRecord) -> bool:
    if quiet.is_reraised(record):  # Beam's copy of the error the CLI prints as one line.
      return False
    try:
      first = record.getMessage().split("\n", 1)[0]
    except Exception:  # pylint: disable=broad-except  # a bad format: let it through.
      return True
    return not is_noise(first)


class FileOnly(logging.Filter):
  """Drops records logged with ``extra={"file_only": True}`` (e.g. a traceback that the
  console shows as one line)."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not getattr(record, "file_only", False)


# The streams a logging handler writes to the console with.
_CONSOLE_STREAMS = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)


class _RewritingFormatter(logging.Formatter):
  """A Formatter whose text goes through ``console.rewrite`` when it is set."""

  def __init__(self, fmt: str, console: "Console"):
    super().__init__(fmt)
    self._console = console

  def format(self, record: logging.LogRecord) -> str:
    text = super().format(record)
    rewrite = self._console.rewrite
    return rewrite(text) if rewrite is not None else text


def log_path_for(home: str, pipeline_name: str,
                 now: Optional[datetime.datetime] = None) -> str:
  now = now or datetime.datetime.now()
  stamp = now.strftime("%Y%m%d-%H%M%S")
  return os.path.join(os.path.abspath(home), LOG_DIR, f"{pipeline_name}-{stamp}.log")


class Console:
  """The console and log-file set-up of one run; :meth:`close` undoes it.

  Use as a context manager. ``log_path`` is where everything goes.
  """

  def __init__(self, home: str, pipeline_name: str, verbose: bool = False):
    self.verbose = verbose
    # Applied to each console log line: the command names settings in its own form
    # (the CLI sets it: settings.Form.message); the log file keeps the original.
    self.rewrite: Optional[Callable[[str], str]] = None
    self.log_path = log_path_for(home, pipeline_name)
    os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
    self._handlers: List[logging.Handler] = []
    self._displaced: List[logging.Handler] = []
    self._root_level = logging.getLogger().level
    self._filter: Optional[subprocess.Popen] = None
    self._saved_stderr: Optional[int] = None
    if verbose and "TF_CPP_MIN_LOG_LEVEL" in tfenv.defaulted():
      os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    if not verbose:
      self._start_filter()
    self._start_logging()

  # -- set-up ---------------------------------------------------------------------------

  def _start_filter(self):
    sys.stderr.flush()
    os.environ[quiet.STDERR_FILTERED_ENV] = "1"  # The processes it starts are filtered too.
    read_end, write_end = os.pipe()
    self._saved_stderr = os.dup(2)
    self._filter = subprocess.Popen(
        [sys.executable, "-m", "tfx_parallel.pipeline.console", self.log_path],
        stdin=read_end, stdout=self._saved_stderr, stderr=self._saved_stderr,
        close_fds=True)
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)

  def _start_logging(self):
    root = logging.getLogger()
    file_handler = logging.FileHandler(self.log_path, encoding="utf-8")
    file_handler.setLevel(logging.INFO)
    file_handler.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s %(filename)s:%(lineno)d] %(message)s"))
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.INFO if self.verbose else logging.WARNING)
    console.setFormatter(_RewritingFormatter("%(levelname)s:%(name)s:%(message)s", self))
    console.addFilter(FileOnly())
    if not self.verbose:
      console.addFilter(NoiseLogFilter())
    # A console handler already on the root logger (logging.basicConfig, called by some
    # library in a user's script) would print every INFO record: set aside until close.
    self._displaced = [h for h in root.handlers if type(h) is logging.StreamHandler  # pylint: disable=unidiomatic-typecheck
                       and getattr(h, "stream", None) in _CONSOLE_STREAMS]
    for handler in self._displaced:
      root.removeHandler(handler)
    for handler in (file_handler, console):
      root.addHandler(handler)
      self._handlers.append(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
    absl_logging.set_verbosity(absl_logging.INFO)

  # -- tear-down ------------------------------------------------------------------------

  def close(self):
    """Flushes and removes the handlers, restores stderr and waits for the filter."""
    root = logging.getLogger()
    for handler in self._handlers:
      handler.flush()
      root.removeHandler(handler)
      handler.close()
    self._handlers = []
    for handler in self._displaced:
      root.addHandler(handler)
    self._displaced = []
    root.setLevel(self._root_level)
    logging.captureWarnings(False)
    if self._filter is not None:
      sys.stderr.flush()
      os.dup2(self._saved_stderr, 2)  # Closes our write end of the pipe.
      os.close(self._saved_stderr)
      self._saved_stderr = None
      try:
        self._filter.wait(timeout=30)
      except subprocess.TimeoutExpired:  # A child process still holds the pipe open.
        self._filter.kill()
      self._filter = None

  def __enter__(self) -> "Console":
    return self

  def __exit__(self, *exc):
    self.close()


if __name__ == "__main__":
  sys.exit(_filter_main(sys.argv[1:]))
