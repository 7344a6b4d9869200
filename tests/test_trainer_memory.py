"""Measured training-state bytes per device, read from the variables' real placement
(DTensor layouts, tf.distribute replicas), each case in its own process."""
import json
import subprocess
import sys
import textwrap

import pytest

_PRELUDE = """
import json
from tfx_parallel.pipeline import tfenv
tfenv.prepare()
import tensorflow as tf
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
from tensorflow.experimental import dtensor
from tfx_parallel.components.distributed_trainer import memory
"""

_MESH = _PRELUDE + """
mesh = dtensor.create_mesh([("batch", 1), ("model", {m})], device_type="CPU",
                           devices=[f"CPU:{{i}}" for i in range({m})])
kernel = dtensor.DVariable(dtensor.call_with_layout(
    tf.zeros, dtensor.Layout([dtensor.UNSHARDED, "model"], mesh), shape=(8, 64)))
bias = dtensor.DVariable(dtensor.call_with_layout(
    tf.zeros, dtensor.Layout.replicated(mesh, 1), shape=(64,)))
slot = dtensor.DVariable(dtensor.call_with_layout(
    tf.zeros, dtensor.Layout([dtensor.UNSHARDED, "model"], mesh), shape=(8, 64)))
print(json.dumps({{"kernel": memory.bytes_by_device([kernel]),
                  "state": memory.measure([kernel, bias], [slot]).as_dict()}}))
"""

_MIRRORED = _PRELUDE + """
strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
with strategy.scope():
  kernel = tf.Variable(tf.zeros((8, 64)))
print(json.dumps({"kernel": memory.bytes_by_device([kernel]),
                  "state": memory.measure([kernel], []).as_dict()}))
"""


def _run(code: str) -> dict:
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=300, check=False)
  assert out.returncode == 0, out.stderr[-3000:]
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_column_sharded_kernel_holds_half_its_bytes_per_device_on_a_1x2_mesh():
  one, two = _run(_MESH.format(m=1)), _run(_MESH.format(m=2))
  full = 8 * 64 * 4
  assert list(one["kernel"].values()) == [full]
  assert sorted(two["kernel"].values()) == [full // 2, full // 2]
  assert len(two["kernel"]) == 2  # Two devices, each with its own shard.
  # State: 2 x (kernel shard + replicated bias) + the slot shard.
  assert one["state"] == {"param_count": 8 * 64 + 64, "param_bytes_total": full + 256,
                          "state_bytes_per_device": 2 * (full + 256) + full}
  assert two["state"]["state_bytes_per_device"] == 2 * (full // 2 + 256) + full // 2


@pytest.mark.slow
def test_mirrored_replicas_each_hold_a_full_copy():
  got = _run(_MIRRORED)
  assert sorted(got["kernel"].values()) == [8 * 64 * 4] * 2
  assert got["state"]["state_bytes_per_device"] == 2 * 8 * 64 * 4
