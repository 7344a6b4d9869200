"""The planner's whole-run figure against the memory a real training process holds, on CPU,
measured where the plan claims it.

On logical CPU devices every device's memory is the host's. The planner claims two
figures there (plan/layout_search.py): the step (``state_bytes_per_device`` on every
device: parameters, gradients, optimizer slots and the largest variable's blocks in
transit) and a boundary (``boundary_bytes``: every device's parameters and slots, on a
mesh the step's whole figure, which its export does not reuse, plus the host's figure,
the export's plain model and the largest variable in transit); the
run's figure, ``run_bytes``, is the larger.

A real training process (run/train.py: build, eval, train with Adam, checkpoint, export)
logs its resident memory at each of those boundaries (tests/hooks_site/rss.py, a
test-only hook: the peak RSS of each phase, reset at each boundary through
/proc/self/clear_refs). The growth of a phase is its peak over the RSS before the build.
Part of it does not depend on the model (traced functions, datasets, the SavedModel's
graph): running the built-in mlp at two widths and taking the difference cancels it,
leaving the growth attributable to the model's state, which is compared with the
planner's difference for the same two models: the train phase (outside its checkpoints
and evaluations) with the step, the evaluations, checkpoints and export with the
boundary, and the larger of the two with the run's figure.

glibc malloc raises its mmap threshold after the first large free (up to 32 MiB), after
which freed tensor buffers stay in the per-thread arenas and the RSS of each execution
adds to the last (measured: the train phase's peak of the wide model grew by 2x the
state): a fixed threshold (glibc's default, 128 KiB; mallopt(3) M_MMAP_THRESHOLD)
returns every large buffer on free, so the RSS follows the live memory.
"""
import json
import os

import pytest

import trainer_util as tu
from hooks_site import rss
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.plan import layout_choice, layout_search

# [64, 64] and [2048, 2048] hidden units on 2 features: 4,481 and 4,204,545 parameters
# (16.0 MiB apart; the 2048 x 2048 kernel is 16 MiB).
WIDTHS = (64, 2048)
SLOTS = 2  # Adam: m and v per parameter.
# The measured growth against the planned: the plan counts two blocks of the largest
# variable in transit in the step, and one at the export, where a run held 1.0-1.6 in
# the step (measured in three runs from a clean clone of 064d7ea on 2026-12-07, oneDNN
# off as below: single step 0.83-0.94, boundary 0.88; mesh 1x2 step 0.81, boundary
# 0.77-0.78; row-split mesh 1x4 step 0.68-0.72, boundary 0.71-0.75); a plan off by 2x
# either way (0.34-0.47, 1.6-1.9) falls outside.
LOW, HIGH = 0.6, 1.3
# The child's environment: glibc's fixed mmap threshold (below), and TensorFlow's oneDNN
# CPU kernels off. TF 2.16 turns them on by itself on some x86 CPUs (the log's
# "tensorflow/core/util/port.cc:113] oneDNN custom operations are on"), and their
# buffers are not the model state the plan counts: on an AMD EPYC with AVX-512
# (2026-12-07, three runs from a clean clone of 55fee58) single measured step 1.04-1.21
# and boundary 1.25-1.45 of the plan (the boundary's bound failed 2 of 3), against 0.94
# and 0.88 with them off in the same clone. A GPU, the plan's target, runs other kernels.
CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "TF_ENABLE_ONEDNN_OPTS": "0"}
BOUNDARIES = ("eval", "checkpoint", "export")


# A wide row-split kernel whose input the mesh keeps whole (hidden_1 is replicated, so no
# Megatron hand-off). Returned from a function as the tape gives it, its gradient is
# whole on every device (tests/test_trainer_linear_mesh.py); the plan counts it at shard
# size, as a run holds it inside the step, where the relayout follows (measured on
# 2026-12-06: +84 MiB in the train phase on mesh 1x4, planned 96 MiB; counted whole the
# plan said 151 MiB, 0.55, outside the bounds).
ROW_SPLIT_MODULE = """
import tf_keras
from tfx_parallel.components.distributed_trainer import models


def build_model(spec):
  inputs = models.inputs(spec)
  width = int(spec.hparams["hidden_units"][0])
  h = models.numeric_block(spec, inputs)
  h = tf_keras.layers.Dense(width, activation="relu", name="hidden_1")(h)
  h = tf_keras.layers.Dense(width, activation="relu", name="hidden_2")(h)
  return tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="output")(h))


def layout_rules(spec):
  return {"hidden_2/kernel": ("model", None)}
"""


def _phases(job: dict, tmp: str) -> list:
  """Runs run/train.py on ``job`` in a child with the rss hook; its phase records."""
  log = os.path.join(tmp, "rss.jsonl")
  tu.run_job(job, tmp, env=dict(CHILD_ENV, **rss.env(log)))
  assert os.path.exists(os.path.join(job["model_dir"], "saved_model.pb"))  # Exported.
  with open(log) as f:
    return [json.loads(line) for line in f]


