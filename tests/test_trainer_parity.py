"""Parity and sharded math of the layouts, each layout in its own process."""
import json
import textwrap

import numpy as np
import pytest

from trainer_util import run_script

# One process per layout runs every case: a fixed global batch, N steps, gathered
# weights as JSON (a fresh process per layout: DTensor and MirroredStrategy
# collectives cannot share one).
CASES = [("linear", "sgd", 1), ("linear", "adam", 5), ("mlp", "momentum", 5)]

_STEPS_SCRIPT = textwrap.dedent("""
    import json
    from tfx_parallel.pipeline import tfenv
    tfenv.split_cpu({devices})
    import numpy as np, tensorflow as tf
    from tfx_parallel.components.distributed_trainer import layouts, model as M
    results = []
    for model, optimizer, steps in {cases!r}:
      specs = M.param_specs(model, 4, (4,))
      rt = layouts.create({layout!r}, specs=specs, optimizer=optimizer, lr=0.05,
                          global_batch=8, devices=2, mesh_shape={mesh})
      rt.build(M.init_params(specs, 0))
      rng = np.random.default_rng(1)
      xs = rng.normal(size=(steps, 8, 4)).astype(np.float32)
      ys = xs @ np.array([[1], [2], [3], [4]], np.float32) + 3
      ds = rt.distribute(lambda b, n, i: tf.data.Dataset.from_tensor_slices((xs, ys)))
      losses = [rt.step(batch, t) for t, batch in enumerate(ds, 1)]
      values, _ = rt.gather()
      results.append({{"losses": losses,
                       "values": {{k: v.tolist() for k, v in values.items()}}}})
    print("RESULT" + json.dumps(results))
""")

LAYOUTS = [("mirrored", 2, (1, 1)), ("mesh", 2, (2, 1)), ("mesh", 2, (1, 2)),
           ("mesh", 4, (2, 2))]


def _run(layout, devices, mesh):
  out = run_script(_STEPS_SCRIPT.format(layout=layout, devices=devices, mesh=mesh,
                                        cases=CASES))
  return json.loads(out.split("RESULT", 1)[1])


@pytest.mark.slow
def test_layouts_match_single():
  """One step (sgd) and several steps (adam, momentum MLP) under every layout give
  the same losses and updated weights as `single` on the same global batches."""
  ref = _run("single", 1, (1, 1))
  assert len(ref) == len(CASES)
  for layout, devices, mesh in LAYOUTS:
    got = _run(layout, devices, mesh)
    for case, r, g in zip(CASES, ref, got):
      assert len(g["losses"]) == case[2]
      np.testing.assert_allclose(g["losses"], r["losses"], rtol=1e-5, atol=1e-6,
                                 err_msg=f"{layout} {mesh} {case} losses")
      for name, value in r["values"].items():
        np.testing.assert_allclose(g["values"][name], value, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{layout} {mesh} {case} {name}")


_SHARDED_MATH = textwrap.dedent("""
    import json
    from tfx_parallel.pipeline import tfenv
    tfenv.split_cpu(4)
    import numpy as np, tensorflow as tf
    from tfx_parallel.components.distributed_trainer import layouts, model as M
    specs = M.param_specs("linear", 4)
    rt = layouts.create("mesh", specs=specs, optimizer="sgd", lr=0.1, global_batch=8,
                        mesh_shape=(2, 2))
    rng = np.random.default_rng(3)
    w = rng.normal(size=(4, 1)).astype(np.float32)
    rt.build({"kernel": w, "bias": np.zeros(1, np.float32)})
    x = rng.normal(size=(8, 4)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)
    xd, yd = rt._pack(tf.constant(x), rt.x_layout), rt._pack(tf.constant(y), rt.y_layout)
    @tf.function
    def fwd_grad(xd, yd):
      with tf.GradientTape() as tape:
        pred = M.forward(rt.params, xd)
        loss = M.mse(pred, yd)
      return pred, tape.gradient(loss, rt.params)[0]
    pred, grad = fwd_grad(xd, yd)
    d = rt.dtensor
    pred_full = d.unpack(d.relayout(pred, d.Layout.replicated(rt.mesh, 2)))[0].numpy()
    shards = [s.numpy().tolist() for s in d.unpack(grad)]
    print("RESULT" + json.dumps({"x": x.tolist(), "y": y.tolist(), "w": w.tolist(),
                                 "pred": pred_full.tolist(), "grad_shards": shards,
                                 "kernel_layout": d.fetch_layout(rt.params[0]).sharding_specs}))
""")


@pytest.mark.slow
def test_sharded_forward_and_per_shard_gradient():
  r = json.loads(run_script(_SHARDED_MATH).split("RESULT", 1)[1])
  x, y, w = (np.array(r[k], np.float32) for k in ("x", "y", "w"))
  # The kernel is split by rows over the model axis.
  assert r["kernel_layout"] == ["model", "unsharded"]
  # Forward: Σ_i X_i W_i over the two model shards equals the dense X W.
  partial = [x[:, i * 2:(i + 1) * 2] @ w[i * 2:(i + 1) * 2] for i in range(2)]
  np.testing.assert_allclose(r["pred"], sum(partial), rtol=1e-5)
  np.testing.assert_allclose(r["pred"], x @ w, rtol=1e-5)
  # Gradient of shard i is X_iᵀ ∂L/∂Y with ∂L/∂Y = 2 (XW - y) / N.
  dy = 2.0 * (x @ w - y) / len(y)
  shards = np.array(r["grad_shards"], np.float32)  # one per device, (b, m) order
  for device, shard in enumerate(shards):
    m = device % 2
    np.testing.assert_allclose(shard, x[:, m * 2:(m + 1) * 2].T @ dy, rtol=1e-4, atol=1e-6)
