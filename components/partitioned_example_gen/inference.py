"""Column type inference for CSV sources, and the report it leaves behind.

Pure logic: no Beam, no TFX. ``sources.plan_source`` samples the first rows of the
input (``sample_rows``) and calls ``infer_types``; the executor logs ``describe`` and
records ``to_property`` on the Examples artifact.

The rule, per column, over the sampled non-empty cells (an empty cell is a missing value
and says nothing about the type):

* **numeric** when at least ``NUMERIC_SHARE`` (99%) of them parse as numbers: ``int`` if
  every number is an integer, else ``float``. The other cells, e.g. one ``not-a-number``
  in 400 rows, are *bad rows*: the parse stage reports each by file and line and applies
  ``bad_row_policy`` (fail, or skip and count). One bad cell never turns a numeric column
  into a string column.
* **string** otherwise, including a column with no non-empty sampled cell. String columns
  are written as ``bytes_list`` features and are not numeric features (not in
  ``feature_keys``); ``describe`` names every one of them, with a sample of its cells, at
  WARNING level, so it is never dropped in silence.

A cell that does not fit a column's type after the sample is a bad row too: the type is
fixed before Beam starts and every row is checked against it, so a sample can make a run
fail loudly but never change data silently.
"""
import dataclasses
import json
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

NUMERIC_SHARE = 0.99
NUMERIC_TYPES = ("float", "int")
TYPES = ("float", "int", "string")
EXPLICIT, INFERRED = "explicit", "inferred"
MAX_EXAMPLES = 3  # Odd cells quoted per column in messages.


@dataclasses.dataclass(frozen=True)
class SampleRow:
  """One well-formed sampled data row and where it came from (line 1 is the header)."""
  path: str
  line: int
  cells: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ColumnReport:
  """The type of one column and the evidence for it.

  Attributes:
    name: column name.
    type: "float" | "int" | "string".
    origin: "explicit" (config.column_types, or the taxi source's fixed types) or
      "inferred" (from the sample).
    non_empty: sampled non-empty cells.
    numeric: how many of them parse as numbers.
    odd_cells: up to MAX_EXAMPLES (path, line, cell) that do not fit ``type``: the
      non-numbers of a numeric column (bad rows), or the numbers of a string column.
  """
  name: str
  type: str
  origin: str
  non_empty: int = 0
  numeric: int = 0
  odd_cells: Tuple[Tuple[str, int, str], ...] = ()

  @property
  def odd_count(self) -> int:
    """Sampled cells that do not fit the type."""
    if self.type in NUMERIC_TYPES:
      return self.non_empty - self.numeric
    return 0

  def to_dict(self) -> dict:
    return {"type": self.type, "origin": self.origin, "sampled_cells": self.non_empty,
            "numeric_cells": self.numeric}


def _parses(cell: str, parse) -> bool:
  try:
    parse(cell)
  except (ValueError, OverflowError):
    return False
  return True


def infer_column(name: str, cells: Sequence[Tuple[str, int, str]]) -> ColumnReport:
  """Type of one column from its sampled (path, line, cell) triples (see module doc)."""
  non_empty = [c for c in cells if c[2] != ""]
  numbers, others = [], []
  for c in non_empty:
    (numbers if _parses(c[2], float) else others).append(c)
  share = len(numbers) / len(non_empty) if non_empty else 0.0
  if non_empty and share >= NUMERIC_SHARE:
    typ = "int" if all(_parses(c[2], int) for c in numbers) else "float"
    odd = others
  else:
    typ = "string"
    odd = numbers
  return ColumnReport(name=name, type=typ, origin=INFERRED, non_empty=len(non_empty),
                      numeric=len(numbers), odd_cells=tuple(odd[:MAX_EXAMPLES]))


