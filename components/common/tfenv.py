"""The one place that prepares TensorFlow for this project.

Importing this module changes nothing. Each ENTRY POINT calls :func:`prepare` before
TensorFlow is imported: the CLI (pipeline/cli.py), the training process
(distributed_trainer/run/train.py ``main``), the TFJob replica (distributed_trainer/replica.py ``main``), the
Kubeflow container (kubeflow/entrypoint.py ``main``) and each executor's ``Do``, so a
user's own pipeline script that imports our components keeps its environment as it was
until one of our executors runs. What :func:`prepare` sets:

* ``TF_USE_LEGACY_KERAS=1``: TF 2.16 defaults to Keras 3, but TFMA 0.47 and
  ``MultiWorkerMirroredStrategy`` need Keras 2 (``tf_keras``). A value the user set is
  kept; if it selects Keras 3, one line on stderr says so (:func:`prepare`);
* ``TF_CPP_MIN_LOG_LEVEL=2`` (C++ INFO and WARNING off) unless the user chose a level;
  :func:`defaulted` tells which variables were ours to set;
* ``CUDA_CACHE_PATH``, if set, is checked once: when the process cannot write there (a
  volume owned by root, see cuda_cache.py), CUDA is pointed at a writable directory and
  one line says so;
* ``DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION=0``, always (:data:`ENV_REQUIRED`;
  :func:`require_dtensor_env`): DTensor's pass that merges a function's all-reduces
  moves them and then re-sorts the block by data edges only, so a variable read can
  land before the write it followed (the mesh step's Adam update read m and v before
  their writes on a 2x1 mesh; mesh_runtime's module docstring);
* optionally splits the CPU into N logical devices (:func:`split_cpu`), so every
  layout (mirrored, mesh) is testable and runnable without a GPU.

The Kubeflow container sets the :data:`ENV_DEFAULTS` in its environment, because the TFX
container entrypoint imports TensorFlow before it imports our executors; the
:data:`ENV_REQUIRED` one is set by the processes that start DTensor (kubeflow/entrypoint.py
and the replica's main call :func:`prepare` first, and mesh_runtime.create_mesh again).

In a user's script ``tf.keras`` may already be Keras 3 when an executor's ``Do`` runs
(``from tfx import v1`` resolves it at import). That process needs no more: our code
imports ``tf_keras`` itself, and the user-module check rejects a model that is not a
tf_keras.Model by name. The processes our executors start (training) inherit the variable.
"""
import os
import sys

from tfx_parallel.components.common import cuda_cache

# Environment variables that must be set before TensorFlow is imported.
ENV_DEFAULTS = {
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}

# Set whatever the user chose: the mesh layout's steps are wrong without it. DTensor
# reads it once, when its device is made (tensorflow/dtensor/mlir/utils/
# dtensor_mlir_passes_internal.cc, TF 2.16: "0" skips
# CreateDTensorAllReduceCombineOptimization; dtensor_allreduce_combine_optimization.cc
# moves the all-reduces together, then ``mlir::sortTopologically`` on each block, which
# follows operands, not the order of resource reads and writes).
ENV_REQUIRED = {"DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION": "0"}

# The values TF 2.16 reads as "use tf_keras" (tensorflow/python/util/lazy_loader.py).
LEGACY_KERAS_VALUES = ("1", "true", "True")
_defaulted = set()
_WARNED_ENV = "TFX_PARALLEL_LEGACY_KERAS_WARNED"


def prepare(stream=None):
  """Sets the TensorFlow environment defaults; idempotent and cheap (no TF import).

  Never overwrites a variable the user set, except :data:`ENV_REQUIRED`. If
  ``TF_USE_LEGACY_KERAS`` selects Keras 3, writes one line to ``stream`` (default stderr), once per run (the processes
  it starts inherit a marker in the environment).
  """
  for key, value in ENV_DEFAULTS.items():
    if key not in os.environ:
      os.environ[key] = value
      _defaulted.add(key)
  require_dtensor_env()
  legacy = os.environ["TF_USE_LEGACY_KERAS"]
  # Said once per run: child processes (trainer, console filter) inherit the marker.
  if legacy not in LEGACY_KERAS_VALUES and not os.environ.get(_WARNED_ENV):
    os.environ[_WARNED_ENV] = "1"
    print(f"tfx-parallel: TF_USE_LEGACY_KERAS={legacy!r} selects Keras 3, but TFX 1.16, "
          f"TFMA and this project need tf_keras: unset it or set it to 1 (keeping "
          f"{legacy!r}).", file=stream or sys.stderr, flush=True)
  cuda_cache.prepare(stream=stream)


def require_dtensor_env():
  """Sets :data:`ENV_REQUIRED` (cheap, no TF import); must run before the first DTensor
  op of the process (mesh_runtime.create_mesh calls it too)."""
  os.environ.update(ENV_REQUIRED)


def defaulted():
  """Names of the environment variables :func:`prepare` set (the user had not)."""
  return frozenset(_defaulted)


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


def skip_tf_keras_autograph() -> bool:
  """Tells AutoGraph not to convert tf_keras's own code, as TF 2.16 already skips
  ``keras`` (``autograph/core/config.py``) but not the renamed ``tf_keras``.

  tf_keras's training functions are graph code already; converting them costs 10-25 s
  of AST rewriting on the first ``fit`` of every process here (measured on 2 cores: a
  3-step fit of a Dense layer took 26.5 s, 0.37 s with this rule). User code (a module's
  own layers) is still converted. Call after importing TensorFlow; idempotent. Returns
  False if this TensorFlow has no such rule list (nothing changed).
  """
  try:
    from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  rules = getattr(config, "CONVERSION_RULES", None)
  if rules is None:
    return False
  if not any(isinstance(r, config.DoNotConvert) and r.matches("tf_keras") for r in rules):
    config.CONVERSION_RULES = (config.DoNotConvert("tf_keras"),) + tuple(rules)
  return True


def gpus():
  """Physical GPUs visible to TensorFlow (empty on CPU-only machines)."""
  prepare()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.config.list_physical_devices("GPU")

