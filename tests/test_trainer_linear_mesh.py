"""The seed's model parallelism on the built-in linear model: the kernel split by ROWS over
the model axis, Y = sum_i X_i W_i, each shard's gradient block X_i^T dL/dY once in the
kernel's layout (the tape's gradient before that relayout is whole). Read from the
DTensor itself on every mesh 1xM and BxM that divides (one process for all meshes:
tests/linear_mesh_cases.py), and the sentence of docs/layouts.md read back."""
import functools
import os
import re

import numpy as np
import pytest

import trainer_util as tu

import linear_mesh_cases as cases

_README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "layouts.md")


@functools.lru_cache(maxsize=None)
def _run() -> dict:
  return tu.run_cases("linear_mesh_cases.py")


MESH_IDS = [f"{b}x{m}" for b, m in cases.MESHES]


@pytest.mark.slow
@pytest.mark.parametrize("mesh", MESH_IDS)
def test_each_device_holds_its_block_of_kernel_rows(mesh):
  r = _run()[mesh]
  b, m = (int(x) for x in mesh.split("x"))
  full = np.array(r["full_kernel"])
  rows = cases.FEATURES // m
  blocks = [np.array(blk) for blk in r["kernel_blocks"]]
  assert len(blocks) == b * m  # One component per device of the mesh.
  for i, block in enumerate(blocks):
    # Devices are batch-major: device (bi, mi) holds rows mi*F/M .. (mi+1)*F/M.
    mi = i % m
    assert block.shape == (rows, 1), (mesh, i)
    np.testing.assert_array_equal(block, full[mi * rows:(mi + 1) * rows], err_msg=f"{mesh} {i}")
  # The bias is whole on every device (added once, after the sum).
  assert r["bias_layout"] == ["unsharded"]
  assert all(len(blk) == 1 for blk in r["bias_blocks"])
  if m > 1:
    assert r["kernel_layout"] == ["model", "unsharded"]
    assert r["rules"] == {"linear/kernel": ["model", None]}
    assert r["splits"]["linear/kernel"] == {"split": "rows", "sharding": ["model", None],
                                            "per_device": [rows, 1]}
    assert r["splits"]["linear/bias"]["split"] == "replicated"
  else:
    assert r["splits"]["linear/kernel"]["split"] == "replicated"
  assert r["replicated"] == []
  # Bytes measured per device: F/M rows of 4 bytes each.
  assert sorted(set(r["kernel_bytes_by_device"].values())) == [rows * 4]


@pytest.mark.slow
@pytest.mark.parametrize("mesh", MESH_IDS)
def test_mesh_training_matches_single_device_fit(mesh):
  got = np.array(_run()[mesh]["full_kernel"])
  np.testing.assert_allclose(got, np.array(_run()["reference_kernel"]), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mesh", [i for i in MESH_IDS if not i.endswith("x1")])
def test_each_devices_gradient_block_after_the_relayout_is_its_rows_of_x_transposed_dl_dy(
    mesh):
  """What the step applies: the gradient once ``_gradients`` has put it in the kernel's
  layout. Each device's block equals its rows of X^T dL/dY; read after the relayout,
  this cannot tell a local product X_i^T dL/dY from a whole gradient sliced afterwards
  (the next test reads it before)."""
  r = _run()
  b, m = (int(x) for x in mesh.split("x"))
  x, dl_dy = np.array(r["x0"]), np.array(r["dl_dy"])
  rows = cases.FEATURES // m
  grads = [np.array(g) for g in r[mesh]["grad_blocks"]]
  assert len(grads) == b * m
  for i, g in enumerate(grads):
    mi = i % m
    want = x[:, mi * rows:(mi + 1) * rows].T @ dl_dy  # X_i^T dL/dY over the global batch
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6, err_msg=f"{mesh} device {i}")
  assert not np.allclose(grads[0], grads[1 % len(grads)]) or m == 1  # Distinct shards.


@pytest.mark.slow
@pytest.mark.parametrize("mesh", [i for i in MESH_IDS if not i.endswith("x1")])
def test_the_tapes_kernel_gradient_before_the_relayout_is_whole_on_every_device(mesh):
  """Observed before any relayout (the tape's gradient as a DTensor function returns
  it): DTensor's SPMD expansion lays X^T dL/dY out replicated, so every device holds the
  whole [F, 1] gradient, not only its X_i^T dL/dY rows; the relayout into the row-split
  kernel's layout then slices it. When this fails because the gradient comes out split
  by rows, the per-shard product is computed locally: update this test, not the code."""
  r = _run()
  x, dl_dy = np.array(r["x0"]), np.array(r["dl_dy"])
  b, m = (int(v) for v in mesh.split("x"))
  assert r[mesh]["raw_grad_layout"] == ["unsharded", "unsharded"]
  assert len(r[mesh]["raw_grad_blocks"]) == b * m
  for i, block in enumerate(r[mesh]["raw_grad_blocks"]):
    np.testing.assert_allclose(np.array(block), x.T @ dl_dy, rtol=1e-5, atol=1e-6,
                               err_msg=f"{mesh} device {i}")


@pytest.mark.slow
def test_state_bytes_per_device_fall_with_the_model_axis():
  r = _run()
  one = r["1x1"]["state_bytes_per_device"]
  # SGD: params + grads + stock SGD's unread m slot (MeshSGD keeps it: the same checkpoint
  # keys on every layout), each of the kernel's F/M rows and the whole bias, + the int64
  # step counter, + two blocks of the largest variable in transit (the kernel's F/M rows,
  # at least the bias's 4 B).
  for mesh in MESH_IDS:
    m = int(mesh.split("x")[1])
    assert r[mesh]["state_bytes_per_device"] == (
        3 * (cases.FEATURES // m + 1) * 4 + 8 + 2 * max(cases.FEATURES // m, 1) * 4), mesh
  assert r["2x2"]["state_bytes_per_device"] < one and r["1x4"]["state_bytes_per_device"] < one


def test_readme_sentence_on_the_kernel_split_is_what_the_default_rules_do():
  """docs/layouts.md: "the linear kernel is split by rows ... the MLP alternates column- and
  row-sharded kernels". Read it, then compare with sharding's default rules on the
  built-in models' variables (model axis 2)."""
  from tfx_parallel.components.distributed_trainer import sharding  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  text = " ".join(open(_README, encoding="utf-8").read().split())
  said = re.search(r"the linear kernel is split by (rows|columns)", text)
  assert said, "docs/layouts.md no longer says how the linear kernel is split"
  mlp_said = re.search(r"the MLP alternates (column|row)- and (column|row)-sharded kernels", text)
  assert mlp_said
  spec = ms.ModelSpec(features=tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32) for i in range(4)),
                      label_key="y", hparams={"hidden_units": [8, 8]})
  linear = sharding.default_rules(user_module.build(user_module.load(builtin="linear"), spec), 2)
  assert sharding.split_name(linear["linear/kernel"]) == said.group(1)
  mlp = sharding.default_rules(user_module.build(user_module.load(builtin="mlp"), spec), 2)
  kernels = [sharding.split_name(mlp[k]) for k in ("hidden_1/kernel", "hidden_2/kernel")]
  assert kernels == [mlp_said.group(1) + "s", mlp_said.group(2) + "s"]
