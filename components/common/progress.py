"""A progress reporter for loops with a known number of steps (training, evaluation).

On a terminal it keeps one line up to date with ``"\\r"`` (like Keras ``fit`` or tqdm):

    [trainer] ███████░░░░░░░  52% step 322/620 loss 9.281e-05 9,656 ex/s ETA 4.8 s

Otherwise (CI logs, a pipe, a file) it writes a line each time another 10% of the steps
is done, and the last step, so a log holds about ten lines however long the loop:

    [trainer] step 62/620 (10%) loss 0.5623 10,602 ex/s elapsed 2.7 s ETA 25 s

Usage::

    progress = ProgressReporter(total=620, label="[trainer]")
    for step in range(1, 621):
      ...
      progress.update(step, loss=loss, examples_per_sec=eps)
    progress.close()

Metrics are printed in the order given, ``name value`` (4 significant digits); the
names ``examples_per_sec`` (printed "ex/s") and ``loss`` are the usual ones. Pure
Python; the clock can be replaced in tests.
"""
import sys
import time
from typing import Callable, Dict, Optional, TextIO

from tfx_parallel.components.common import readable

# Non-terminal output: one line per this fraction of the steps.
LINE_EVERY_FRACTION = 0.1
BAR_WIDTH = 20
# Special metric names: how they are printed.
_UNITS = {"examples_per_sec": "ex/s"}
_RATES = frozenset(_UNITS)


def _format_metrics(metrics: Dict[str, object]) -> str:
  parts = []
  for name, value in metrics.items():
    if name in _RATES:
      parts.append(f"{readable.rate(value)} {_UNITS[name]}")
    else:
      parts.append(f"{name} {readable.sig(value)}")
  return " ".join(parts)


class ProgressReporter:
  """Reports ``update(step, **metrics)`` calls for a loop of ``total`` steps.

  Args:
    total: the last step number (steps count from ``initial`` + 1 up to ``total``).
    label: printed at the start of every line, e.g. "[trainer]".
    stream: where to write (default: ``sys.stdout`` at construction).
    is_tty: True for the updating line, False for a line every 10%; default: whether
      ``stream`` is a terminal.
    initial: the step the loop starts after (a resumed run); ETA and the 10% marks
      count the steps still to do.
    clock: seconds, monotonic (tests pass a fake one).
  """

  def __init__(self, total: int, label: str, stream: Optional[TextIO] = None,
               is_tty: Optional[bool] = None, *, initial: int = 0,
               clock: Callable[[], float] = time.monotonic):
    if total < 0 or initial < 0 or initial > max(total, 0):
      raise ValueError(f"need 0 <= initial <= total. Received: total={total}, "
                       f"initial={initial}")
    self.total = int(total)
    self.label = label
    self.stream = stream if stream is not None else sys.stdout
    if is_tty is None:
      isatty = getattr(self.stream, "isatty", None)
      is_tty = bool(isatty and isatty())
    self.is_tty = is_tty
    self.initial = int(initial)
    self._clock = clock
    self._start = clock()
    self._next_mark = 1  # The next multiple of 10% (of the remaining steps) to print at.
    self._last_text: Optional[str] = None  # The last update's line, printed or not.
    self._last_printed = True
    self._width = 0  # Terminal: length of the line on screen, to blank what is left.
    self._closed = False

  # -- what to print --------------------------------------------------------------------

  def _eta(self, step: int, elapsed: float) -> Optional[float]:
    done = step - self.initial
    if done <= 0 or elapsed <= 0:
      return None
    return max(self.total - step, 0) * elapsed / done

  def _fraction(self, step: int) -> float:
    todo = self.total - self.initial
    return 1.0 if todo <= 0 else min(max((step - self.initial) / todo, 0.0), 1.0)

  def line(self, step: int, elapsed: float, metrics: Dict[str, object]) -> str:
    """The text for ``step`` (no newline, no "\\r")."""
    fraction = self._fraction(step)
    eta = self._eta(step, elapsed)
    tail = _format_metrics(metrics)
    if step >= self.total:
      timing = f"in {readable.seconds(elapsed)}"
    else:
      timing = f"ETA {readable.seconds(eta)}" if eta is not None else ""
    if self.is_tty:
      filled = int(round(fraction * BAR_WIDTH))
      bar = "\u2588" * filled + "\u2591" * (BAR_WIDTH - filled)
      parts = [self.label, bar, f"{fraction * 100:3.0f}%",
               f"step {step}/{self.total}", tail, timing]
    else:
      parts = [self.label, f"step {step}/{self.total}", f"({fraction * 100:.0f}%)", tail,
               f"elapsed {readable.seconds(elapsed)}" if step < self.total else "", timing]
    return " ".join(p for p in parts if p)

  # -- the API --------------------------------------------------------------------------

  def update(self, step: int, **metrics) -> None:
    """Records that ``step`` is done, with its metrics (e.g. loss, examples_per_sec)."""
    if self._closed:
      raise ValueError(f"{self.label}: update(step={step}) after close()")
    elapsed = self._clock() - self._start
    text = self.line(step, elapsed, metrics)
    self._last_text = text
    if self.is_tty:
      pad = max(self._width - len(text), 0)
      self.stream.write("\r" + text + " " * pad)
      self._width = len(text)
      self.stream.flush()
      self._last_printed = True
      return
    fraction = self._fraction(step)
    if step >= self.total or fraction + 1e-12 >= self._next_mark * LINE_EVERY_FRACTION:
      self.stream.write(text + "\n")
      self.stream.flush()
      self._last_printed = True
      while self._next_mark * LINE_EVERY_FRACTION <= fraction + 1e-12:
        self._next_mark += 1
    else:
      self._last_printed = False

  def message(self, text: str) -> None:
    """Prints a whole line (e.g. an epoch's eval loss) without breaking the bar."""
    if self.is_tty and self._width:
      self.stream.write("\r" + " " * self._width + "\r")
      self.stream.write(text + "\n")
      if self._last_text:
        self.stream.write(self._last_text)
    else:
      self.stream.write(text + "\n")
    self.stream.flush()

  def close(self) -> None:
    """Ends the output: the terminal line gets its newline; in line mode the last
    update is printed if it fell between two 10% marks (e.g. a run that stopped early).
    Idempotent."""
    if self._closed:
      return
    self._closed = True
    if self.is_tty:
      if self._width:
        self.stream.write("\n")
    elif not self._last_printed and self._last_text:
      self.stream.write(self._last_text + "\n")
    self.stream.flush()

  def __enter__(self) -> "ProgressReporter":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
