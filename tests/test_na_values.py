"""Issue 38 item 2 and 5 (fast): missing-value tokens in every column type, and the
ID-like and date rules (common/na_values.py, common/column_rules.py), in PartitionedExampleGen's
inference and parsing."""
import json

import numpy as np
import pytest

from tfx_parallel.components.common import column_rules
from tfx_parallel.components.common import na_values as na_lib
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.partitioned_example_gen import inference
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig


def test_default_tokens_are_pandas_read_csv_defaults():
  from pandas._libs import parsers  # pylint: disable=g-import-not-at-top
  assert set(na_lib.PANDAS_NA_VALUES) == set(parsers.STR_NA_VALUES)
  assert na_lib.token_set() == frozenset(parsers.STR_NA_VALUES)


def test_token_set_replaces_and_always_keeps_the_empty_cell():
  assert na_lib.token_set(["?"]) == {"?", ""}
  assert na_lib.token_set([]) == {""}
  assert na_lib.numeric_tokens(["NA", "-999", "nan", "1e3"]) == (-999.0, 1000.0)


@pytest.mark.parametrize("bad", ["NA", ["NA", 3]])
def test_config_rejects_a_token_list_that_is_not_strings(bad):
  with pytest.raises(ConfigError, match=r"na_values: must be a list of strings.*Received"):
    ExampleGenConfig(source="x.csv", na_values=bad).validate()


def _cells(values):
  return [("data.csv", i + 2, v) for i, v in enumerate(values)]


def test_inference_counts_tokens_as_missing_not_as_strings():
  # 40 numbers and 10 NA cells (R's convention): a float column with 10 missing values,
  # not a string column and not 10 bad rows.
  cells = _cells([f"{i}.5" for i in range(40)] + ["NA"] * 8 + ["", "N/A"])
  r = inference.infer_column("bill", cells)
  assert (r.type, r.non_empty, r.missing, r.na_tokens) == ("float", 40, 10, ("N/A", "NA"))
  assert r.odd_cells == ()
  # Without the tokens, the same cells are evidence of a string column.
  assert inference.infer_column("bill", cells, na_lib.token_set([])).type == "string"
  # An int column stays int: "NA" is neither a number nor evidence of a float.
  assert inference.infer_column("n", _cells(["1", "NA", "3"])).type == "int"


def test_describe_names_the_tokens_read_as_missing():
  header = ("x", "s", "y")
  rows = [inference.SampleRow("d.csv", i + 2, (v, t, "1"))
          for i, (v, t) in enumerate([("1", "a"), ("NA", "b"), ("2", "NA"), ("3", "a")])]
  reports = inference.infer_types(header, rows)
  info, _ = inference.describe(reports, len(rows), "y")
  assert "read as missing values (na_values): 'NA' in x, s" in info
  assert reports["s"].type == "string" and reports["s"].distinct == 2


def test_id_like_and_date_rules():
  assert column_rules.id_like(25, 25) and column_rules.id_like(256, 329)  # car names 0.78
  assert not column_rules.id_like(19, 19)  # too few values to judge
  assert not column_rules.id_like(51, 2000) and not column_rules.id_like(3, 275)
  assert not column_rules.id_like(256, 329, ratio=None)
  assert column_rules.date_parts("2016-02-29") == {"year": 2016, "month": 2, "day": 29,
                                                   "day_of_week": 0}
  assert column_rules.date_parts("2016-02-30") is None
  assert column_rules.date_parts("2021-07-04T13:45:00Z")["hour"] == 13
  assert column_rules.date_parts("2021-07-04 13:45")["day_of_week"] == 6
  assert column_rules.date_parts("04/07/2021") is None
  dates = {f"2020-01-{d:02d}": 1 for d in range(1, 31)}
  assert column_rules.date_kind(dates) == column_rules.DATE_PARTS
  assert column_rules.date_kind(dict(dates, oops=1)) is None  # 30 of 31: under 99%
  assert column_rules.date_kind({"2020-01-01 10:00": 1}) == column_rules.DATE_PARTS + ("hour",)


def test_inference_reports_dates_and_id_like_columns():
  header = ("id", "day", "kind", "y")
  rows = [inference.SampleRow("d.csv", i + 2, (f"row_{i:05d}", f"2020-03-{1 + i % 28:02d}",
                                                "ab"[i % 2], str(i)))
          for i in range(40)]
  reports = inference.infer_types(header, rows)
  detail = json.loads(inference.inference_property(reports, 40))["columns"]
  assert detail["id"]["id_like"] is True and detail["id"]["distinct"] == 40
  assert detail["day"]["date_parts"] == list(column_rules.DATE_PARTS)
  assert "id_like" not in detail["day"] and "id_like" not in detail["kind"]
  # The trainer decides on the train split and names them once (issue 47: announced
  # twice before); ExampleGen gives them no line of its own.
  _, warnings = inference.describe(reports, 40, "y")
  assert warnings == []
  assert inference.categorical_line(reports, "y") == (
      "string columns, used as categorical features (ids from their vocabulary): 'kind'")


def _layout(types, na=None):
  return sources.CsvLayout(source="d.csv", files=("d.csv",), header=tuple(types),
                           types=dict(types), label_key="y",
                           na_values=na_lib.token_set(na))


def test_parse_reads_tokens_as_missing_in_every_column_type():
  layout = _layout({"f": "float", "i": "int", "s": "string", "y": "float"})
  blob = b"\n".join([b"1.5,1,a,1", b"NA,NA,NA,2", b"N/A,,NULL,NA", b",3,#N/A,4"])
  batch, bad = sources.parse_csv_lines(layout, ("d.csv", 2, blob))
  assert bad == []
  np.testing.assert_array_equal(np.isnan(batch.numeric["f"]), [False, True, True, True])
  np.testing.assert_array_equal(batch.numeric["i"], [1, np.nan, np.nan, 3])
  assert list(batch.strings["s"]) == [b"a", None, None, None]
  np.testing.assert_array_equal(np.isnan(batch.numeric["y"]), [False, False, True, False])


def test_parse_with_replaced_tokens():
  # Only "?" and "-999" are missing: "NA" is a category, and in a float column a bad row.
  layout = _layout({"f": "float", "s": "string", "y": "float"}, na=["?", "-999"])
  blob = b"\n".join([b"1.5,NA,1", b"?,?,2", b"-999,b,3", b"NA,c,4"])
  batch, bad = sources.parse_csv_lines(layout, ("d.csv", 2, blob))
  assert bad == [(5, "d.csv:5: column 'f': expected float, got 'NA'")]
  np.testing.assert_array_equal(np.isnan(batch.numeric["f"]), [False, True, True])
  assert list(batch.strings["s"]) == [b"NA", None, b"b"]


def test_plan_source_types_a_column_with_na_as_numeric(tmp_path):
  path = tmp_path / "penguins.csv"
  path.write_text("bill,island,y\n" + "".join(
      f"{'NA' if i % 7 == 0 else 30 + i / 10},{'NA' if i % 5 == 0 else 'ab'[i % 2]},{i}\n"
      for i in range(50)))
  layout = sources.plan_source(ExampleGenConfig(source=str(path), label="y").validate())
  assert layout.types == {"bill": "float", "island": "string", "y": "int"}
  assert "NA" in layout.na_values
  strict = sources.plan_source(ExampleGenConfig(source=str(path), label="y",
                                                na_values=[]).validate())
  assert strict.types["bill"] == "string" and "NA" not in strict.na_values
