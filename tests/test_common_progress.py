"""ProgressReporter: one updating line on a terminal, a line every 10% otherwise."""
import io

import pytest

from tfx_parallel.components.common.progress import ProgressReporter


class FakeClock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def _run(total, is_tty, steps=None, initial=0, seconds_per_step=0.5):
  stream, clock = io.StringIO(), FakeClock()
  progress = ProgressReporter(total, "[trainer]", stream=stream, is_tty=is_tty,
                              initial=initial, clock=clock)
  for step in (steps if steps is not None else range(initial + 1, total + 1)):
    clock.now += seconds_per_step
    progress.update(step, loss=1.0 / step, examples_per_sec=12345.678)
  progress.close()
  return stream.getvalue()


def test_not_a_terminal_prints_a_line_at_every_tenth():
  lines = _run(620, is_tty=False).splitlines()
  steps = [int(line.split()[2].split("/")[0]) for line in lines]
  assert steps == [62, 124, 186, 248, 310, 372, 434, 496, 558, 620]
  assert all("\r" not in line for line in lines)
  assert lines[0] == ("[trainer] step 62/620 (10%) loss 0.01613 12,346 ex/s "
                      "elapsed 31 s ETA 4 min 39 s")
  assert lines[-1] == "[trainer] step 620/620 (100%) loss 0.001613 12,346 ex/s in 5 min 10 s"


def test_few_steps_print_each_step_at_most_once():
  lines = _run(3, is_tty=False).splitlines()
  assert [line.split()[2] for line in lines] == ["1/3", "2/3", "3/3"]


def test_sparse_updates_crossing_several_marks_print_once():
  # Updates every 25 steps of 100: crossing 20% and 30% at step 50 prints one line.
  lines = _run(100, is_tty=False, steps=[25, 50, 75, 100]).splitlines()
  assert [line.split()[2] for line in lines] == ["25/100", "50/100", "75/100", "100/100"]
  lines = _run(100, is_tty=False, steps=[5, 10, 15, 20]).splitlines()
  # Stopped early at step 20: the last update is printed by close().
  assert [line.split()[2] for line in lines] == ["10/100", "20/100"]
  lines = _run(100, is_tty=False, steps=[5, 10, 13]).splitlines()
  assert [line.split()[2] for line in lines] == ["10/100", "13/100"]


def test_resumed_run_counts_tenths_and_eta_from_its_first_step():
  lines = _run(200, is_tty=False, initial=100).splitlines()
  assert [line.split()[2] for line in lines][:2] == ["110/200", "120/200"]
  assert len(lines) == 10
  assert "(10%)" in lines[0] and lines[0].endswith("ETA 45 s")  # 90 steps x 0.5 s


def test_terminal_rewrites_one_line_and_ends_it_on_close():
  out = _run(50, is_tty=True)
  assert out.count("\r") == 50
  assert out.count("\n") == 1 and out.endswith("\n")
  last = out.rstrip("\n").split("\r")[-1]
  assert last.startswith("[trainer] ") and "100% step 50/50 loss 0.02 12,346 ex/s in 25 s" in last
  first = out.split("\r")[1]
  assert "  2% step 1/50" in first and first.rstrip().endswith("ETA 24 s")


def test_terminal_blanks_the_rest_of_a_longer_previous_line():
  stream = io.StringIO()
  progress = ProgressReporter(10, "[x]", stream=stream, is_tty=True, clock=FakeClock())
  progress.update(1, note="a-very-long-value-indeed")
  progress.update(2, note="b")
  frames = stream.getvalue().split("\r")[1:]
  assert len(frames[1]) == len(frames[0])  # padded with spaces over the old text
  assert frames[1].rstrip() == "[x] " + "\u2588" * 4 + "\u2591" * 16 + "  20% step 2/10 note b"


def test_message_keeps_the_bar_on_a_terminal():
  stream = io.StringIO()
  progress = ProgressReporter(4, "[t]", stream=stream, is_tty=True, clock=FakeClock())
  progress.update(1, loss=2.0)
  progress.message("[t] epoch 1 eval loss 1.5")
  out = stream.getvalue()
  assert "\n[t] epoch 1 eval loss 1.5\n" in out.replace("\r", "\n")
  assert out.endswith(out.split("\r")[1])  # the bar is drawn again after the message


def test_default_mode_follows_the_stream():
  class Tty(io.StringIO):
    def isatty(self):
      return True
  assert ProgressReporter(5, "x", stream=Tty()).is_tty is True
  assert ProgressReporter(5, "x", stream=io.StringIO()).is_tty is False


def test_non_finite_loss_is_printed_not_hidden():
  stream = io.StringIO()
  progress = ProgressReporter(2, "[t]", stream=stream, is_tty=False, clock=FakeClock())
  progress.update(1, loss=float("nan"))
  progress.close()
  assert "loss nan" in stream.getvalue()


def test_bad_arguments_and_update_after_close_are_errors():
  with pytest.raises(ValueError, match=r"total=5, initial=6"):
    ProgressReporter(5, "x", stream=io.StringIO(), initial=6)
  progress = ProgressReporter(5, "[x]", stream=io.StringIO(), is_tty=False)
  progress.close()
  with pytest.raises(ValueError, match=r"\[x\]: update\(step=1\) after close\(\)"):
    progress.update(1)
