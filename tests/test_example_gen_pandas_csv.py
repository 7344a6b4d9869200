"""Issue 47, ingest side: CSVs as pandas' ``df.to_csv()`` writes them (a row index, ID
columns), a label that must be named, and splits that represent the data (duplicate
rows placed one by one, the duplicate share and the eval split's warnings recorded).

The executor runs are small (a few hundred rows, DirectRunner in memory)."""
import json

import numpy as np
import pandas as pd
import pytest

from tfx_parallel.components.common import keys
from tfx_parallel.components.common import readable
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.partitioned_example_gen import column_choice
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen import split_stats
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from test_example_gen_executor import props, read_split, run_executor, value


def _plan(path, **kwargs):
  return sources.plan_source(ExampleGenConfig(source=str(path), **kwargs).validate())


def _frame(rows=200, seed=0):
  """A small regression frame: a price with many distinct values, a count, a category."""
  rng = np.random.default_rng(seed)
  return pd.DataFrame({
      "carat": rng.uniform(0.2, 3, rows).round(2),
      "depth": rng.integers(50, 70, rows),  # A count: repeats, stays.
      "cut": rng.choice(["Good", "Ideal", "Premium"], rows),
      "price": rng.uniform(300, 19000, rows).round(2),  # Many distinct values, stays.
  })


# ----------------------------------------------------------------------------- columns


def test_pandas_default_index_is_left_out_with_one_line(tmp_path):
  path = tmp_path / "diamonds.csv"
  _frame().to_csv(path)  # pandas' default: the row index as an unnamed first column.
  assert open(path).readline().startswith(",carat,")
  plan = _plan(path, label="price")
  assert "" not in plan.types and list(plan.types) == ["carat", "depth", "cut", "price"]
  assert plan.feature_keys == ("carat", "depth")  # price is the label; cut a string.
  assert list(plan.choice.left_out) == [""]
  [line] = plan.choice.lines()
  assert line.startswith("leaving out column '' (no name), row index: pandas' df.to_csv()")


def test_unnamed_0_index_and_numeric_ids_left_out_features_with_many_values_stay(tmp_path):
  frame = _frame()
  frame.insert(0, "Unnamed: 0", range(len(frame)))  # read_csv then to_csv(index=False).
  frame["row"] = np.arange(len(frame)) * 3 + 7      # A row number by its values.
  frame["store_id"] = np.random.default_rng(1).permutation(len(frame)) + 1000  # By name.
  frame["visits"] = np.random.default_rng(2).permutation(len(frame))  # Distinct, no ID.
  path = tmp_path / "data.csv"
  frame.to_csv(path, index=False)
  plan = _plan(path, label="price")
  assert list(plan.choice.left_out) == ["Unnamed: 0", "row", "store_id"]
  assert plan.choice.left_out["row"].startswith("ID-like: a row number")
  assert plan.choice.left_out["store_id"].startswith("ID-like: an ID by its name")
  assert set(plan.feature_keys) == {"carat", "depth", "visits"}
  lines = plan.choice.lines()
  assert len(lines) == 3  # One each, naming how to keep it.
  assert lines[1].endswith("To keep it, set example_gen.keep_columns=['row']")
  assert plan.choice.record() == {"left_out": plan.choice.left_out}
  # keep_columns keeps one, and says so in the record.
  kept = _plan(path, label="price", keep_columns=("row",))
  assert "row" in kept.feature_keys and "row" not in kept.choice.left_out
  assert kept.choice.record()["kept"]["row"].startswith("example_gen.keep_columns")


