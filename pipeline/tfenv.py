"""The one place that prepares TensorFlow for this project.

Import this module (or any ``tfx_parallel`` package, whose ``__init__`` calls
:func:`prepare`) before TensorFlow is imported:

* ``TF_USE_LEGACY_KERAS=1``: TF 2.16 defaults to Keras 3, but TFMA 0.47 and
  ``MultiWorkerMirroredStrategy`` need Keras 2 (``tf_keras``);
* quiets TensorFlow's C++ and absl log noise unless the user already chose a level;
* optionally splits the CPU into N logical devices (:func:`split_cpu`), so every
  layout (mirrored, mesh) is testable and runnable without a GPU.

The Kubeflow container sets the same variables in its environment, because the TFX
container entrypoint imports TensorFlow before it imports our executors.
"""
import os

# Environment variables that must be set before TensorFlow is imported.
ENV_DEFAULTS = {
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


def prepare():
  """Sets the TensorFlow environment defaults; idempotent and cheap (no TF import)."""
  for key, value in ENV_DEFAULTS.items():
    os.environ.setdefault(key, value)
  # TF_USE_LEGACY_KERAS must win even when a user set it to something else:
  # the whole project is written against tf_keras.
  os.environ["TF_USE_LEGACY_KERAS"] = "1"


def split_cpu(num_devices: int) -> int:
  """Splits the first physical CPU into ``num_devices`` logical devices.

  Must run before any TensorFlow op executes. Returns the number of logical CPU
  devices afterwards. Calling it again with the same count is a no-op; asking for a
  different count after TensorFlow initialised raises a RuntimeError naming the count.
  """
  if num_devices < 1:
    raise ValueError(f"devices must be >= 1. Received: devices={num_devices}")
  prepare()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  cpus = tf.config.list_physical_devices("CPU")
  current = tf.config.get_logical_device_configuration(cpus[0])
  if current is not None and len(current) == num_devices:
    return num_devices
  try:
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration()] * num_devices)
  except RuntimeError as e:
    have = len(tf.config.list_logical_devices("CPU"))
    if have == num_devices:
      return have
    raise RuntimeError(
        f"Cannot split the CPU into devices={num_devices}: TensorFlow is already "
        f"initialised with {have} logical CPU device(s). Split before any op runs "
        f"(each layout runs in its own process)."
    ) from e
  return len(tf.config.list_logical_devices("CPU"))


def gpus():
  """Physical GPUs visible to TensorFlow (empty on CPU-only machines)."""
  prepare()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.config.list_physical_devices("GPU")


prepare()
