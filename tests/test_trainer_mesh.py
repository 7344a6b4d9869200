"""MeshTrainer on DTensor meshes of logical CPU devices: parity with single-device
tf_keras, real sharding, resume and export. Each mesh runs in its own process
(tests/mesh_cases.py), once per mesh for every test of this module."""
import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import dropout_mesh_case
import mesh_cases
import trainer_util as tu
from tfx_parallel.components.common import tfenv

_CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mesh_cases.py")


@functools.lru_cache(maxsize=None)
def _run(b: int, m: int) -> dict:
  proc = subprocess.run([sys.executable, _CASES, str(b), str(m)], capture_output=True,
                        text=True, timeout=600, check=False)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return json.loads(proc.stdout.split("RESULT", 1)[1])


def _close(got, want, what):
  assert len(got) == len(want), what
  for i, (g, w) in enumerate(zip(got, want)):
    np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-5, atol=1e-6,
                               err_msg=f"{what} weight {i}")


@pytest.mark.slow
@pytest.mark.parametrize("mesh", [(2, 1), (1, 2), (2, 2)], ids=["2x1", "1x2", "2x2"])
@pytest.mark.parametrize("optimizer", mesh_cases.OPTIMIZERS)
def test_mesh_matches_single_device_fit(mesh, optimizer):
  """N steps on a BxM mesh give the weights of tf_keras model.fit on one device (same
  model, same tf_keras optimizer, same global batches), to float32 tolerance."""
  r = _run(*mesh)["parity"][optimizer]
  _close(r["initial"], r["reference_initial"], f"{mesh} {optimizer} initial")
  _close(r["weights"], r["reference"], f"{mesh} {optimizer} trained")
  # Training moved every weight: the comparison is not between untouched values.
  for name, a, b in zip(r["names"], r["initial"], r["weights"]):
    assert not np.allclose(a, b), name
  assert len(r["losses"]) == mesh_cases.STEPS
  np.testing.assert_allclose(np.mean(r["losses"]), r["reference_mean_loss"], rtol=1e-5)
  # Optimizer state: the step count, plus stock SGD's unread m per variable (MeshSGD
  # keeps it, so the keys are the user's SGD's on any layout); Adam m and v.
  slots = {"sgd": 1, "adam": 2}[optimizer]
  assert "optimizer/iteration" in r["optimizer_state"]
  assert len(r["optimizer_state"]) == 1 + slots * len(r["names"]), r["optimizer_state"]


@pytest.mark.slow
@pytest.mark.parametrize("mesh", [(2, 1), (1, 2), (2, 2)], ids=["2x1", "1x2", "2x2"])
@pytest.mark.parametrize("optimizer", mesh_cases.OPTIMIZERS)
def test_several_steps_per_call_match_single_device_fit(mesh, optimizer):
  """steps_async runs k steps in one DTensor call (3, then 2): the same weights and
  per-step losses as fit. On a split batch axis this needs the explicit read/write
  order of MeshTrainer._train_steps (without it Adam on 2x1 drifts by ~0.7) and
  DTensor's all-reduce combining off (tfenv.ENV_REQUIRED; with it on, 0.14 after 5 steps)."""
  r = _run(*mesh)["parity_per_call"][optimizer]
  _close(r["weights"], r["reference"], f"{mesh} {optimizer} 3+2 steps per call")
  assert len(r["losses"]) == mesh_cases.STEPS
  np.testing.assert_allclose(np.mean(r["losses"]), r["reference_mean_loss"], rtol=1e-5)
  assert np.allclose(r["losses"], _run(*mesh)["parity"][optimizer]["losses"], rtol=1e-5)


