"""docs/img/verdicts.png shows one real tfx-parallel run per convergence state, labelled
with the state: each run (its history and eval losses, kept in docs/img/verdict_runs.json)
got that state from the ConvergenceEvaluator when it ran and, judged now by the
evaluator's own code, must still get it; every picture on disk is what docs/figures.py
draws now. Redraw with docs/figures.py; rerun the runs with docs/figures.py runs DIR."""
import os

import pytest

from script_util import load_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
figures = load_script("docs/figures.py")


@pytest.mark.parametrize("state", sorted(figures.VERDICT_RUNS))
def test_the_run_pictured_for_each_state_is_judged_that_state(state):
  run, result = figures.judge(state)
  assert run["recorded_state"] == state, (run["recorded_state"], run["recorded_reason"])
  assert run["command"] == figures.verdict_command(state), run["command"]
  assert result.state == state, (result.state, result.reason)


def test_every_state_the_evaluator_names_is_pictured():
  from tfx_parallel.components.convergence_evaluator import properties as P  # pylint: disable=g-import-not-at-top
  judged = set(P.STATES) - {P.NO_HISTORY}  # Without a history there is no curve to draw.
  assert judged == set(figures.VERDICT_RUNS), (judged, set(figures.VERDICT_RUNS))
  for name in ("pipeline", "mesh", "splits", "verdicts"):
    assert os.path.exists(os.path.join(REPO, "docs", "img", name + ".png")), name


@pytest.mark.parametrize("name", sorted(figures.FIGURES))
def test_each_picture_on_disk_is_what_the_script_draws_now(tmp_path, name):
  """docs/img/<name>.png is byte for byte what docs/figures.py draws from today's code
  (matplotlib is pinned and writes no date into the PNG), so a changed run, label or rule
  cannot leave an old picture in the docs."""
  drawn = tmp_path / f"{name}.png"
  figures.FIGURES[name](str(drawn))
  on_disk = os.path.join(REPO, "docs", "img", f"{name}.png")
  with open(on_disk, "rb") as f:
    assert drawn.read_bytes() == f.read(), (
        f"docs/img/{name}.png is stale: run .venv/bin/python docs/figures.py {name}")
