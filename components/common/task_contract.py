"""Recording the task contract (components/common/keys.py) on an artifact.

DistributedTrainer writes it on its Model and TrainingHistory; ConvergenceEvaluator reads
it back with ``convergence_evaluator.task.read_properties``.
"""
import json
from typing import Optional, Sequence

from tfx_parallel.components.common import keys

# An example without exactly one label value: skipped and counted (True, the default,
# as AutoGluon and H2O drop rows without a response and say how many), or an error naming
# the split and the file (False). The default of TrainerConfig's ``skip_missing_labels``;
# the evaluator follows what the trainer did (EvaluatorConfig ``skip_missing_labels``),
# and this default when nothing says.
SKIP_MISSING_LABELS = True
# More than this share of the scanned (train + eval) examples without a label fails the
# run even when they are skipped: a label that sparse is more likely the wrong column or
# a broken file. The default of TrainerConfig's ``max_missing_label_share``.
MAX_MISSING_LABEL_SHARE = 0.5


def recorded_num_classes(task: str, spec_num_classes: int) -> int:
  """The ``num_classes`` every artifact records: the number of classes (2 for binary,
  whose model has one logit), 1 for regression."""
  return 2 if task == "binary" else int(spec_num_classes)


def write_properties(artifact, task: str, num_classes: int,
                     label_vocabulary: Optional[Sequence[str]] = None):
  """Sets ``task``, ``num_classes`` and (string labels) ``label_vocabulary``."""
  if task not in keys.TASKS:
    raise ValueError(f"task must be one of {list(keys.TASKS)}. Received: {task!r}")
  artifact.set_string_custom_property(keys.TASK, task)
  artifact.set_int_custom_property(keys.NUM_CLASSES, recorded_num_classes(task, num_classes))
  if label_vocabulary is not None:
    artifact.set_string_custom_property(keys.LABEL_VOCABULARY,
                                        json.dumps(list(label_vocabulary)))