def test_a_time_column_that_counts_up_with_the_rows_is_a_feature_not_a_row_number(tmp_path):
  # statsmodels' sunspots (YEAR 1700..2008, one row a year, df.to_csv()): YEAR is the
  # only feature; the row-number rule left it out and the model had no input at all.
  years = np.arange(1700, 1700 + 120)
  frame = pd.DataFrame({"YEAR": years.astype(float), "month_no": np.arange(120) + 1,
                        "SUNACTIVITY": np.abs(np.sin(years / 11.0)) * 100})
  path = tmp_path / "sunspots.csv"
  frame.to_csv(path)
  plan = _plan(path, label="SUNACTIVITY")
  assert list(plan.choice.left_out) == [""]  # Only pandas' index.
  assert set(plan.feature_keys) == {"YEAR", "month_no"}


@pytest.mark.parametrize("name", ["PassengerId", "customerID", "userId", "Patient ID",
                                  "patient-id", "ID"])
def test_an_id_by_a_camel_case_or_spaced_name_is_left_out(tmp_path, name):
  frame = _frame()
  frame.insert(0, name, np.random.default_rng(3).permutation(len(frame)) + 500)
  path = tmp_path / "data.csv"
  frame.to_csv(path, index=False)
  plan = _plan(path, label="price")
  assert plan.choice.left_out[name].startswith("ID-like: an ID by its name")


@pytest.mark.parametrize("name", ["Paid", "COVID", "valid", "Acid", "void"])
def test_words_ending_in_id_are_not_ids(tmp_path, name):
  frame = _frame()
  frame.insert(0, name, np.random.default_rng(3).permutation(len(frame)) + 500)
  path = tmp_path / "data.csv"
  frame.to_csv(path, index=False)
  assert name in _plan(path, label="price").feature_keys


def _iris_sorted_by_species():
  """150 rows sorted by the label, as scikit-learn ships iris: the row number is the
  label (0-49, 50-99, 100-149)."""
  rng = np.random.default_rng(4)
  species = np.repeat(["setosa", "versicolor", "virginica"], 50)
  return pd.DataFrame({"petal": np.repeat([1.5, 4.3, 5.6], 50) + rng.normal(0, 0.3, 150),
                       "sepal": rng.normal(5.8, 0.8, 150).round(1), "species": species})


def test_a_shuffled_index_under_any_name_is_left_out_not_a_label_leak(tmp_path):
  # df.sample(frac=1) then a named index (rename_axis) or reset_index(): the old row
  # numbers, a perfect label leak on a file that was sorted by the label, were a
  # feature (neither increasing nor named id).
  shuffled = _iris_sorted_by_species().sample(frac=1, random_state=0)
  named = tmp_path / "named.csv"
  shuffled.rename_axis("sample").to_csv(named)
  plan = _plan(named, label="species")
  assert plan.choice.left_out["sample"].startswith("row index"), plan.choice.left_out
  assert set(plan.feature_keys) == {"petal", "sepal"}
  reset = tmp_path / "reset.csv"
  shuffled.reset_index().to_csv(reset, index=False)  # An 'index' column.
  assert list(_plan(reset, label="species").choice.left_out) == ["index"]
  one_based = tmp_path / "one_based.csv"
  frame = shuffled.copy()
  frame.index = frame.index + 1
  frame.rename_axis("n").to_csv(one_based)
  assert list(_plan(one_based, label="species").choice.left_out) == ["n"]


def test_a_first_column_of_distinct_counts_that_are_not_row_numbers_stays(tmp_path):
  frame = _iris_sorted_by_species().sample(frac=1, random_state=0)
  frame.insert(0, "visits", np.random.default_rng(5).permutation(150) * 3 + 1000)
  path = tmp_path / "data.csv"
  frame.to_csv(path, index=False)
  assert "visits" in _plan(path, label="species").feature_keys


def test_columns_selects_exactly_even_an_index_and_ignores_an_unnamed_column(tmp_path):
  path = tmp_path / "diamonds.csv"
  frame = _frame()
  frame["id"] = np.arange(len(frame))
  frame.to_csv(path)
  plan = _plan(path, label="price", columns=("carat", "id"))
  assert list(plan.types) == ["carat", "price", "id"]  # Header order; the label kept.
  assert plan.feature_keys == ("carat", "id")  # Named: kept, whatever the rules say.
  assert plan.choice.record() == {"not_selected": ["", "depth", "cut"]}
  assert plan.choice.lines() == []


