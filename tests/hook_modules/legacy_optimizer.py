"""Hook: a legacy optimizer, which DTensor cannot place: the mesh must refuse it."""
import tf_keras

from hook_modules.model import build_model  # noqa: F401  pylint: disable=unused-import


def optimizer(spec):
  del spec
  return tf_keras.optimizers.legacy.SGD(0.05)
