"""The task of the evaluated model, and its labels as class ids (pure; no TensorFlow).

The trainer records the task contract (components/common/keys.py) as custom properties
``task``, ``num_classes`` and ``label_vocabulary`` on both the Model and the
TrainingHistory artifact. :func:`resolve` picks the task from the Model, else the
history, else the evaluator config's ``task``, else regression; two sources that are set
and disagree are an error, never a silent choice.

:func:`class_ids` turns a batch of raw labels into class ids 0..K-1. Labels may be
stored as float_list (PartitionedExampleGen's float columns), int64_list (its int columns)
or bytes_list:

* numeric labels must be whole numbers in 0..K-1 (binary: 0 or 1) -- or, when the model
  has a ``label_vocabulary`` whose entries are all numbers, one of those numbers (mapped
  to its position);
* string labels are mapped through ``label_vocabulary`` by the encoding the trainer and
  the serving signature use (components/common/label_encoding.py); a model without one,
  or a label not in it, is an error naming the label and the split.
"""
import dataclasses
import json
import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from tfx_parallel.components.common import custom_properties
from tfx_parallel.components.common import keys
from tfx_parallel.components.common import label_encoding
from tfx_parallel.components.common.task_contract import write_properties  # noqa: F401  (re-export)

REGRESSION, BINARY, MULTICLASS = keys.TASKS


@dataclasses.dataclass(frozen=True)
class TaskInfo:
  """What to evaluate. ``num_classes``: 1 for regression, 2 for binary, K for multiclass
  (0: unknown, taken from the width of the model's ``probabilities``)."""
  task: str = REGRESSION
  num_classes: int = 1
  label_vocabulary: Optional[Tuple[str, ...]] = None
  source: str = "default"  # Where the task came from, for the log.

  @property
  def is_classification(self) -> bool:
    return self.task != REGRESSION

  def with_num_classes(self, num_classes: int) -> "TaskInfo":
    return dataclasses.replace(self, num_classes=num_classes)


def read_properties(artifact) -> Dict[str, Any]:
  """The contract properties an artifact has: a subset of task, num_classes,
  label_vocabulary (read as set, locally and on Kubeflow: custom_properties.py)."""
  out: Dict[str, Any] = {}
  if artifact is None:
    return out
  where = f"{artifact.type_name} artifact at {artifact.uri}"
  if artifact.has_custom_property(keys.TASK):
    out[keys.TASK] = str(custom_properties.value(artifact, keys.TASK))
  if artifact.has_custom_property(keys.NUM_CLASSES):
    value = custom_properties.value(artifact, keys.NUM_CLASSES)
    try:  # A float on Kubeflow (every number is a double there); whole numbers only.
      if float(value) != int(value):
        raise ValueError(value)
      out[keys.NUM_CLASSES] = int(value)
    except (TypeError, ValueError, OverflowError):
      raise ValueError(f"{where}: custom property {keys.NUM_CLASSES!r} must be an "
                       f"integer. Received: {value!r}") from None
  if artifact.has_custom_property(keys.LABEL_VOCABULARY):
    value = custom_properties.value(artifact, keys.LABEL_VOCABULARY)
    try:
      vocabulary = json.loads(value) if isinstance(value, str) else value
      vocabulary = list(vocabulary)
    except (TypeError, ValueError):
      raise ValueError(f"{where}: custom property {keys.LABEL_VOCABULARY!r} must be a "
                       f"JSON list of strings. Received: {value!r}") from None
    if not all(isinstance(v, str) for v in vocabulary):
      raise ValueError(f"{where}: custom property {keys.LABEL_VOCABULARY!r} must be a "
                       f"JSON list of strings. Received: {value!r}")
    out[keys.LABEL_VOCABULARY] = tuple(vocabulary)
  return out