def test_an_empty_name_past_the_first_column_still_fails_saying_what_to_do(tmp_path):
  path = tmp_path / "data.csv"
  path.write_text("a,,y\n1,2,3\n")
  with pytest.raises(sources.BadInputError, match=r"Only the first column may be unnamed"):
    _plan(path, label="y")


# ----------------------------------------------------------------------------- label


def test_a_csv_without_a_label_fails_listing_the_columns(tmp_path):
  path = tmp_path / "diamonds.csv"
  _frame().to_csv(path)
  with pytest.raises(sources.LabelError) as e:
    _plan(path)
  assert "no label column given" in str(e.value)
  assert "the columns are: 'carat', 'depth', 'cut', 'price'" in str(e.value)
  assert ExampleGenConfig().label_key == "y"  # Only the synthetic problem has a default.
  assert ExampleGenConfig(source=str(path)).label_key == ""


def test_a_misspelled_label_gets_did_you_mean(tmp_path):
  path = tmp_path / "diamonds.csv"
  _frame().to_csv(path, index=False)
  with pytest.raises(sources.LabelError, match=r"label column 'Prices' not in the header\. "
                                               r"Did you mean 'price'\?"):
    _plan(path, label="Prices")


def test_the_cli_names_label_before_ingest(tmp_path):
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  path = tmp_path / "diamonds.csv"
  _frame().to_csv(path)
  args = cli.build_parser().parse_args(["run", "--data", str(path)])
  config = cli.config_from_args(args).validate()
  assert config.pipeline_name == "diamonds"  # From the data file (issue 47, item 8).
  with pytest.raises(ConfigError) as e:
    config.check_inputs()
  text = cli._error_text(e.value)  # pylint: disable=protected-access
  assert text.startswith("example_gen.label: ") and "--label" in text, text
  assert "'carat', 'depth', 'cut', 'price'" in text
  named = cli.config_from_args(cli.build_parser().parse_args(
      ["run", "--data", str(path), "--label", "price"]))
  assert named.pipeline_name == "diamonds-price"
  given = cli.config_from_args(cli.build_parser().parse_args(
      ["run", "--data", str(path), "--label", "price", "--pipeline-name", "mine"]))
  assert given.pipeline_name == "mine"
  synthetic = cli.config_from_args(cli.build_parser().parse_args(["run"]))
  assert synthetic.pipeline_name == "tfx-parallel" and synthetic.example_gen.label_key == "y"


# ----------------------------------------------------------------------------- splits


def _duplicated(path, distinct=20, copies=50):
  """``distinct`` rows repeated ``copies`` times, sorted as a label-sorted file would
  be, written with pandas' default index (left out, so the rows really repeat)."""
  rng = np.random.default_rng(5)
  base = pd.DataFrame({"a": rng.integers(0, 5, distinct), "b": rng.normal(size=distinct),
                       "label": np.arange(distinct) % 2})
  frame = pd.concat([base] * copies, ignore_index=True).sort_values("label", kind="stable")
  frame.reset_index(drop=True).to_csv(path)
  return frame


def _rows_by_split(examples):
  return {split: sorted((value(e, "a"), round(value(e, "b"), 5), value(e, "label"))
                        for e in read_split(examples, split)) for split in ("train", "eval")}


