"""A classifier's label with one class fails before training (reviewer's defect: the first 7
rows of scikit-learn's iris, ``target`` all 0, trained as "binary" and reported AUC -1).

The check is model_spec.check_classes (pure), on the per-split label counts the trainer's
one scan already keeps; the executor turns it into a ConfigError on the label setting that
names the file, so ``tfx-parallel run`` exits 2. A regression label is not checked."""
import pytest

from tfx_parallel.components.distributed_trainer import model_spec as ms


def _label(kind, **splits):
  """LabelStats as the scan fills it: split -> {value: examples}."""
  stats = ms.LabelStats(kind)
  for split, counts in splits.items():
    stats.add(list(counts), list(counts.values()), split=split)
  return stats


def test_one_class_in_all_the_data_names_the_label_value_rows_and_fixes():
  label = _label("float", train={0.0: 4}, eval={0.0: 3})
  with pytest.raises(ms.SingleClassError) as raised:
    ms.check_classes(label, "target", "binary", "train", inferred=True)
  text = str(raised.value)
  assert "label 'target' has a single value [0] in all 7 rows (train 4, eval 3)" in text
  assert "task binary, inferred from the label" in text
  for fix in ("Use the whole file", "set example_gen.label=<column>",
              "set trainer.task=regression"):
    assert fix in text
  assert raised.value.split is None


def test_one_string_class_is_the_same_error_without_the_regression_fix():
  label = _label("bytes", train={"Adelie": 5}, eval={"Adelie": 2})
  with pytest.raises(ms.SingleClassError, match=r"single value \['Adelie'\] in all 7 rows") \
      as raised:
    ms.infer_task(label, "species")  # Inference itself refuses one string class.
  assert "trainer.task=regression" not in str(raised.value)


def test_one_class_in_the_train_split_only_names_the_split_and_its_rows():
  label = _label("float", train={1.0: 4}, eval={0.0: 2, 1.0: 1})
  with pytest.raises(ms.SingleClassError) as raised:
    ms.check_classes(label, "target", "binary", "train")
  text = str(raised.value)
  assert ("the 'train' split has a single value [1] of label 'target' in its 4 rows, "
          "while all the data has 2 classes (0: 2 rows, 1: 5 rows)") in text
  assert "set example_gen.seed=<n>" in text
  assert raised.value.split == "train"


def test_a_configured_multiclass_task_is_checked_too():
  label = _label("float", train={2.0: 4}, eval={2.0: 1})
  task, k, _ = ms.infer_task(label, "y", "multiclass")  # 0..2: three classes, one seen.
  assert (task, k) == ("multiclass", 3)
  with pytest.raises(ms.SingleClassError, match=r"task multiclass\)"):
    ms.check_classes(label, "y", task, "train")


@pytest.mark.parametrize("label,task", [
    (_label("float", train={0.0: 4}, eval={0.0: 3}), "regression"),  # a constant: allowed
    (_label("float", train={0.0: 3, 1.0: 1}, eval={0.0: 3}), "binary"),  # eval: evaluator's
    (_label("bytes", train={"a": 3, "b": 1}, eval={"a": 1}), "binary"),
])
def test_two_train_classes_or_a_regression_pass(label, task):
  ms.check_classes(label, "y", task, "train")


def test_the_executor_names_the_file_and_the_row_split_for_a_train_split_of_one_class(
    tmp_path):
  """Real Examples (gzip TFRecords) through executor.prepare, the trainer's one scan."""
  from tfx_parallel.components.common.config_util import ConfigError  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run.train import Job  # pylint: disable=g-import-not-at-top
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / "ex")
  tu.write_rows(root, ["x"], "y", [[0.1], [0.2], [0.3], [0.4]], [0, 0, 0, 0],
                [[0.5], [0.6]], [0, 1])
  job = Job(**tu.job_dict(str(tmp_path), root, ["x"], 4))
  with pytest.raises(ConfigError) as raised:
    executor.prepare(job, TrainerConfig(layout="single"), source="data/tiny.csv")
  assert raised.value.key == "example_gen.seed"
  assert raised.value.message.startswith(
      "data/tiny.csv: the 'train' split has a single value [0] of label 'y' in its 4 rows")


@pytest.mark.slow
def test_the_first_rows_of_iris_stop_the_cli_with_exit_2_before_training(tmp_path):
  """The reviewer's command: 7 rows, ``target`` all 0 (scikit-learn's iris is sorted)."""
  import sklearn.datasets  # pylint: disable=g-import-not-at-top
  from test_pipeline_console import _cli  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "iris7.csv")
  sklearn.datasets.load_iris(as_frame=True).frame.head(7).to_csv(path)
  home = tmp_path / "home"
  proc = _cli(home, "--no-cache", "--data", path, "--label", "target", "--layout", "mesh",
              "--mesh", "2x2", "--epochs", "2")
  assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert (f"tfx-parallel: invalid config: example_gen.label: {path}: label 'target' has a "
          f"single value [0] in all 7 rows (train 4, eval 3)") in proc.stderr
  assert "add --set trainer.task=regression" in proc.stderr
  assert "[set with --label or --set example_gen.label=...]" in proc.stderr
  assert "[trainer] step" not in proc.stdout and "ConvergenceEvaluator" not in proc.stdout
