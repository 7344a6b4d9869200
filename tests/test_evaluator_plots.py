"""Loss plots render to PNG bytes, including gaps and several runs."""
import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
from tfx_parallel.components.convergence_evaluator import plots

_DOC = {"target_loss": 0.1, "records": {"step": [10, 20, 30], "loss": [1.0, None, 0.05]},
        "epochs": [{"epoch": 1, "step": 30, "train_loss": 0.05, "eval_loss": 0.06}]}


def test_png_of_one_and_several_runs():
  for runs in ([("a", _DOC)], [("a", _DOC), ("b", {"records": {"step": [1], "loss": [0.0]}})],
               []):
    png = plots.loss_plot_png(runs)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