@pytest.fixture(scope="module")
def duplicates(tmp_path_factory):
  """One file of 20 distinct rows x 50, ingested twice (the second time read in small
  ranges and batches), and once with a stock output_config (whole-example hash)."""
  root = tmp_path_factory.mktemp("duplicates")
  path = root / "dup.csv"
  _duplicated(path)
  config = ExampleGenConfig(source=str(path), label="label")
  first = run_executor(root, config, name="first")
  saved = sources.RANGE_BYTES, sources.CSV_BATCH_LINES
  sources.RANGE_BYTES, sources.CSV_BATCH_LINES = 4096, 37  # Other Beam elements.
  try:
    second = run_executor(root, config, name="second")
  finally:
    sources.RANGE_BYTES, sources.CSV_BATCH_LINES = saved
  return first, second


def test_each_occurrence_of_a_duplicate_row_is_placed_on_its_own(duplicates):
  first, _ = duplicates
  rows = _rows_by_split(first)
  assert len(rows["train"]) + len(rows["eval"]) == 1000
  distinct_eval, distinct_train = set(rows["eval"]), set(rows["train"])
  # A whole-row hash puts all 50 copies of a row in one split; a row split puts about
  # 10 of each in eval: every distinct row is in both splits.
  assert len(distinct_eval) == 20 and distinct_train == distinct_eval
  assert 150 <= len(rows["eval"]) <= 250


def test_the_row_split_is_stable_across_reruns_and_beam_sharding(duplicates):
  first, second = duplicates
  assert _rows_by_split(first) == _rows_by_split(second)
  assert props(first)[keys.ROW_COUNTS] == props(second)[keys.ROW_COUNTS]


def test_duplicate_share_and_distinct_rows_are_recorded(duplicates):
  first, _ = duplicates
  p = props(first)
  assert p[keys.DUPLICATE_SHARE] == pytest.approx(0.98)  # 980 of 1000 repeat a row.
  assert json.loads(p[keys.DISTINCT_ROWS]) == {"all": 20, "eval": 20, "train": 20}
  assert json.loads(p[keys.INPUT_COLUMNS]) == {"left_out": {"": column_choice.ROW_INDEX + (
      ": pandas' df.to_csv() writes the row index as a first column without a name "
      "(df.to_csv(index=False) leaves it out)")}}
  # Few distinct eval rows: the evaluator is told (ConvergenceEvaluator reads this).
  [warning] = json.loads(p[keys.EVAL_SPLIT_WARNINGS])
  assert warning.startswith("the 'eval' split holds 20 distinct rows in its")


def test_a_healthy_file_has_no_eval_split_warning(tmp_path):
  path = tmp_path / "diamonds.csv"
  _frame(rows=300).to_csv(path)
  p = props(run_executor(tmp_path, ExampleGenConfig(source=str(path), label="price")))
  assert json.loads(p[keys.EVAL_SPLIT_WARNINGS]) == []
  assert p[keys.DUPLICATE_SHARE] == 0.0


# ------------------------------------------------------------------- eval split rules


def _stats(train_labels, eval_labels, train_distinct=None, eval_distinct=None,
           numeric=False):
  def split(labels, distinct):
    entry = {"rows": len(labels), "distinct_rows": distinct or len(labels),
             "labels": {}, "labels_overflow": False}
    for v in labels:
      entry["labels"][str(v)] = entry["labels"].get(str(v), 0) + 1
    if numeric:
      v = np.asarray(labels, dtype=float)
      entry.update(label_n=v.size, label_sum=float(v.sum()), label_sumsq=float((v * v).sum()))
      if len(entry["labels"]) > split_stats.MAX_LABEL_VALUES:
        entry["labels"], entry["labels_overflow"] = {}, True
    return entry
  splits = {"train": split(train_labels, train_distinct),
            "eval": split(eval_labels, eval_distinct)}
  return {"rows": sum(s["rows"] for s in splits.values()),
          "distinct_rows": sum(s["distinct_rows"] for s in splits.values()), "splits": splits}


def test_assess_is_quiet_on_a_representative_split():
  rng = np.random.default_rng(0)
  assert split_stats.assess(_stats(list(rng.choice(["a", "b,c"], 800)),
                                   list(rng.choice(["a", "b,c"], 200)))) == []
  assert split_stats.assess(_stats(list(rng.normal(10, 2, 800)),
                                   list(rng.normal(10, 2, 200)), numeric=True)) == []