def infer_types(header: Sequence[str], sample: Sequence[SampleRow],
                explicit: Optional[Mapping[str, str]] = None,
                keep: Optional[Sequence[str]] = None) -> Dict[str, ColumnReport]:
  """ColumnReports of the kept columns (all by default), in header order.

  ``explicit`` types win over inference; their report still counts the sampled cells,
  and odd_cells lists sampled cells that would be bad rows under that type.
  """
  explicit = dict(explicit or {})
  kept = set(header if keep is None else keep)
  reports = {}
  for j, name in enumerate(header):
    if name not in kept:
      continue
    cells = [(row.path, row.line, row.cells[j]) for row in sample]
    report = infer_column(name, cells)
    if name in explicit:
      typ = explicit[name]
      parse = {"int": int, "float": float}.get(typ)
      non_empty = [c for c in cells if c[2] != ""]
      odd = ([c for c in non_empty if not _parses(c[2], parse)] if parse else [])
      report = ColumnReport(name=name, type=typ, origin=EXPLICIT,
                            non_empty=report.non_empty, numeric=report.numeric,
                            odd_cells=tuple(odd[:MAX_EXAMPLES]))
    reports[name] = report
  return reports


def _where(cells: Sequence[Tuple[str, int, str]]) -> str:
  return ", ".join(f"{path}:{line} {cell!r}" for path, line, cell in cells)


def describe(reports: Mapping[str, ColumnReport], sampled_rows: int,
             label_key: str) -> Tuple[str, List[str]]:
  """(one INFO line with every column's type, WARNING lines for what needs a look).

  Warnings: every string column but the label (the trainer takes it as categorical: say
  so, in case it was meant to be numeric; a string label holds class names), and every
  numeric column
  whose sample has cells that are not numbers (those rows are bad rows).
  """
  types = ", ".join(f"{r.name}={r.type}" + ("" if r.origin == INFERRED else " (explicit)")
                    for r in reports.values())
  label = reports.get(label_key)
  kind = (" (string: class names)" if label is not None and label.type == "string" else "")
  info = (f"PartitionedExampleGen column types (inferred from the first {sampled_rows} "
          f"data rows unless explicit): {types}; label {label_key!r}{kind}")
  warnings = []
  for r in reports.values():
    if r.type == "string" and r.name == label_key:
      continue  # A string label holds class names (sources.check_label); info says so.
    if r.type == "string":
      why = ("no sampled cell has a value" if r.non_empty == 0 else
             f"{r.non_empty - r.numeric} of {r.non_empty} sampled cells are not numbers")
      if r.origin == EXPLICIT:
        why = "column_types says so"
      # Suggest a numeric type only where most sampled cells are numbers: for a column
      # of words it would make every row a bad row (issue 38).
      fix = (f" If it is numeric, set example_gen.column_types.{r.name}='float' and its "
             f"{r.non_empty - r.numeric} sampled non-numbers become bad rows."
             if r.origin != EXPLICIT and r.numeric >= r.non_empty / 2 > 0 else "")
      warnings.append(
          f"column {r.name!r} is a string column ({why}): it is written as a bytes_list "
          f"feature, and the trainer uses it as a categorical feature (ids from its "
          f"vocabulary).{fix}")
    elif r.odd_cells:
      warnings.append(
          f"column {r.name!r} is {r.type} ({r.numeric} of {r.non_empty} sampled cells "
          f"are numbers, at least {NUMERIC_SHARE:.0%} needed), but {r.odd_count} sampled "
          f"cells are not: {_where(r.odd_cells)}. Those rows are bad rows: the run fails "
          f"on them (bad_row_policy='fail') or skips and counts them ('skip').")
  return info, warnings


def to_property(reports: Mapping[str, ColumnReport]) -> str:
  """JSON {column: type} in header order, label included (the COLUMN_TYPES property)."""
  return json.dumps({name: r.type for name, r in reports.items()})


def inference_property(reports: Mapping[str, ColumnReport], sampled_rows: int) -> str:
  """JSON of how each type was decided (the TYPE_INFERENCE property)."""
  return json.dumps({"sampled_rows": sampled_rows, "numeric_share": NUMERIC_SHARE,
                     "columns": {name: r.to_dict() for name, r in reports.items()}})