def _growth(phases: list) -> dict:
  """Bytes over the RSS before the build: the train phase outside its nested phases, and
  the boundaries' largest."""
  [build] = [p for p in phases if p["phase"] == "build"]
  [train] = [p for p in phases if p["phase"] == "train"]
  assert {p["phase"] for p in phases} == {"build", "train", *BOUNDARIES}, phases
  base = build["rss_before"]
  return {"step": train["own_peak"] - base,
          "boundary": max(p["peak"] for p in phases if p["phase"] in BOUNDARIES) - base}


def _planned(width: int, mesh, module_file=None) -> dict:
  """The planner's figures for the mlp of ``width`` (or the module file's model with its
  layout rules), from its real VariableInfos."""
  module = user_module.load(module_file, None, "mlp")
  spec = ms.ModelSpec(
      features=(ms.FeatureSpec("x0", ms.FLOAT32), ms.FeatureSpec("x1", ms.FLOAT32)),
      label_key="y", task=ms.REGRESSION, num_classes=1,
      hparams={"hidden_units": [width, width]})
  b, m = mesh
  rules = (lambda _: module.layout_rules(spec)) if module.layout_rules else None
  variables = layout_choice.planner_variables(user_module.probe(module, spec), rules)(m)
  return {"step": b * m * layout_search.state_bytes_per_device(variables, m, SLOTS),
          "boundary": layout_search.boundary_bytes(variables, b, m, SLOTS),
          "run": layout_search.run_bytes(variables, b, m, SLOTS)}


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("examples"))
  keys, _, rows = tu.write_examples(root, rows=64, eval_rows=16)
  return root, keys, rows


def test_the_rss_hook_records_each_phase_peak_with_its_nested_phases_apart(tmp_path):
  log = str(tmp_path / "rss.jsonl")
  rec = rss.Recorder(log)
  mib = 1 << 20
  rec.enter("train")
  held = b"\x01" * (48 * mib)  # Written, so resident; returned to the system on del.
  del held
  rec.enter("checkpoint")
  held = b"\x01" * (96 * mib)
  del held
  rec.exit("checkpoint")
  rec.exit("train")
  with open(log) as f:
    checkpoint, train = [json.loads(line) for line in f]
  assert (checkpoint["phase"], train["phase"]) == ("checkpoint", "train")
  assert checkpoint["peak"] - checkpoint["rss_before"] >= 90 * mib
  assert train["peak"] >= checkpoint["peak"]  # Its nested phase counts in its peak,
  assert 44 * mib <= train["own_peak"] - train["rss_before"] < 90 * mib  # not its own.
  with pytest.raises(RuntimeError, match="rss hook: phase eval ended inside train"):
    rec.enter("train")
    rec.exit("eval")


@pytest.mark.slow
@pytest.mark.parametrize("layout, mesh, row_split", [
    ("single", (1, 1), False), ("mesh", (1, 2), False), ("mesh", (1, 4), True)],
    ids=["single", "mesh1x2", "mesh1x4-row-split"])
def test_planned_figures_match_the_memory_measured_where_they_are_claimed(
    examples, tmp_path, layout, mesh, row_split):
  root, keys, rows = examples
  module_file = None
  if row_split:
    module_file = str(tmp_path / "row_split.py")
    with open(module_file, "w") as f:
      f.write(ROW_SPLIT_MODULE)
  measured, planned = {}, {}
  for width in WIDTHS:
    run = str(tmp_path / f"w{width}")
    config = dict(layout=layout, model="mlp", hparams={"hidden_units": [width, width]},
                  optimizer="adam", learning_rate=0.001, steps=4, batch_size=16, log_every=2,
                  checkpoint_every=2, epochs=1)
    if layout == "mesh":
      config["mesh"] = list(mesh)
    if module_file:
      config["module_file"] = module_file
      del config["model"]
    measured[width] = _growth(_phases(tu.job_dict(run, root, keys, rows, **config), run))
    planned[width] = _planned(width, mesh, module_file)
  grown = {f: measured[WIDTHS[1]][f] - measured[WIDTHS[0]][f] for f in ("step", "boundary")}
  grown["run"] = max(grown.values())  # The run's peak is the larger, as the plan's.
  for figure, grew in grown.items():
    plan = planned[WIDTHS[1]][figure] - planned[WIDTHS[0]][figure]
    print(f"{layout} {figure}: measured +{grew / 2**20:.1f} MiB, planned "
          f"+{plan / 2**20:.1f} MiB ({grew / plan:.2f})")
    assert LOW * plan <= grew <= HIGH * plan, (layout, figure, grew, plan, measured, planned)