@pytest.mark.slow
def test_1x2_mesh_holds_half_of_each_sharded_variable_per_device():
  r = _run(1, 2)
  # Default rules: Megatron pair for the hidden layers, embedding on its output
  # dimension, and the 3-logit head (3 does not divide by 2) split by rows (its 4 inputs).
  assert r["rules"] == {"color_embedding/embeddings": [None, "model"],
                        "hidden_1/kernel": [None, "model"], "hidden_1/bias": ["model"],
                        "hidden_2/kernel": ["model", None], "head/kernel": ["model", None]}
  halved = {"color_embedding/embeddings": 1, "hidden_1/kernel": 1, "hidden_1/bias": 0,
            "hidden_2/kernel": 0, "head/kernel": 0}
  for path, block in r["blocks"].items():
    want = list(block["global"])
    if path in halved:
      want[halved[path]] //= 2
    # The device's component of the DTensor, and the layout's own arithmetic.
    assert block["local"] == want, path
    assert block["local_from_layout"] == want, path
    assert r["shard_shapes"][path] == want, path
    # The two blocks put side by side are the full variable.
    assert block["joined_equals_full"], path
  for path in ("color_embedding/embeddings", "hidden_1/kernel", "hidden_2/kernel",
               "head/kernel"):
    assert r["blocks"][path]["distinct_blocks"], path  # Different values, not copies.
  assert r["layouts"]["model/color_embedding/embeddings"] == ["unsharded", "model"]


@pytest.mark.slow
def test_1x2_adam_slots_follow_their_variables_layout():
  layouts = _run(1, 2)["layouts"]
  model = {k[len("model/"):]: v for k, v in layouts.items() if k.startswith("model/")}
  assert len(model) == 7
  for path, layout in model.items():
    assert layouts[f"optimizer/m/{path}"] == layout, path
    assert layouts[f"optimizer/v/{path}"] == layout, path
  assert any("model" in layout for layout in model.values())


@pytest.mark.slow
def test_1x2_state_round_trip_continues_identically():
  r = _run(1, 2)["resume"]
  assert "optimizer/iteration" in r["state_keys"]
  assert "optimizer/m/hidden_1/kernel" in r["state_keys"]
  assert not r["fresh_equals_saved"]  # load_state really changed the fresh trainer.
  assert r["resumed_losses"] == r["losses"]
  for i, (a, b) in enumerate(zip(r["resumed_weights"], r["weights"])):
    np.testing.assert_array_equal(np.array(a), np.array(b), err_msg=f"weight {i}")


