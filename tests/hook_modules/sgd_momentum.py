"""Hook: SGD with momentum 0.5."""
import tf_keras

from hook_modules.model import build_model  # noqa: F401  pylint: disable=unused-import


def optimizer(spec):
  del spec
  return tf_keras.optimizers.SGD(0.05, momentum=0.5)
