"""Functional optimizers over a list of variables (layout-agnostic).

State variables are created by the layout next to their parameter (same device or
same DTensor layout), so the update rule is identical under every layout, which is
what the parity tests rely on.
"""
from typing import Dict, List, Sequence

import tensorflow as tf

# State slots each optimizer needs per parameter.
SLOTS = {"sgd": (), "momentum": ("m",), "adam": ("m", "v")}
MOMENTUM = 0.9
BETA1, BETA2, EPSILON = 0.9, 0.999, 1e-7


def apply(name: str, params: Sequence[tf.Variable], grads: Sequence[tf.Tensor],
          slots: Dict[str, List[tf.Variable]], lr: float, t: tf.Tensor):
  """Updates params in place. `t` is the 1-based step (float scalar) for Adam.

  New slot values are used as values, never re-read from the slot variable after
  the write: under DTensor the read-after-assign on a sharded slot is not ordered.
  """
  if name == "sgd":
    for p, g in zip(params, grads):
      p.assign_sub(lr * g)
  elif name == "momentum":
    for p, g, m in zip(params, grads, slots["m"]):
      m_new = MOMENTUM * m + g
      m.assign(m_new)
      p.assign_sub(lr * m_new)
  elif name == "adam":
    c1 = 1.0 - tf.pow(BETA1, t)
    c2 = 1.0 - tf.pow(BETA2, t)
    for p, g, m, v in zip(params, grads, slots["m"], slots["v"]):
      m_new = BETA1 * m + (1.0 - BETA1) * g
      v_new = BETA2 * v + (1.0 - BETA2) * tf.square(g)
      m.assign(m_new)
      v.assign(v_new)
      p.assign_sub(lr * (m_new / c1) / (tf.sqrt(v_new / c2) + EPSILON))
  else:
    raise ValueError(f"optimizer: unknown optimizer {name!r}")
