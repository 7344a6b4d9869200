"""Measured training-state bytes per device (memory.py), read from where the variables of a
real training run live: MeshTrainer's DTensor layouts, and a MirroredStrategy tf_keras
model's replicas. Each case runs in its own process (logical CPU devices, DTensor)."""
import json
import subprocess
import sys
import textwrap

import pytest

_MODEL = """
import json
from tfx_parallel.components.common import tfenv
tfenv.split_cpu(2)
import tensorflow as tf
import tf_keras
from tfx_parallel.components.distributed_trainer.plan import memory
from tfx_parallel.components.distributed_trainer import sharding

def build():
  x = tf_keras.Input((8,), name="x")
  h = tf_keras.layers.Dense(64, name="hidden")(x)
  return tf_keras.Model({"x": x}, tf_keras.layers.Dense(1, name="head")(h))

def mse(y, p):
  return tf.reduce_mean(tf.square(p - y))

def report(params, slots):
  kernel = [v for v in params if sharding.variable_path(v) == "hidden/kernel"]
  print(json.dumps({"kernel": memory.bytes_by_device(kernel),
                    "state": memory.measure(params, slots).as_dict()}))
"""

_MESH = _MODEL + """
from tfx_parallel.components.distributed_trainer.engines import mesh_runtime
trainer = mesh_runtime.MeshTrainer(
    build, mesh_shape=(1, MODEL_AXIS), rules={"hidden/kernel": (None, "model")}, loss_fn=mse,
    optimizer="adam", learning_rate=0.1, global_batch=4, module_name="memory_test")
trainer.step({"x": tf.ones((4, 8))}, tf.ones((4, 1)))
report(trainer.model.trainable_variables, trainer.optimizer.variables)
"""

_MIRRORED = _MODEL + """
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
  model = build()
  model.compile(optimizer=tf_keras.optimizers.Adam(0.1), loss=mse)
model.fit({"x": tf.ones((4, 8))}, tf.ones((4, 1)), batch_size=4, epochs=1, verbose=0)
report(model.trainable_variables, model.optimizer.variables)
"""

KERNEL = 8 * 64 * 4                  # hidden/kernel, float32
OTHER = (64 + 64 + 1) * 4            # hidden/bias, head/kernel, head/bias
STEP_COUNTER = 8                     # the optimizer's int64 iterations, on every device
ADAM = 2                             # slots per parameter


def _run(code: str) -> dict:
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=300, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def mesh_runs():
  return {m: _run(_MESH.replace("MODEL_AXIS", str(m))) for m in (1, 2)}


@pytest.mark.slow
def test_a_sharded_kernel_holds_half_its_bytes_per_device_on_a_1x2_mesh(mesh_runs):
  one, two = mesh_runs[1], mesh_runs[2]
  assert list(one["kernel"].values()) == [KERNEL]
  assert len(two["kernel"]) == 2  # Two devices, each with its own shard.
  assert sorted(two["kernel"].values()) == [KERNEL // 2, KERNEL // 2]


@pytest.mark.slow
def test_mesh_state_is_params_grads_and_slots_at_shard_size(mesh_runs):
  for m, got in mesh_runs.items():
    assert got["state"]["param_count"] == 8 * 64 + 64 + 64 + 1
    assert got["state"]["param_bytes_total"] == KERNEL + OTHER
    # + two blocks of the largest variable in transit: the kernel's 1/m.
    assert got["state"]["state_bytes_per_device"] == (
        (2 + ADAM) * (KERNEL // m + OTHER) + STEP_COUNTER + 2 * KERNEL // m), m


@pytest.mark.slow
def test_mirrored_replicas_each_hold_a_full_copy():
  got = _run(_MIRRORED)
  assert sorted(got["kernel"].values()) == [KERNEL, KERNEL]
  assert got["state"]["state_bytes_per_device"] == (
      (2 + ADAM) * (KERNEL + OTHER) + STEP_COUNTER + 2 * KERNEL)  # + 2 kernels in transit


@pytest.mark.slow
def test_a_fit_layout_records_the_measured_bytes_in_its_history(tmp_path):
  """train.py measures after model.fit: mirrored x2, the built-in linear model, Adam."""
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / "examples")
  keys, _, rows = tu.write_examples(root, rows=256, eval_rows=64)
  history = tu.run_job(tu.job_dict(str(tmp_path / "run"), root, keys, rows, layout="mirrored",
                                   devices=2, optimizer="adam", steps=4, batch_size=32,
                                   log_every=2, checkpoint_every=0), str(tmp_path / "run"))
  assert (history["param_count"], history["param_bytes_total"]) == (3, 12)  # kernel 2x1, bias
  # + two copies of the 2x1 kernel (8 B), the largest variable, in transit.
  assert history["state_bytes_per_device"] == (2 + ADAM) * 12 + STEP_COUNTER + 2 * 8
  # The default cache "auto" held the 256 tiny rows in memory, under mirrored too.
  assert (history["input_cache"]["mode"], history["input_cache"]["rows"]) == ("memory", 256)
