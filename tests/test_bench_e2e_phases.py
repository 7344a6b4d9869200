"""`benchmarks/bench_e2e.py`: the Trainer's phases from the run's own console lines.

The child's stdout capture (``_StampedStdout``) must see what a child PROCESS writes to
file descriptor 1, as the training process's ``[trainer]`` lines are, and pass it on;
``trainer_phases`` splits the Trainer execution at the first line of each marker.
"""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import bench_e2e  # noqa: E402


def test_lines_of_a_child_process_are_stamped_in_order_and_passed_on(capfd):
  stamped = bench_e2e._StampedStdout()  # pylint: disable=protected-access
  try:
    os.write(1, b"[trainer] from this process\n")  # Descriptor 1, as print in the child.
    subprocess.run([sys.executable, "-c", "print('[trainer] task from a child')"], check=True)
  finally:
    lines = stamped.close()
  assert [text for _, text in lines] == ["[trainer] from this process",
                                         "[trainer] task from a child"]
  assert lines[0][0] <= lines[1][0]
  assert "[trainer] task from a child" in capfd.readouterr().out  # Passed on.


def test_phases_end_at_their_marker_lines_and_add_up_to_the_execution():
  lines = [(101.0, "[trainer] task regression"), (102.5, "[trainer] model linear"),
           (103.0, "[trainer] length: 20 steps"), (104.0, "[trainer] input cache: memory"),
           (104.5, "[trainer] layout single"), (106.0, "[trainer] step 10/20 (50%)"),
           (107.0, "[trainer] step 20/20 (100%) loss 1"), (109.0, "[trainer] done: 20 steps")]
  run = {"executions": [("ExampleGen", 90.0, 99.0), ("Trainer", 100.0, 110.0)],
         "trainer_lines": lines}
  phases = bench_e2e.trainer_phases(run, 20)
  assert list(phases.values()) == [1.0, 1.5, 0.5, 1.0, 0.5, 1.5, 1.0, 2.0, 1.0]
  assert sum(phases.values()) == 10.0
  # A missing marker: that phase is 0 and its time falls into the next.
  phases = bench_e2e.trainer_phases(dict(run, trainer_lines=lines[:3] + lines[4:]), 20)
  assert phases["input cache load"] == 0.0
  assert phases["eval input, variable record"] == 1.5
