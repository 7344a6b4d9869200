"""The planner's whole-run figure against what a real training process holds, on CPU.

On logical CPU devices every device's memory is the host's, so the planner's figure for the
whole run is ``layout_search.run_bytes``: every device's state (step + one variable's block
in transit at a boundary) plus the host's copies at checkpoints and export. A real
training process (run/train.py: build, train with Adam, eval, checkpoint, export) is run
for ``single`` and ``mesh 1x2`` on the built-in mlp at two widths; its peak RSS (the
child's own ``ru_maxrss``, from ``os.wait4``) has a fixed part (Python, TensorFlow, traced
functions) that the difference between the two widths cancels. That difference is
compared with the planner's difference for the same models: the plan must cover it (up to
``NOISE``) and over-count it by at most ``SLACK``.

The widths are chosen so the state dominates: [640, 640] and [1600, 1600] hidden units
on 2 features (412,801 and 2,566,401 parameters: 8.2 MiB apart), with few rows and steps
so each run takes seconds. Measured on 2026-12-05 (2 cores, shared): single +32.2 MiB
against +41.1 MiB planned (the step: 4 copies of the parameters, + the largest kernel in
transit); mesh 1x2 +50.4 MiB against +57.5 MiB (a checkpoint: the devices' parameters and
slots, and the host's copy of both, + the variable being assembled).
"""
import json
import os
import subprocess
import sys

import pytest

import trainer_util as tu
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.plan import layout_choice, layout_search

pytestmark = pytest.mark.slow

WIDTHS = (640, 1600)
SLOTS = 2            # Adam: m and v per parameter.
# The plan covers the measured growth (up to NOISE over it) and over-counts it by at most
# SLACK: the planner is a bound, and counts one variable in transit that the runs mostly
# avoid (to_host fills a preallocated array).
NOISE, SLACK = 0.05, 0.25
# glibc malloc raises its mmap threshold after the first large free (up to 32 MiB), after
# which freed tensor buffers stay in the per-thread arenas and the RSS of each execution
# adds to the last: a fixed threshold (glibc's default, 128 KiB) returns every large
# buffer on free, so the peak RSS is the peak of live memory (mallopt(3) M_MMAP_THRESHOLD).
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _peak_rss_bytes(job: dict, tmp: str) -> int:
  """Runs run/train.py on ``job`` in a child; its own peak RSS (ru_maxrss is in KiB)."""
  os.makedirs(tmp, exist_ok=True)
  path = os.path.join(tmp, "job.json")
  with open(path, "w") as f:
    json.dump(job, f)
  with open(os.path.join(tmp, "out.txt"), "w") as out:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfx_parallel.components.distributed_trainer.run.train",
         "--job", path], stdout=out, stderr=subprocess.STDOUT,
        env=dict(os.environ, **MALLOC))
    _, status, usage = os.wait4(proc.pid, 0)
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode:
    with open(os.path.join(tmp, "out.txt")) as f:
      raise AssertionError(f.read()[-4000:])
  assert os.path.exists(os.path.join(job["model_dir"], "saved_model.pb"))  # Exported.
  return usage.ru_maxrss * 1024


def _planned(width: int, layout: str, model_axis: int) -> int:
  """The planner's whole-run figure for the mlp of ``width`` (its real VariableInfos)."""
  module = user_module.load(builtin="mlp")
  spec = ms.ModelSpec(
      features=(ms.FeatureSpec("x0", ms.FLOAT32), ms.FeatureSpec("x1", ms.FLOAT32)),
      label_key="y", task=ms.REGRESSION, num_classes=1,
      hparams={"hidden_units": [width, width]})
  variables = layout_choice.planner_variables(user_module.build(module, spec))(model_axis)
  assert variables is not None
  assert layout == ("mesh" if model_axis > 1 else "single")
  return layout_search.run_bytes(variables, 1, model_axis, SLOTS)


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("examples"))
  keys, _, rows = tu.write_examples(root, rows=64, eval_rows=16)
  return root, keys, rows


@pytest.mark.parametrize("layout, mesh", [("single", None), ("mesh", (1, 2))])
def test_planned_whole_run_bytes_match_the_measured_peak(examples, tmp_path, layout, mesh):
  root, keys, rows = examples
  measured, planned = {}, {}
  for width in WIDTHS:
    run = str(tmp_path / f"w{width}")
    config = dict(layout=layout, model="mlp", hparams={"hidden_units": [width, width]},
                  optimizer="adam", learning_rate=0.001, steps=4, batch_size=16, log_every=2,
                  checkpoint_every=2, epochs=1)
    if mesh:
      config["mesh"] = list(mesh)
    measured[width] = _peak_rss_bytes(tu.job_dict(run, root, keys, rows, **config), run)
    planned[width] = _planned(width, layout, mesh[1] if mesh else 1)
  grew = measured[WIDTHS[1]] - measured[WIDTHS[0]]
  plan = planned[WIDTHS[1]] - planned[WIDTHS[0]]
  print(f"{layout}: measured +{grew / 2**20:.1f} MiB, planned +{plan / 2**20:.1f} MiB")
  assert (1 - SLACK) * plan <= grew <= (1 + NOISE) * plan, (layout, grew, plan, measured,
                                                            planned)
