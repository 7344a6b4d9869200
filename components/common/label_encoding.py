"""The one encoding of a class label: class name <-> class id (pure; no TensorFlow).

Every component that turns a label into a class id, or a class id back into a name, goes
through here, so training, evaluation and serving cannot disagree:

* the trainer's scan builds the ``label_vocabulary`` with :func:`vocabulary` (model_spec
  .infer_task) and its input pipeline looks the label up at :func:`class_index` positions
  (inputs/preprocess.py);
* the exported serving signatures return :func:`class_names` as ``classes``
  (run/export.py);
* ConvergenceEvaluator maps the eval labels with :func:`class_index`
  (convergence_evaluator/task.py).

The rule: a string label's classes are its distinct values over the train and
eval splits, **sorted** (Python's order of the str values: by code point), and a class id
is the position in that list. A numeric label's class ids are the numbers themselves
(0/1, 0..K-1); its class names are their decimal text, "0", "1", ...
"""
from typing import Dict, Iterable, Mapping, Optional, Sequence, Tuple


def vocabulary(values: Iterable[str]) -> Tuple[str, ...]:
  """The sorted distinct class names of a string label (class id = position)."""
  return tuple(sorted({str(v) for v in values}))


def class_index(label_vocabulary: Sequence[str]) -> Dict[str, int]:
  """Class name -> class id."""
  return {name: i for i, name in enumerate(label_vocabulary)}


def class_names(num_classes: int, label_vocabulary: Optional[Sequence[str]] = None
                ) -> Tuple[str, ...]:
  """The name of each class id 0..num_classes-1: the vocabulary, else "0", "1", ..."""
  if label_vocabulary is not None:
    if len(label_vocabulary) != num_classes:
      raise ValueError(f"label_vocabulary has {len(label_vocabulary)} entries for "
                       f"{num_classes} classes. Received: {list(label_vocabulary)!r}")
    return tuple(str(v) for v in label_vocabulary)
  return tuple(str(i) for i in range(num_classes))


def unseen_in_train(counts: Mapping[str, Mapping[str, int]], train_split: str
                    ) -> Dict[str, Dict[str, int]]:
  """Classes with examples in another split but none in ``train_split``: class ->
  {split: count}. ``counts``: split -> class -> examples (the scan's label counts)."""
  train = counts.get(train_split) or {}
  out: Dict[str, Dict[str, int]] = {}
  for split, per_class in counts.items():
    if split == train_split:
      continue
    for name, n in per_class.items():
      if n and not train.get(name):
        out.setdefault(name, {})[split] = int(n)
  return dict(sorted(out.items()))
