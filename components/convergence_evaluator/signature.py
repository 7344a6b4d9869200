"""Which outputs of a model's serving signature the evaluator reads, and the task they imply.

DistributedTrainer's models return the contract outputs (components/common/keys.py):
``predictions`` (regression) or ``probabilities`` + ``logits`` (classification). A model
from the stock Trainer returns whatever its ``run_fn`` exported, typically one output
(``outputs``, ``output_0`` ...). :func:`output_map` reads such a signature so:

* the contract outputs, when present, are used as they are;
* otherwise config ``prediction_key`` names the output, or the signature has exactly one
  float output; for regression it is the prediction ([N] or [N, 1]); for a classifier it
  is read as probabilities ([N, 1] = P(class 1) for binary, [N, K] for multiclass) and
  the logits are derived from them (log-odds / log, clipped at 1e-7);
* without a task from the artifacts or config, the signature decides: ``probabilities``
  of width 1 is binary, of width K multiclass; anything else is regression.
"""
import dataclasses
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from tfx_parallel.components.common import keys

REGRESSION, BINARY, MULTICLASS = keys.TASKS
EPSILON = 1e-7


@dataclasses.dataclass(frozen=True)
class OutputSpec:
  dtype: str                      # e.g. "float32"
  shape: Tuple[Optional[int], ...]


@dataclasses.dataclass(frozen=True)
class OutputMap:
  """Signature output names for the task's values (see the module docstring)."""
  prediction: Optional[str] = None     # regression
  probabilities: Optional[str] = None  # classification
  logits: Optional[str] = None         # None: derived from the probabilities

  @property
  def names(self) -> Tuple[str, ...]:
    return tuple(n for n in (self.prediction, self.probabilities, self.logits) if n)

  def values(self, result: Mapping[str, np.ndarray], task: str) -> Dict[str, np.ndarray]:
    """{'predictions'} or {'probabilities', 'logits'} (contract names) of one batch."""
    if task == REGRESSION:
      return {keys.PREDICTIONS_OUTPUT: np.asarray(result[self.prediction])}
    p = np.asarray(result[self.probabilities], np.float64)
    if self.logits:
      logits = np.asarray(result[self.logits])
    else:
      q = np.clip(p, EPSILON, 1.0 - EPSILON)
      logits = np.log(q) - np.log1p(-q) if task == BINARY else np.log(q)
    return {keys.PROBABILITIES_OUTPUT: p, keys.LOGITS_OUTPUT: logits}


def read(model_dir: str) -> Dict[str, OutputSpec]:
  """The outputs of the SavedModel's serving signature (name -> dtype, shape)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  loaded = tf.saved_model.load(model_dir)
  if keys.SERVING_SIGNATURE not in loaded.signatures:
    raise ValueError(f"the SavedModel at {model_dir} has no {keys.SERVING_SIGNATURE!r} "
                     f"signature; it has {sorted(loaded.signatures)}")
  outputs = loaded.signatures[keys.SERVING_SIGNATURE].structured_outputs
  return {name: OutputSpec(spec.dtype.name, tuple(spec.shape.as_list()))
          for name, spec in outputs.items()}


def width(spec: OutputSpec) -> int:
  """Values per example: 1 for [N] or [N, 1], K for [N, K] (0: unknown)."""
  if len(spec.shape) <= 1:
    return 1
  return int(spec.shape[-1] or 0)


def infer_task(outputs: Mapping[str, OutputSpec]) -> Tuple[str, int]:
  """(task, num_classes) from the signature alone (module docstring)."""
  if keys.PROBABILITIES_OUTPUT in outputs:
    k = width(outputs[keys.PROBABILITIES_OUTPUT])
    return (BINARY, 2) if k == 1 else (MULTICLASS, k)
  return REGRESSION, 1


def _single(outputs: Mapping[str, OutputSpec], prediction_key: Optional[str],
            model_dir: str) -> str:
  if prediction_key is not None:
    if prediction_key not in outputs:
      raise ValueError(f"prediction_key: the {keys.SERVING_SIGNATURE!r} signature of "
                       f"{model_dir} has no output {prediction_key!r}; it returns "
                       f"{sorted(outputs)}. Received: {prediction_key!r}")
    return prediction_key
  floats = sorted(n for n, s in outputs.items() if s.dtype.startswith(("float", "half",
                                                                      "bfloat")))
  if len(floats) != 1:
    raise ValueError(f"prediction_key: the {keys.SERVING_SIGNATURE!r} signature of "
                     f"{model_dir} returns {sorted(outputs)}, not the contract outputs and "
                     f"not exactly one float output; name the one that holds the "
                     f"prediction (set evaluator.prediction_key="
                     f"{(floats or sorted(outputs) or ['NAME'])[0]}). Received: None")
  return floats[0]


def output_map(outputs: Mapping[str, OutputSpec], task: str,
               prediction_key: Optional[str] = None, model_dir: str = "the model"
               ) -> OutputMap:
  """The outputs to read for ``task`` (module docstring)."""
  if task == REGRESSION:
    if prediction_key is None and keys.PREDICTIONS_OUTPUT in outputs:
      return OutputMap(prediction=keys.PREDICTIONS_OUTPUT)
    return OutputMap(prediction=_single(outputs, prediction_key, model_dir))
  if (prediction_key in (None, keys.PROBABILITIES_OUTPUT)
      and keys.PROBABILITIES_OUTPUT in outputs and keys.LOGITS_OUTPUT in outputs):
    return OutputMap(probabilities=keys.PROBABILITIES_OUTPUT, logits=keys.LOGITS_OUTPUT)
  name = _single(outputs, prediction_key, model_dir)
  k = width(outputs[name])
  if task == BINARY and k != 1:
    raise ValueError(f"output {name!r} of {model_dir} has shape {list(outputs[name].shape)}; "
                     f"a binary model's output is P(class 1), [N] or [N, 1]")
  return OutputMap(probabilities=name)