def test_assess_names_a_class_missing_from_a_split_quoted():
  warnings = split_stats.assess(_stats(["a"] * 400 + ["b,c"] * 400, ["a"] * 200))
  assert warnings[0] == ("label class 'b,c' has no rows in the 'eval' split (about 80 "
                         "expected from its share of the data); "
                         f"{split_stats.RESPLIT}")
  assert any("label distribution of the 'eval' split is far from the 'train' split's" in w
             for w in warnings)


def test_assess_names_a_shifted_label_mean_and_few_distinct_rows():
  [shift] = split_stats.assess(_stats(list(np.linspace(0, 10, 800)),
                                      list(np.linspace(6, 10, 200)), numeric=True))
  assert shift.startswith("the label's mean in the 'eval' split, 8, is ")
  [few] = split_stats.assess(_stats(list(range(800)), list(range(0, 800, 4)),
                                    eval_distinct=2, numeric=True))
  assert few.startswith("the 'eval' split holds 2 distinct rows in its 200 rows")
  # #47 review: each warning names what the user can do (the verdict repeats it).
  assert shift.endswith("set example_gen.seed=N with another N for another split")
  assert few.endswith("drop the copies in pandas (df.drop_duplicates()) if they are not "
                      "real repeats, or bring more distinct rows")


def test_rows_hash_equal_when_equal_and_not_salted():
  from tfx_parallel.components.partitioned_example_gen.rows import RowBatch  # pylint: disable=g-import-not-at-top
  batch = RowBatch(("f", 2), {"x": np.array([1.0, 1.0, np.nan, -0.0, 0.0])},
                   {"s": [b"a", b"a", None, b"b", b"b"]}, np.arange(5))
  h = split_stats.row_hashes(batch, ["x"], ["s"])
  assert h[0] == h[1] and h[3] == h[4] and len(set(h.tolist())) == 3
  import os, subprocess, sys  # pylint: disable=g-import-not-at-top,multiple-imports
  code = ("import numpy as np;from tfx_parallel.components.partitioned_example_gen import "
          "split_stats as s;from tfx_parallel.components.partitioned_example_gen.rows import "
          "RowBatch;print(int(s.row_hashes(RowBatch(('f',2),{'x':np.array([1.0])},"
          "{'s':[b'a']},np.arange(1)),['x'],['s'])[0]))")
  other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, PYTHONHASHSEED="123")).stdout.strip()
  assert int(other) == int(h[0])


# ----------------------------------------------------------------------------- messages


def test_a_truncated_file_error_names_bad_row_policy_skip(tmp_path):
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  path = tmp_path / "cut.csv"
  text = _frame(rows=50).to_csv(index=False)
  lines = text.splitlines()
  lines[-1] = lines[-1][:lines[-1].index(",") + 3]  # Cut short, as a copy that stopped.
  path.write_text("\n".join(lines))
  with pytest.raises(sources.BadInputError) as e:
    run_executor(tmp_path, ExampleGenConfig(source=str(path), label="price"))
  assert "cut.csv:51: expected 4 columns, got" in str(e.value)
  assert "set bad_row_policy=skip" in str(e.value)
  shown = cli.RUN_FORM.message(str(e.value), "example_gen")
  assert "add --set example_gen.bad_row_policy=skip)" in shown, shown


def test_class_names_with_a_comma_are_quoted_in_lists():
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  assert readable.name("Iris-setosa") == "Iris-setosa"
  assert readable.name("b, c") == "'b, c'" and readable.name("") == "''"
  line = executor.label_summary({"train": {"a": 3, "b, c": 1}}, "train")
  assert line == "label classes in 'train': a 3 (75%), 'b, c' 1 (25%)"
