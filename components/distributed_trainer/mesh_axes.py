"""The mesh's two axes, the one description of a model variable, and the one check that
the model axis divides what a layout splits (issue #39 item 10).

A mesh is ``batch`` x ``model`` (data parallel x tensor parallel). A layout splits a
variable's dimension over the ``model`` axis into M equal blocks, so M must divide that
dimension; :func:`undivided` is where that is decided, for the layout rules
(sharding.py: the default rules, and ``resolve`` of a user's rules), for the
built-in models' check before training (user_module.check_builtin_split, through
``sharding.unsplit_kernels``) and for the planner (plan/layout_search.py).
:func:`undivided_message` says it, naming the variable, its dimension and the axis.
The executor's pre-check (``user_module.check`` on the model built on a two-row batch)
calls it before any work starts; the batch axis is checked against the global batch in
config validation (``TrainerConfig.validate``).

Pure: no TensorFlow.
"""
import dataclasses
import math
from typing import Optional, Sequence, Tuple

BATCH_AXIS = "batch"
MODEL_AXIS = "model"

Sharding = Tuple[Optional[str], ...]

# What a variable is, for the default rules and the embedding check.
DENSE_KERNEL, DENSE_BIAS, EMBEDDING, OTHER = "dense_kernel", "dense_bias", "embedding", "other"


@dataclasses.dataclass(frozen=True)
class VariableInfo:
  """One model variable, as the layout rules and the planner see it.

  Attributes:
    path: the variable's name without ':0', e.g. "hidden_1/kernel" (what rules match).
    shape: its global shape.
    kind: DENSE_KERNEL | DENSE_BIAS | EMBEDDING | OTHER.
    layer: the owning layer's name (pairs a Dense kernel with its bias).
    dtype_bytes: bytes per element.
    sharding: per dimension, MODEL_AXIS where the layout splits it, else None (empty:
      not resolved yet, or replicated).
  """
  path: str
  shape: Tuple[int, ...]
  kind: str = OTHER
  layer: str = ""
  dtype_bytes: int = 4
  sharding: Sharding = ()

  @property
  def num_elements(self) -> int:
    return int(math.prod(self.shape))

  @property
  def split_dims(self) -> Tuple[int, ...]:
    return tuple(i for i, s in enumerate(self.sharding) if s == MODEL_AXIS)

  def bytes_per_device(self, model_axis: int) -> int:
    """Bytes of this variable on one device when the model axis has ``model_axis`` devices."""
    divisor = model_axis if self.split_dims and model_axis > 1 else 1
    return self.num_elements * self.dtype_bytes // divisor

  def divisible_by(self, model_axis: int) -> bool:
    """Whether ``model_axis`` divides every dimension its own ``sharding`` splits."""
    return undivided(self.shape, self.sharding, model_axis) is None


def undivided(shape: Sequence[int], sharding: Sharding, model_axis: int) -> Optional[int]:
  """The first dimension ``sharding`` splits over the model axis whose size
  ``model_axis`` does not divide; None when it divides every split dimension. The one
  divisibility check of a layout."""
  for dim, s in enumerate(sharding):
    if s is not None and shape[dim] % model_axis:
      return dim
  return None


def undivided_message(path: str, shape: Sequence[int], dim: int, model_axis: int) -> str:
  """What :func:`undivided` found, naming the variable, its dimension and the axis."""
  return (f"dimension {dim} of {path} {list(shape)} has size {shape[dim]}, which the "
          f"mesh's {MODEL_AXIS!r} axis of {model_axis} devices does not divide")
