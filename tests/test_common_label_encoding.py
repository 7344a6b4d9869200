"""The one label encoding (components/common/label_encoding.py) and the lines that show it."""
import pytest

from tfx_parallel.components.common import label_encoding
from tfx_parallel.components.common.run_history import RunHistory
from tfx_parallel.components.distributed_trainer.executor import label_summary
from tfx_parallel.pipeline import summary


def test_classes_are_sorted_and_a_class_id_is_the_position():
  vocabulary = label_encoding.vocabulary(["Gentoo", "Adelie", "Chinstrap", "Adelie"])
  assert vocabulary == ("Adelie", "Chinstrap", "Gentoo")
  assert label_encoding.class_index(vocabulary) == {"Adelie": 0, "Chinstrap": 1, "Gentoo": 2}
  assert label_encoding.class_names(3, vocabulary) == vocabulary
  assert label_encoding.class_names(2) == ("0", "1")
  with pytest.raises(ValueError, match=r"label_vocabulary has 2 entries for 3 classes. "
                                       r"Received: \['a', 'b'\]"):
    label_encoding.class_names(3, ["a", "b"])


def test_classes_without_train_examples_are_found_per_split():
  counts = {"train": {"a": 3, "b": 1}, "eval": {"a": 1, "c": 2}, "test": {"c": 1, "d": 4}}
  assert label_encoding.unseen_in_train(counts, "train") == {
      "c": {"eval": 2, "test": 1}, "d": {"test": 4}}
  assert label_encoding.unseen_in_train({"train": {"a": 1}}, "train") == {}


def test_the_console_and_summary_lines_name_classes_counts_and_skipped_labels():
  counts = {"train": {"Adelie": 123, "Chinstrap": 51, "Gentoo": 103}, "eval": {"Adelie": 29}}
  assert label_summary(counts, "train") == (
      "label classes in 'train': Adelie 123 (44%), Gentoo 103 (37%), Chinstrap 51 (18%)")
  record = RunHistory(label_counts=counts, missing_labels={
      "count": 8, "rows": 406, "share": 0.019704, "splits": {"train": 7, "eval": 1},
      "policy": "skip"}, label_classes_not_in_train={"Emperor": {"eval": 2}})
  assert summary._labels(record) == (  # pylint: disable=protected-access
      "3 classes in train (Adelie 123, Chinstrap 51, Gentoo 103); 8 of 406 examples "
      "without a label (2.0%) skipped; not in train: Emperor")
  assert summary._labels(RunHistory()) == ""  # pylint: disable=protected-access