@pytest.mark.slow
def test_1x2_full_weights_export_to_a_plain_model():
  r = _run(1, 2)
  assert r["export"]["mesh_is_dtensor"] and not r["export"]["plain_is_dtensor"]
  np.testing.assert_allclose(r["export"]["plain_outputs"], r["export"]["mesh_outputs"],
                             rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_mesh_starts_from_the_weights_a_plain_build_gets_from_the_same_seed():
  assert _run(1, 2)["seeded_start_equal"]


@pytest.mark.slow
def test_bad_rule_rejected_when_the_trainer_is_built():
  bad = _run(1, 2)["bad_rule"]
  assert bad is not None
  assert (bad["module"], bad["variable"], bad["rule"]) == ("parity_model", "head/kernel",
                                                           "head/kernel")
  assert "does not divide" in bad["message"]
  assert "'parity_model'" in bad["message"] and "'head/kernel'" in bad["message"]


@pytest.mark.slow
def test_1x2_split_activations_are_gathered_except_at_a_megatron_hand_off():
  r = _run(1, 2)
  # hidden_1 (column split) feeds hidden_2 (row split) directly: stays split.
  assert r["gathered"] == ["color_embedding", "hidden_2", "head"]
  wide = r["wide_deep"]
  # "deep" is column split but feeds a concat: gathered, and training still matches.
  assert wide["rules"]["deep/kernel"] == [None, "model"]
  assert "deep" in wide["gathered"] and "wide_embedding" in wide["gathered"]
  _close(wide["weights"], wide["reference"], "wide_deep sgd")


@pytest.mark.slow
@pytest.mark.skipif(len(tfenv.gpus()) < 2, reason="needs 2 GPUs visible to TensorFlow")
def test_mesh_on_gpus_matches_single_device():
  """With GPUs present the mesh is built on them (create_mesh prefers GPUs)."""
  r = _run(1, 2)
  assert all("GPU" in d for d in r["devices"]), r["devices"]
  for optimizer in mesh_cases.OPTIMIZERS:
    _close(r["parity"][optimizer]["weights"], r["parity"][optimizer]["reference"],
           f"GPU 1x2 {optimizer}")


@pytest.mark.slow
def test_mesh_runs_on_the_cpu_devices_it_was_given():
  r = _run(2, 2)
  if tfenv.gpus():
    pytest.skip("GPUs visible: the mesh is built on them")
  assert r["devices"] == [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(4)]


@pytest.mark.parametrize("kwargs,fragment", [
    (dict(mesh_shape=(2, 0)), "mesh_shape: two positive sizes"),
    (dict(mesh_shape=(2, 1, 1)), "mesh_shape: two positive sizes"),
    (dict(optimizer="adagrad"), "optimizer: must be one of"),
])
def test_bad_trainer_arguments_are_rejected_before_any_device_work(kwargs, fragment):
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
  args = dict(mesh_shape=(2, 1), rules=None, loss_fn=None, optimizer="sgd",
              learning_rate=0.1, global_batch=8)
  args.update(kwargs)

  def never_built():
    raise AssertionError("build_model must not run")

  with pytest.raises(ValueError, match=fragment):
    mesh_runtime.MeshTrainer(never_built, **args)


@pytest.mark.slow
def test_many_mesh_trainers_train_and_evaluate_one_after_another_in_one_process():
  """Six MeshTrainers (meshes 1x2, 2x1, 1x4; widths 8, 12, 16; Adam and SGD) one after
  another in one process (tests/many_meshes_case.py): each trains 5 steps in two
  executions and evaluates, with plain fit's weights, losses and evaluation sums, and
  no function of theirs holds a loop. With a ``tf.while_loop`` in the step, DTensor
  named the functions it made of it per compiled module and registered them
  process-wide, so trainers collided now and then ("Cannot add function 'while4_body'
  because a different function with the same name already exists",
  tensorflow/compiler/mlir/tensorflow/transforms/region_control_flow_to_functional.cc,
  TF 2.16: GetUniqueName(op) + "_body"); 7 runs in a row of the case passed."""
  proc = subprocess.run([sys.executable, os.path.join(os.path.dirname(_CASES),
                                                      "many_meshes_case.py")],
                        capture_output=True, text=True, timeout=900, check=False,
                        cwd=os.path.dirname(_CASES))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  runs = json.loads(proc.stdout.split("RESULT", 1)[1])["runs"]
  assert len(runs) == 6 and {tuple(r["mesh"]) for r in runs} == {(1, 2), (2, 1), (1, 4)}
  assert [r.get("error") for r in runs] == [None] * 6, runs
  for r in runs:
    what = f"{r['mesh']} width {r['width']} {r['optimizer']}"
    _close(r["weights"], r["reference"], what)
    assert len(r["losses"]) == mesh_cases.STEPS, what
    np.testing.assert_allclose(np.mean(r["losses"]), r["reference_mean_loss"], rtol=1e-5,
                               err_msg=what)
    np.testing.assert_allclose(r["eval"][0], r["reference_eval"][0], rtol=1e-5, err_msg=what)
    assert r["eval"][1] == r["reference_eval"][1], what
    assert r["loop_ops"] == [], what


_SUBCLASSED = """
import tensorflow as tf
import tf_keras
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.engines import mesh_runtime

class Net(tf_keras.Model):
  def __init__(self):
    super().__init__()
    self.hidden = tf_keras.layers.Dense(4, name="hidden")
  def call(self, features):
    return self.hidden(features["x"])

def called_on_tensors():
  net = Net()
  net({"x": tf.zeros((2, 3))})
  return net

def built_from_shapes():
  net = Net()
  net.build({"x": (None, 3)})
  return net

def trainer(build):
  return mesh_runtime.MeshTrainer(build, mesh_shape=(1, 1), rules=None,
                                  loss_fn=tf_keras.losses.MeanSquaredError(), optimizer="sgd",
                                  learning_rate=0.1, global_batch=2, module_name="sub")
try:
  trainer(called_on_tensors)
  print("NO ERROR")
except user_module.ModuleError as e:
  print("MODULE_ERROR", e)
loss = trainer(built_from_shapes).step({"x": tf.ones((2, 3))}, tf.ones((2, 4)))
print("TRAINED", loss)
"""


@pytest.mark.slow
def test_a_subclassed_model_called_on_tensors_is_told_how_to_build_it():
  """The mesh builds the model first with variables that hold no values (the probe): a
  subclassed model called on tensors inside build_model fails there. That is a
  ModuleError naming the fix (model.build, or a call on tf_keras.Input), not a bare
  MatMul error; the same model built from shapes trains."""
  proc = subprocess.run([sys.executable, "-c", _SUBCLASSED], capture_output=True, text=True,
                        timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "MODULE_ERROR module 'sub': build_model() raised InvalidArgumentError" in proc.stdout
  assert "model.build(input shapes)" in proc.stdout and "TRAINED" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_a_dropout_model_trains_on_the_mesh_without_a_call_in_the_module():
  """DTensor cannot run tf_keras Dropout's default stateful random op; the mesh turns on
  tf_keras's tf.random.Generator for its builds (mesh_runtime.tf_random_generator), and
  off again after. tests/dropout_mesh_case.py: Dropout(0.5) trains on 1x2, 2x1 and 2x2
  (the loss falls); each batch-axis shard draws its own mask, the devices of the model
  axis the same one, and a model-axis split activation one block per device; the
  generator's state is a replicated DVariable that the steps advance, and is in no
  checkpoint (a strict restore into a fresh trainer works); rate 0.0 trains as the model
  without Dropout and evaluation (training=False) equals it. With unseeded initialisers
  the mesh starts from the weights a plain build (generator on) draws from the seed."""
  case = dropout_mesh_case
  r = tu.run_cases("dropout_mesh_case.py", timeout=600)
  for name, got in r["meshes"].items():
    losses = got["losses"]
    assert len(losses) == case.STEPS and np.all(np.isfinite(losses)), name
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), (name, losses)
    assert not got["flag_after_build"], name  # Other layouts keep tf_keras's default.
    assert got["state_is_dvariable"] and got["state_layout"] == ["unsharded"], name
    assert got["state_advanced"], name
    b, m = (int(x) for x in name.split("x"))
    masks = np.array(got["masks"])  # [device (batch-major), rows, WIDTH]
    assert masks.shape == (b * m, case.GLOBAL_BATCH // b, case.WIDTH), name
    for i in range(b * m):  # The devices of one batch shard apply one mask.
      np.testing.assert_array_equal(masks[i], masks[i - i % m], err_msg=name)
    if b > 1:
      assert not np.array_equal(masks[0], masks[m]), name
    whole = np.concatenate([masks[i * m] for i in range(b)])
    assert len({tuple(row) for row in whole}) > 1 and 0.2 < whole.mean() < 0.8, name
    split = np.array(got["split_masks"])
    assert split.shape == (b * m, case.GLOBAL_BATCH // b, case.WIDTH // m), name
    if m > 1:
      assert not np.array_equal(split[0], split[1]), name
  assert r["restored_equal"] and np.all(np.isfinite(r["restored_losses"]))
  np.testing.assert_allclose(r["rate_zero_losses"], r["plain_losses"], rtol=1e-5)
  np.testing.assert_allclose(r["eval_dropout"], r["eval_plain"], rtol=1e-5)
  assert r["unseeded_start_equal"] == [True] * 4
  assert not r["flag_at_end"]


@pytest.mark.slow
def test_a_dropout_the_build_leaves_unbuilt_draws_from_a_replicated_generator():
  """A subclassed model whose Dropout runs only when training: ``model.build`` leaves it
  unbuilt, and tf_keras would create its generator's state at the first step, inside the
  mesh's step, as a plain variable on CPU:0 (the devices of the model axis then applied
  different masks to one replicated activation, and the seed it drew there made two runs
  from one seed differ). The mesh's builds create it (tests/dropout_mesh_case.py lazy)."""
  case = dropout_mesh_case
  r = tu.run_cases("dropout_mesh_case.py", "lazy", timeout=600)
  assert r["state_is_dvariable"]
  masks = np.array(r["masks"])  # [device (batch-major), rows, WIDTH] on mesh 2x2
  np.testing.assert_array_equal(masks[0], masks[1])
  np.testing.assert_array_equal(masks[2], masks[3])
  assert not np.array_equal(masks[0], masks[2])
  assert 0.2 < masks.mean() < 0.8 and masks.shape == (4, case.GLOBAL_BATCH // 2, case.WIDTH)
  assert r["losses"][0] == r["losses"][1] and np.all(np.isfinite(r["losses"]))
