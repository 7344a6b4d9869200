"""Hook: Adam with an ExponentialDecay learning-rate schedule."""
import tf_keras

from hook_modules.model import build_model  # noqa: F401  pylint: disable=unused-import


def optimizer(spec):
  del spec
  schedule = tf_keras.optimizers.schedules.ExponentialDecay(0.05, decay_steps=2, decay_rate=0.5)
  return tf_keras.optimizers.Adam(schedule)
