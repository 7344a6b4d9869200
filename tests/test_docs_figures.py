"""docs/img/verdicts.png shows one real run per convergence state, labelled with the
state: each run, judged now by the evaluator's own code, must still get that state
(docs/figures.py; numpy only, a second or two). Redraw with docs/figures.py."""
import importlib.util
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("figures", os.path.join(REPO, "docs", "figures.py"))
figures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(figures)


@pytest.mark.parametrize("state", sorted(figures.VERDICT_RUNS))
def test_the_run_pictured_for_each_state_is_judged_that_state(state):
  _, result = figures.judge(state)
  assert result.state == state, (result.state, result.reason)


def test_every_state_the_evaluator_names_is_pictured():
  from tfx_parallel.components.convergence_evaluator import properties as P  # pylint: disable=g-import-not-at-top
  judged = set(P.STATES) - {P.NO_HISTORY}  # Without a history there is no curve to draw.
  assert judged == set(figures.VERDICT_RUNS), (judged, set(figures.VERDICT_RUNS))
  for name in ("pipeline", "mesh", "splits", "verdicts"):
    assert os.path.exists(os.path.join(REPO, "docs", "img", name + ".png")), name
