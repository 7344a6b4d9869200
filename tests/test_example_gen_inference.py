"""Column type inference (pure): the 99% rule, explicit types, and what gets reported."""
import json

import pytest

from tfx_parallel.components.partitioned_example_gen import inference
from tfx_parallel.components.partitioned_example_gen.inference import SampleRow


def _sample(header, rows, path="data.csv"):
  return [SampleRow(path, i + 2, tuple(r)) for i, r in enumerate(rows)]


def _issue_rows(n=400, bad_at=57):
  """The issue's CSV: x0,x1,y with a single 'not-a-number' in x1 (0-based row bad_at)."""
  rows = [(str(i), str(i * 0.5), str(i * 2)) for i in range(n)]
  rows[bad_at] = (rows[bad_at][0], "not-a-number", rows[bad_at][2])
  return rows


def test_one_bad_cell_in_400_keeps_the_column_numeric_and_names_the_cell():
  header = ("x0", "x1", "y")
  reports = inference.infer_types(header, _sample(header, _issue_rows()))
  assert {c: r.type for c, r in reports.items()} == {"x0": "int", "x1": "float", "y": "int"}
  x1 = reports["x1"]
  assert (x1.non_empty, x1.numeric, x1.odd_count) == (400, 399, 1)
  assert x1.odd_cells == (("data.csv", 59, "not-a-number"),)  # Row 57 is line 59.


@pytest.mark.parametrize("numbers,words,expected", [
    (99, 1, "float"),    # 99% numbers: numeric, the word is a bad row.
    (98, 2, "string"),   # 98%: a string column.
    (0, 5, "string"),
    (5, 0, "float"),
])
def test_numeric_share_threshold(numbers, words, expected):
  cells = [("f", i, f"{i}.5") for i in range(numbers)] + [("f", 1000 + i, "w")
                                                          for i in range(words)]
  assert inference.infer_column("c", cells).type == expected


def test_empty_cells_say_nothing_and_an_all_empty_column_is_string():
  assert inference.infer_column("c", [("f", 2, ""), ("f", 3, "7"), ("f", 4, "")]).type == "int"
  report = inference.infer_column("c", [("f", 2, ""), ("f", 3, "")])
  assert report.type == "string" and report.non_empty == 0


def test_int_only_when_every_number_is_an_integer():
  assert inference.infer_column("c", [("f", 2, "1"), ("f", 3, "-4")]).type == "int"
  assert inference.infer_column("c", [("f", 2, "1"), ("f", 3, "1.5")]).type == "float"
  # "nan" is one of pandas' missing-value tokens (na_values): missing, no evidence of a
  # float. Without the tokens it is a float NaN.
  assert inference.infer_column("c", [("f", 2, "1"), ("f", 3, "nan")]).type == "int"
  assert inference.infer_column("c", [("f", 2, "1"), ("f", 3, "nan")],
                                frozenset({""})).type == "float"


def test_explicit_types_win_and_report_the_cells_that_will_be_bad_rows():
  header = ("a", "b", "y")
  rows = [("1", "x", "1"), ("2", "3", "2"), ("z", "4", "3")]
  reports = inference.infer_types(header, _sample(header, rows),
                                  explicit={"a": "float", "b": "string"}, keep=["a", "y"])
  assert list(reports) == ["a", "y"]  # Kept columns only, header order.
  assert reports["a"].origin == inference.EXPLICIT and reports["a"].type == "float"
  assert reports["a"].odd_cells == (("data.csv", 4, "z"),)
  assert reports["y"].origin == inference.INFERRED


def test_describe_names_string_columns_and_odd_cells():
  header = ("x0", "x1", "city", "y")
  rows = [(r[0], r[1], f"c{i % 3}", r[2]) for i, r in enumerate(_issue_rows())]
  reports = inference.infer_types(header, _sample(header, rows))
  info, warnings = inference.describe(reports, 400, "y")
  assert "x0=int, x1=float, city=string, y=int" in info and "first 400 data rows" in info
  assert len(warnings) == 1
  assert warnings[0].startswith("column 'x1' is float (399 of 400 sampled cells are numbers")
  assert "data.csv:59 'not-a-number'" in warnings[0]
  # An ordinary string column gets no WARNING of its own (issue 47): one line names them
  # all as categorical features (issue 31, case 2), with no advice that would make every
  # row bad ('city' holds no number, issue 38).
  assert inference.categorical_line(reports, "y") == (
      "string columns, used as categorical features (ids from their vocabulary): 'city'")


def test_one_line_for_every_ordinary_string_column_none_for_label_dates_and_ids():
  header = ("a", "b", "when", "name", "y")
  rows = [(f"a{i % 3}", f"b{i % 4}", f"2020-01-{1 + i % 28:02d}", f"n{i}", f"k{i % 2}")
          for i in range(60)]
  reports = inference.infer_types(header, _sample(header, rows))
  info, warnings = inference.describe(reports, 60, "y")
  assert warnings == []  # The trainer names the date and the ID-like column, once.
  assert inference.categorical_line(reports, "y") == (
      "string columns, used as categorical features (ids from their vocabulary): 'a', 'b'")


def test_a_numeric_type_is_suggested_only_where_most_sampled_cells_are_numbers():
  header = ("code", "y")
  rows = [(c, "1") for c in ("1", "2", "3", "x9", "4", "5", "y7", "6", "7", "8")]
  info, warnings = inference.describe(inference.infer_types(header, _sample(header, rows)),
                                      10, "y")
  assert warnings == [
      "column 'code' is a string column (2 of 10 sampled cells are not numbers): it is "
      "written as a bytes_list feature, and the trainer uses it as a categorical feature "
      "(ids from its vocabulary). If it is numeric, set example_gen.column_types.code="
      "'float' and its 2 sampled non-numbers become bad rows."]


def test_properties_are_json_in_header_order():
  header = ("b", "a", "y")
  reports = inference.infer_types(header, _sample(header, [("1", "x", "2.5")]))
  assert list(json.loads(inference.to_property(reports)).items()) == [
      ("b", "int"), ("a", "string"), ("y", "float")]
  detail = json.loads(inference.inference_property(reports, 1))
  assert detail["sampled_rows"] == 1 and detail["numeric_share"] == 0.99
  assert detail["columns"]["a"] == {"type": "string", "origin": "inferred",
                                    "sampled_cells": 1, "numeric_cells": 0,
                                    "missing_cells": 0, "distinct": 1}
  assert "NA" in detail["na_values"] and "" in detail["na_values"]
