"""pipeline/tfenv.py: AutoGraph leaves tf_keras's own code alone, and only it."""
from tfx_parallel.pipeline import tfenv

import tf_keras
from tensorflow.python.autograph.core import config
from tensorflow.python.autograph.impl import conversion


def _user_function(x):
  return x


def test_autograph_skips_tf_keras_but_still_converts_user_code():
  assert tfenv.skip_tf_keras_autograph() is True
  assert tfenv.skip_tf_keras_autograph() is True  # idempotent: one rule, not two
  rules = [r for r in config.CONVERSION_RULES
           if isinstance(r, config.DoNotConvert) and r.matches("tf_keras")]
  assert len(rules) == 1
  assert conversion.is_allowlisted(tf_keras.layers.Dense.call)
  assert conversion.is_allowlisted(tf_keras.Model.train_step)
  assert not conversion.is_allowlisted(_user_function)
