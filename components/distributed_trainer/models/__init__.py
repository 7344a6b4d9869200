"""Built-in model modules (``linear``, ``mlp``): ordinary user modules of the contract in
user_module.py, shipped with the package, plus :func:`inputs`, a helper users may reuse."""
from typing import Dict

from tfx_parallel.components.distributed_trainer import model_spec as ms


def inputs(spec: ms.ModelSpec) -> Dict[str, "tf_keras.Input"]:
  """One tf_keras.Input per feature, keyed and named by feature name (float32 for float
  features; int64 for int64 features and string ids)."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  return {f.name: tf_keras.Input(shape=f.shape, name=f.name,
                                 dtype="float32" if f.dtype == ms.FLOAT32 else "int64")
          for f in spec.features}


def numeric_block(spec: ms.ModelSpec, inputs_: Dict):
  """The numeric features concatenated as float32 [B, F] (None without any)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  parts = [inputs_[f.name] if f.dtype == ms.FLOAT32 else tf.cast(inputs_[f.name], tf.float32)
           for f in spec.numeric_features]
  if not parts:
    return None
  return parts[0] if len(parts) == 1 else tf_keras.layers.Concatenate(name="numeric")(parts)
