"""The task contract as the evaluator reads it: sources, conflicts, labels -> class ids."""
import json

import numpy as np
import pytest

from tfx.types import standard_artifacts

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator import task as task_lib
from tfx_parallel.components.convergence_evaluator.task import TaskInfo


def _model(**props):
  model = standard_artifacts.Model()
  model.uri = "/models/1"
  for name, value in props.items():
    if isinstance(value, int):
      model.set_int_custom_property(name, value)
    else:
      model.set_string_custom_property(name, value)
  return model


def test_model_then_history_then_config_then_regression():
  binary = {keys.TASK: "binary", keys.NUM_CLASSES: 1}
  multi = {keys.TASK: "multiclass", keys.NUM_CLASSES: 3,
           keys.LABEL_VOCABULARY: ("a", "b", "c")}
  assert task_lib.resolve(binary, {}, None) == TaskInfo("binary", 2, None, "Model")
  assert task_lib.resolve({}, multi, None) == TaskInfo("multiclass", 3, ("a", "b", "c"),
                                                       "TrainingHistory")
  assert task_lib.resolve(multi, multi, "multiclass").source == "Model"
  info = task_lib.resolve({}, {}, "multiclass")
  assert info == TaskInfo("multiclass", 0, None, "evaluator config key 'task'")
  assert task_lib.resolve({}, {}, None) == TaskInfo("regression", 1, None, "default")


def test_disagreeing_sources_are_an_error_naming_each():
  with pytest.raises(ValueError, match=r"Model says 'binary', TrainingHistory says "
                                       r"'multiclass'"):
    task_lib.resolve({keys.TASK: "binary"}, {keys.TASK: "multiclass"}, None)
  with pytest.raises(ValueError, match=r"evaluator config key 'task' says 'regression'"):
    task_lib.resolve({keys.TASK: "binary"}, {}, "regression")
  with pytest.raises(ValueError, match=r"Model: task must be one of .* Received: 'ranking'"):
    task_lib.resolve({keys.TASK: "ranking"}, {}, None)


def test_inconsistent_contract_is_rejected():
  with pytest.raises(ValueError, match="binary model has num_classes 1"):
    task_lib.resolve({keys.TASK: "binary", keys.NUM_CLASSES: 3}, {}, None)
  with pytest.raises(ValueError, match="label_vocabulary has 2 entries but num_classes is 3"):
    task_lib.resolve({keys.TASK: "multiclass", keys.NUM_CLASSES: 3,
                      keys.LABEL_VOCABULARY: ("a", "b")}, {}, None)


def test_properties_round_trip_through_an_artifact_and_bad_ones_name_the_artifact():
  history = artifacts.TrainingHistory()
  history.uri = "/history/7"
  task_lib.write_properties(history, "multiclass", 3, ["x", "y", "z"])
  assert task_lib.read_properties(history) == {
      keys.TASK: "multiclass", keys.NUM_CLASSES: 3, keys.LABEL_VOCABULARY: ("x", "y", "z")}
  assert task_lib.read_properties(_model()) == {}  # A model from before the contract.
  with pytest.raises(ValueError, match=r"Model artifact at /models/1: .*label_vocabulary"):
    task_lib.read_properties(_model(**{keys.LABEL_VOCABULARY: "[1, 2"}))
  with pytest.raises(ValueError, match=r"label_vocabulary.*list of strings"):
    task_lib.read_properties(_model(**{keys.LABEL_VOCABULARY: json.dumps([1, 2])}))


def test_numeric_labels_of_any_stored_type_become_class_ids():
  binary = TaskInfo("binary", 2)
  assert task_lib.class_ids(np.array([0.0, 1.0, 1.0], np.float32), binary, "y", "s").tolist() \
      == [0, 1, 1]
  multi = TaskInfo("multiclass", 3)
  ids = task_lib.class_ids(np.array([2, 0, 1], np.int64), multi, "y", "s")
  assert ids.dtype == np.int64 and ids.tolist() == [2, 0, 1]
  with pytest.raises(ValueError, match=r"label 'y' in split 'eval' has the value 0.5; a "
                                       r"binary label must be a whole number 0 or 1"):
    task_lib.class_ids(np.array([0.0, 0.5]), binary, "y", "split 'eval'")
  with pytest.raises(ValueError, match=r"value 3; a multiclass label must be a whole "
                                       r"number 0\.\.2"):
    task_lib.class_ids(np.array([3]), multi, "y", "s")
  with pytest.raises(ValueError, match="value nan"):
    task_lib.class_ids(np.array([np.nan]), binary, "y", "s")


def test_string_labels_go_through_the_vocabulary():
  info = TaskInfo("multiclass", 3, ("cat", "dog", "emu"))
  labels = np.array([b"emu", b"cat", b"emu", b"dog"], object)
  assert task_lib.class_ids(labels, info, "animal", "s").tolist() == [2, 0, 2, 1]
  with pytest.raises(ValueError, match=r"value 'yak', which is not in the model's "
                                       r"label_vocabulary \['cat', 'dog', 'emu'\]"):
    task_lib.class_ids(np.array([b"cat", b"yak"], object), info, "animal", "s")
  with pytest.raises(ValueError, match=r"holds strings \(e.g. 'cat'\) but the model has no "
                                       r"'label_vocabulary'"):
    task_lib.class_ids(np.array([b"cat"], object),
                       TaskInfo("multiclass", 3), "animal", "s")


def test_numeric_labels_with_a_numeric_vocabulary_are_mapped_through_it():
  info = TaskInfo("multiclass", 3, ("1", "2", "5"))
  assert task_lib.class_ids(np.array([5.0, 1.0, 2.0]), info, "y", "s").tolist() == [2, 0, 1]
  with pytest.raises(ValueError, match=r"value 3, which is not in the model's "
                                       r"label_vocabulary"):
    task_lib.class_ids(np.array([3.0]), info, "y", "s")