def resolve(model: Dict[str, Any], history: Dict[str, Any],
            config_task: Optional[str] = None, model_where: str = "Model",
            history_where: str = "TrainingHistory") -> TaskInfo:
  """The task to evaluate from the Model's and history's contract properties and config.

  Args:
    model: :func:`read_properties` of the Model artifact.
    history: :func:`read_properties` of the TrainingHistory artifact.
    config_task: the evaluator config's ``task`` (None: not set).
    model_where, history_where: how errors name the two artifacts.
  """
  sources = [(model_where, model.get(keys.TASK)), (history_where, history.get(keys.TASK)),
             ("evaluator config key 'task'", config_task)]
  given = [(where, task) for where, task in sources if task is not None]
  for where, task in given:
    if task not in keys.TASKS:
      raise ValueError(f"{where}: task must be one of {list(keys.TASKS)}. "
                       f"Received: {task!r}")
  if len({task for _, task in given}) > 1:
    raise ValueError("the task sources disagree: " +
                     ", ".join(f"{where} says {task!r}" for where, task in given) +
                     "; make evaluator.task agree with the model's, or unset it "
                     "(set evaluator.task=null)")
  task, source = (given[0][1], given[0][0]) if given else (REGRESSION, "default")
  # num_classes and the vocabulary come with the task: from the Model unless only the
  # history names a task.
  contract = history if history.get(keys.TASK) and not model.get(keys.TASK) else model
  vocabulary = contract.get(keys.LABEL_VOCABULARY)
  num_classes = contract.get(keys.NUM_CLASSES)
  where = model_where if contract is model else history_where
  if task == REGRESSION:
    return TaskInfo(REGRESSION, 1, None, source)
  if task == BINARY:
    if num_classes not in (None, 1, 2):
      raise ValueError(f"{where}: a binary model has num_classes 1 (one logit). "
                       f"Received: {num_classes!r}")
    if vocabulary is not None and len(vocabulary) != 2:
      raise ValueError(f"{where}: a binary model's label_vocabulary has 2 entries. "
                       f"Received: {list(vocabulary)!r}")
    return TaskInfo(BINARY, 2, vocabulary, source)
  if num_classes is not None and num_classes < 2:
    raise ValueError(f"{where}: a multiclass model has num_classes >= 2. "
                     f"Received: {num_classes!r}")
  if vocabulary is not None and num_classes is not None and len(vocabulary) != num_classes:
    raise ValueError(f"{where}: label_vocabulary has {len(vocabulary)} entries but "
                     f"num_classes is {num_classes}")
  k = num_classes or (len(vocabulary) if vocabulary is not None else 0)
  return TaskInfo(MULTICLASS, k, vocabulary, source)


def _numeric_vocabulary(vocabulary: Optional[Sequence[str]]) -> Optional[np.ndarray]:
  """The vocabulary as float64 if every entry is a finite number, else None."""
  if vocabulary is None:
    return None
  try:
    values = np.array([float(v) for v in vocabulary], np.float64)
  except ValueError:
    return None
  return values if np.all(np.isfinite(values)) else None


def class_ids(labels: np.ndarray, info: TaskInfo, label_key: str, where: str) -> np.ndarray:
  """Class ids (int64 [N]) of raw labels (float, int or bytes [N]); raises on a bad label.

  ``where`` names the data (e.g. "split 'eval' of /path") in errors.
  """
  labels = np.asarray(labels).reshape(-1)
  k = info.num_classes
  if labels.dtype.kind in "SOU":  # Strings: through the vocabulary.
    if info.label_vocabulary is None:
      raise ValueError(
          f"label {label_key!r} in {where} holds strings (e.g. {_show(labels[0])}) but the "
          f"model has no {keys.LABEL_VOCABULARY!r} property to map them to class ids")
    index = {name.encode(): i
             for name, i in label_encoding.class_index(info.label_vocabulary).items()}
    unique, inverse = np.unique(labels.astype(object), return_inverse=True)
    mapped = np.empty(unique.size, np.int64)
    for j, value in enumerate(unique):
      key = value if isinstance(value, bytes) else str(value).encode()
      if key not in index:
        raise ValueError(f"label {label_key!r} in {where} has the value {_show(value)}, "
                         f"which is not in the model's label_vocabulary "
                         f"{list(info.label_vocabulary)!r}")
      mapped[j] = index[key]
    return mapped[inverse]
  values = labels.astype(np.float64)
  numeric = _numeric_vocabulary(info.label_vocabulary)
  if numeric is not None:
    found = values[:, None] == numeric[None, :]
    bad = ~found.any(axis=1)
    if bad.any():
      raise ValueError(f"label {label_key!r} in {where} has the value {values[bad][0]:g}, "
                       f"which is not in the model's label_vocabulary "
                       f"{list(info.label_vocabulary)!r}")
    return found.argmax(axis=1).astype(np.int64)
  whole = np.isfinite(values) & (values == np.round(values))
  in_range = whole & (values >= 0) & (values < k) if k else whole & (values >= 0)
  if not in_range.all():
    bad = values[~in_range][0]
    expected = "0 or 1" if info.task == BINARY else (f"0..{k - 1}" if k else ">= 0")
    raise ValueError(f"label {label_key!r} in {where} has the value {bad:g}; a {info.task} "
                     f"label must be a whole number {expected} (or a string in the "
                     f"model's label_vocabulary)")
  return values.astype(np.int64)


def _show(value) -> str:
  if isinstance(value, bytes):
    return repr(value.decode("utf-8", "replace"))
  if isinstance(value, float) and math.isfinite(value):
    return f"{value:g}"
  return repr(value)
