"""A user's loss, optimizer (schedules included) and layout rules are honoured on every
layout: single, mirrored x2 and meshes 1x1, 1x2, 2x1, 2x2 end within 1e-5 of the
single-device fit (tests/hook_cases.py: one process for the fit layouts, one for the
meshes), and record the exact loss of every step. An optimizer the mesh cannot place
fails before training, naming the hook."""
import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import hook_cases as cases

_CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook_cases.py")
MESHES = [f"mesh {b}x{m}" for b, m in cases.MESHES]


@functools.lru_cache(maxsize=None)
def _run(which: str) -> dict:
  proc = subprocess.run([sys.executable, _CASES, which], capture_output=True, text=True,
                        timeout=900, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return json.loads(proc.stdout.split("RESULT", 1)[1])


def _results() -> dict:
  fit, mesh = _run("fit"), _run("mesh")
  return {hook: dict(fit[hook], **mesh[hook]) for hook in cases.HOOKS + cases.REFUSED}


@pytest.mark.slow
@pytest.mark.parametrize("hook", cases.HOOKS)
def test_every_layout_ends_within_1e5_of_the_single_device_fit(hook):
  runs = _results()[hook]
  assert set(runs) == {"single", "mirrored x2", *MESHES}
  ref = runs["single"]
  for layout, got in runs.items():
    assert "error" not in got, (layout, got)
    assert got["iterations"] == cases.STEPS, layout
    assert (got["loss"], got["learning_rate"]) == (ref["loss"], ref["learning_rate"]), layout
    for i, (a, b) in enumerate(zip(got["weights"], ref["weights"])):
      np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5, atol=1e-5,
                                 err_msg=f"{hook} {layout} weight {i}")


@pytest.mark.slow
def test_each_hook_really_changed_the_training():
  """Against the same module without hooks (layout_rule: plain config SGD 0.05), each
  hook trains to other weights, on the single device and on the 2x2 mesh alike."""
  r = _results()
  for layout in ("single", "mesh 2x2"):
    plain = np.concatenate([np.ravel(w) for w in r["layout_rule"][layout]["weights"]])
    for hook in ("custom_loss", "sgd_momentum", "adam_schedule"):
      got = np.concatenate([np.ravel(w) for w in r[hook][layout]["weights"]])
      assert np.abs(got - plain).max() > 1e-3, (hook, layout)
  assert r["custom_loss"]["mesh 2x2"]["loss"] == "LossFunctionWrapper:power_loss"
  assert r["sgd_momentum"]["mesh 2x2"]["optimizer"] == "SGD"
  # A plain SGD runs as MeshSGD on the mesh; the run records the user's class.
  assert r["layout_rule"]["mesh 2x2"]["optimizer"] == "MeshSGD"
  assert r["layout_rule"]["mesh 2x2"]["recorded_optimizer"] == "SGD"
  assert r["adam_schedule"]["mesh 2x2"]["optimizer"] == "Adam"
  # ExponentialDecay(0.05, decay_steps=2, decay_rate=0.5) moved on with the steps.
  assert r["adam_schedule"]["mesh 2x2"]["learning_rate"] < 0.05 / 4


@pytest.mark.slow
@pytest.mark.parametrize("hook", cases.HOOKS)
def test_every_layout_records_the_exact_loss_of_every_step(hook):
  """Each step's loss as the engine hands it to the run's Recorder (``step_losses``,
  read per execution of 3 steps) equals the loss a manual GradientTape loop on one
  device computes for that step, on single, mirrored x2 and every mesh. fit's own logs
  carry one running mean per execution: the steps inside an execution cannot be
  recovered from them (what the Recorder did before)."""
  manual = _run("fit")["manual"][hook]
  assert len(manual) == cases.STEPS
  for layout, got in _results()[hook].items():
    assert len(got["step_losses"]) == cases.STEPS, layout
    np.testing.assert_allclose(got["step_losses"], manual, rtol=1e-5, atol=1e-6,
                               err_msg=f"{hook} {layout}")
    keras = got["keras_logs"]
    assert len(keras) == cases.STEPS // cases.EXECUTION, layout  # One value per execution.
    np.testing.assert_allclose(keras[-1], np.mean(manual), rtol=1e-5, err_msg=layout)


@pytest.mark.slow
@pytest.mark.parametrize("layout", MESHES)
def test_the_layout_rule_placed_each_variable_where_it_says(layout):
  """Read back from the DTensors: the rule's kernel split by rows over the model axis
  (each device holds 4/M rows), every other variable
  whole (a rule map leaves unmatched variables replicated, as tf_keras's LayoutMap)."""
  got = _results()["layout_rule"][layout]
  m = int(layout.split("x")[1])
  assert got["layouts"]["model/hidden/kernel"] == ["model", "unsharded"]
  assert got["shard_shapes"]["hidden/kernel"] == [4 // m, 4]
  for path in ("hidden/bias", "head/kernel", "head/bias"):
    assert set(got["layouts"][f"model/{path}"]) == {"unsharded"}, path
  assert got["shard_shapes"]["head/kernel"] == [4, 1]
  plain = _results()["custom_loss"][layout]  # The same model without the rule.
  assert plain["layouts"]["model/hidden/kernel"] != ["model", "unsharded"] or m == 1


@pytest.mark.slow
@pytest.mark.parametrize("layout", MESHES)
def test_an_optimizer_the_mesh_cannot_place_fails_before_training_naming_the_hook(layout):
  got = _results()["legacy_optimizer"]
  assert "weights" in got["single"] and "weights" in got["mirrored x2"]  # Fine without a mesh.
  error = got[layout]["error"]
  assert error.startswith("OptimizerError: ")
  assert f"{cases.module_path('legacy_optimizer')}: optimizer(spec)" in error
  assert "legacy" in error and "mesh=" in error
