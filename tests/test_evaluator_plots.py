"""Loss plots: one legend entry per run, the curves' data, a wall-clock panel, and a PNG
that decodes to an image with the runs' colours."""
import io

import numpy as np
from matplotlib import colors
from matplotlib import image

from tfx_parallel.components.convergence_evaluator import plots

_DOC = {"target_loss": 0.1,
        "records": {"step": [10, 20, 30], "loss": [1.0, None, 0.05],
                    "wall_time": [0.5, 1.0, 1.5]},
        "epochs": [{"epoch": 1, "step": 30, "train_loss": 0.05, "eval_loss": 0.06}]}
_OTHER = {"records": {"step": [1, 2], "loss": [2.0, 0.5], "wall_time": [3.0, 6.0]}}


def _lines(ax):
  return [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()))
          for line in ax.get_lines()]


def test_one_legend_entry_per_run_and_the_curves_data():
  fig = plots.loss_figure([("p1 mesh 2x2", _DOC), ("p2 single", _OTHER)], title="T")
  (ax,) = fig.axes
  assert [t.get_text() for t in ax.get_legend().get_texts()] == ["p1 mesh 2x2", "p2 single"]
  lines = _lines(ax)
  assert lines[0] == ("p1 mesh 2x2", [10, 30], [1.0, 0.05])  # the null loss is a gap
  data = [(x, y) for _, x, y in lines]
  assert ([20, 20], [0, 1]) in data  # the first null (NaN/inf) loss: a vertical line
  assert ([30], [0.06]) in data  # eval loss at the epoch's step
  assert ([0, 1], [0.1, 0.1]) in data  # the target: a horizontal line
  assert ("p2 single", [1, 2], [2.0, 0.5]) in lines
  assert len(lines) == 5
  assert ax.get_yscale() == "log" and ax.get_xlabel() == "step"
  assert fig._suptitle.get_text() == "T"  # pylint: disable=protected-access


def test_wall_clock_panel_plots_loss_against_seconds():
  fig = plots.loss_figure([("a", _DOC), ("b", _OTHER)], wall_clock=True)
  steps_ax, seconds_ax = fig.axes
  assert seconds_ax.get_xlabel().startswith("wall-clock seconds")
  assert seconds_ax.get_legend() is None  # the legend is drawn once
  data = [(x, y) for _, x, y in _lines(seconds_ax)]
  assert data[0] == ([0.5, 1.5], [1.0, 0.05])
  assert ([3.0, 6.0], [2.0, 0.5]) in data
  assert ([1.5], [0.06]) in data  # the epoch's eval loss at the wall time of its step
  assert ([1.0, 1.0], [0, 1]) in data  # the first NaN/inf loss, at its wall time
  # An epoch that ends between two records: its wall time is interpolated.
  doc = dict(_DOC, epochs=[{"epoch": 1, "step": 25, "eval_loss": 0.3}])
  (_, seconds_ax) = plots.loss_figure([("a", doc)], wall_clock=True).axes
  assert ([1.25], [0.3]) in [(x, y) for _, x, y in _lines(seconds_ax)]


def test_png_decodes_and_shows_each_runs_colour():
  png = plots.loss_plot_png([("a", _DOC), ("b", _OTHER)])
  assert png.startswith(b"\x89PNG\r\n\x1a\n")
  pixels = image.imread(io.BytesIO(png))[..., :3]
  height, width = pixels.shape[:2]
  assert 400 < width < 1000 and 300 < height < 700, (width, height)
  for colour in ("C0", "C1"):
    rgb = np.array(colors.to_rgb(colour))
    assert (np.abs(pixels - rgb).sum(axis=-1) < 0.05).sum() > 50, colour
  empty = image.imread(io.BytesIO(plots.loss_plot_png([])))[..., :3]
  assert (np.abs(empty - np.array(colors.to_rgb("C0"))).sum(axis=-1) < 0.05).sum() == 0
