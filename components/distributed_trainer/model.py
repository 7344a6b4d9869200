"""The models as plain parameter lists and one forward function.

The same `forward` runs on ordinary tensors (single / mirrored / multi_worker) and on
DTensors (mesh): the layouts in `layouts.py` decide where each parameter lives, and
DTensor's SPMD expansion turns the matmuls into the sharded math:

* linear: the kernel W [F, 1] is split by rows over the model axis; each device holds
  W_i and the matching feature columns X_i, computes X_i W_i, and the partial outputs
  are all-reduced into Y = Σ_i X_i W_i. The gradient of shard i is X_iᵀ ∂L/∂Y,
  computed where W_i lives.
* mlp (Megatron pattern): hidden kernels alternate column-sharded [F, H/M] and
  row-sharded [H/M, ...], so each pair needs one all-reduce.
"""
import dataclasses
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

# Sharding of a kernel over the model axis.
ROWS = "rows"      # W split along axis 0 (input features): partial sums, one all-reduce.
COLS = "cols"      # W split along axis 1 (output units): no communication.
REPLICATED = "replicated"


@dataclasses.dataclass(frozen=True)
class ParamSpec:
  name: str
  shape: tuple
  sharding: str  # ROWS | COLS | REPLICATED (for biases: COLS means split with outputs)


def param_specs(model: str, num_features: int,
                hidden_units: Sequence[int] = ()) -> List[ParamSpec]:
  """Names, shapes and model-axis sharding of every parameter, in order."""
  if model == "linear":
    return [ParamSpec("kernel", (num_features, 1), ROWS),
            ParamSpec("bias", (1,), REPLICATED)]
  widths = [num_features] + list(hidden_units) + [1]
  specs = []
  for i in range(len(widths) - 1):
    last = i == len(widths) - 2
    if i % 2 == 0 and not last:
      kernel, bias = COLS, COLS          # first of a pair: split outputs
    elif i % 2 == 1:
      kernel, bias = ROWS, REPLICATED    # second of a pair: split inputs, all-reduce
    else:
      kernel, bias = REPLICATED, REPLICATED
    specs.append(ParamSpec(f"kernel_{i}", (widths[i], widths[i + 1]), kernel))
    specs.append(ParamSpec(f"bias_{i}", (widths[i + 1],), bias))
  return specs


def init_params(specs: Sequence[ParamSpec], seed: int) -> Dict[str, np.ndarray]:
  """Deterministic initial values (zeros for the linear model, Glorot for the MLP)."""
  rng = np.random.default_rng(seed)
  values = {}
  for spec in specs:
    if spec.name.startswith("bias") or spec.name == "kernel":
      values[spec.name] = np.zeros(spec.shape, np.float32)
    else:
      limit = np.sqrt(6.0 / (spec.shape[0] + spec.shape[1]))
      values[spec.name] = rng.uniform(-limit, limit, spec.shape).astype(np.float32)
  return values


def forward(params: Sequence[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
  """params = [kernel_0, bias_0, kernel_1, bias_1, ...]; ReLU between layers."""
  h = x
  n = len(params) // 2
  for i in range(n):
    h = tf.matmul(h, params[2 * i]) + params[2 * i + 1]
    if i < n - 1:
      h = tf.nn.relu(h)
  return h


def mse(pred: tf.Tensor, y: tf.Tensor, global_batch: Optional[int] = None) -> tf.Tensor:
  """Mean squared error; with `global_batch`, a per-replica share of the global mean."""
  sq = tf.square(pred - y)
  if global_batch is None:
    return tf.reduce_mean(sq)
  return tf.reduce_sum(sq) / float(global_batch)


def numpy_forward(values: Dict[str, np.ndarray], specs: Sequence[ParamSpec],
                  x: np.ndarray) -> np.ndarray:
  """Reference forward in numpy (tests and evaluation of gathered weights)."""
  h = x
  n = len(specs) // 2
  for i in range(n):
    h = h @ values[specs[2 * i].name] + values[specs[2 * i + 1].name]
    if i < n - 1:
      h = np.maximum(h, 0)
  return h
