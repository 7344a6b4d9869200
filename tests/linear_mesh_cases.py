"""The built-in linear model on every mesh 1xM and BxM that divides, in ONE process.

``python tests/linear_mesh_cases.py`` splits the CPU into 8 logical devices and, for each
mesh (B, M) with B in {1, 2}, M in {1, 2, 4} (F = 4 features, global batch 8), builds
the built-in ``models/linear.py`` model on a MeshTrainer with the DEFAULT rules, trains
two SGD steps, and reads back from the DTensor itself (``dtensor.fetch_layout`` and
``dtensor.unpack``): each device's kernel block, the bias, the per-device state bytes
(memory.measure) and, on the first batch, each device's gradient block (after the
relayout into the kernel's layout, and as the tape gives it before), next to the numpy
per-shard gradient ``X_i^T dL/dY`` of the seed article. Prints one ``RESULT{json}``.
"""
import json

from tfx_parallel.components.common import tfenv

FEATURES, GLOBAL_BATCH, LR, STEPS = 4, 8, 0.1, 2
MESHES = [(b, m) for b in (1, 2) for m in (1, 2, 4)]


def spec():
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  return ms.ModelSpec(features=tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32)
                                     for i in range(FEATURES)), label_key="y")


def batches(seed=0):
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(STEPS):
    x = rng.normal(size=(GLOBAL_BATCH, FEATURES)).astype(np.float32)
    y = (x @ np.arange(1, FEATURES + 1, dtype=np.float32)[:, None] + 3).astype(np.float32)
    out.append(({f"x{i}": x[:, i:i + 1] for i in range(FEATURES)}, y))
  return out


def main():
  tfenv.split_cpu(8)
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.plan import memory  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime
  from tfx_parallel.components.distributed_trainer import sharding  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.models import linear  # pylint: disable=g-import-not-at-top

  data = batches()
  x0 = np.concatenate([data[0][0][f"x{i}"] for i in range(FEATURES)], axis=1)
  y0 = data[0][1]
  # Zero-initialised linear model: Y = 0 at step 0, MSE: dL/dY = 2 (Y - y) / N.
  dl_dy = 2 * (np.zeros_like(y0) - y0) / GLOBAL_BATCH
  out = {}
  for b, m in MESHES:
    tr = mesh_runtime.MeshTrainer(
        lambda: linear.build_model(spec()), mesh_shape=(b, m), rules=None,
        loss_fn=tf_keras.losses.MeanSquaredError(), optimizer="sgd", learning_rate=LR,
        global_batch=GLOBAL_BATCH, module_name="linear")
    kernel = tr.model.get_layer(linear.LINEAR_LAYER).kernel
    bias = tr.model.get_layer(linear.LINEAR_LAYER).bias
    # Gradient blocks of the first batch, each in its variable's layout (one per device).
    packed = {k: tr._pack(v) for k, v in data[0][0].items()}  # pylint: disable=protected-access
    _, grads = tr._gradients_fn(packed, tr._pack(y0))  # pylint: disable=protected-access
    kernel_grad = grads[[v.name for v in tr.model.trainable_variables].index(kernel.name)]
    grad_blocks = [g.numpy().tolist() for g in dtensor.unpack(kernel_grad)]
    # The same gradient as the tape gives it, before _gradients relayouts it: the layout
    # DTensor's SPMD expansion chose for X^T dL/dY, and each device's block of it.

    @tf.function
    def raw_gradient(features, labels, _tr=tr, _kernel=kernel):
      with tf.GradientTape() as tape:
        loss = _tr.loss_fn(labels, _tr.model(features, training=True))
      return tape.gradient(loss, _kernel)
    raw = raw_gradient(packed, tr._pack(y0))  # pylint: disable=protected-access
    for f, y in data:
      tr.step(f, y)
    full_kernel = tr.full_weights()[[v.name for v in tr.model.weights].index(kernel.name)]
    out[f"{b}x{m}"] = {
        "rules": {k: list(v) for k, v in tr.rules.items()},
        "kernel_layout": list(dtensor.fetch_layout(kernel).sharding_specs),
        "bias_layout": list(dtensor.fetch_layout(bias).sharding_specs),
        "kernel_blocks": [c.numpy().tolist() for c in dtensor.unpack(kernel.read_value())],
        "bias_blocks": [c.numpy().tolist() for c in dtensor.unpack(bias.read_value())],
        "kernel_devices": [str(d) for d in dtensor.fetch_layout(kernel).mesh.local_devices()],
        "full_kernel": full_kernel.tolist(),
        "grad_blocks": grad_blocks,
        "raw_grad_layout": list(dtensor.fetch_layout(raw).sharding_specs),
        "raw_grad_blocks": [g.numpy().tolist() for g in dtensor.unpack(raw)],
        "state_bytes_per_device": memory.measure(tr.model.trainable_variables,
                                                 tr.optimizer.variables).state_bytes_per_device,
        "kernel_bytes_by_device": dict(memory.bytes_by_device([kernel])),
        "splits": sharding.split_record(tr.shardings, tr.shard_shapes(), m),
        "replicated": [v.path for v in tr.replicated],
    }
    del tr
  # The numpy reference: plain tf_keras fit of the same model on one device.
  ref = linear.build_model(spec())
  ref.compile(optimizer=tf_keras.optimizers.SGD(LR), loss=tf_keras.losses.MeanSquaredError())
  for f, y in data:
    ref.train_on_batch(f, y)
  out["reference_kernel"] = ref.get_layer(linear.LINEAR_LAYER).kernel.numpy().tolist()
  out["x0"], out["dl_dy"] = x0.tolist(), dl_dy.tolist()
  del tf
  return out


if __name__ == "__main__":
  print("RESULT" + json.dumps(main()))
