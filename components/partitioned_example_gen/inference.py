"""Column type inference for CSV sources, and the report it leaves behind.

Pure logic: no Beam, no TFX. ``sources.plan_source`` samples the first rows of the
input (``sample_rows``) and calls ``infer_types``; the executor logs ``describe`` and
records ``to_property`` on the Examples artifact.

The rule, per column, over the sampled non-missing cells (an empty cell, or one of the
``na_values`` tokens: ``NA``, ``N/A``, ``NULL``, ``NaN``, ... as pandas reads them, see
common/na_values.py, is a missing value and says nothing about the type):

* **numeric** when at least ``NUMERIC_SHARE`` (99%) of them parse as numbers: ``int`` if
  every number is an integer, else ``float``. The other cells, e.g. one ``not-a-number``
  in 400 rows, are *bad rows*: the parse stage reports each by file and line and applies
  ``bad_row_policy`` (fail, or skip and count). One bad cell never turns a numeric column
  into a string column.
* **string** otherwise, including a column with no non-empty sampled cell. String columns
  are written as ``bytes_list`` features and are not numeric features (not in
  ``feature_keys``); ``categorical_line`` names them in one console line.

A cell that does not fit a column's type after the sample is a bad row too: the type is
fixed before Beam starts and every row is checked against it, so a sample can make a run
fail loudly but never change data silently.
"""
import collections
import dataclasses
import json
from typing import AbstractSet, Dict, List, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.common import column_rules
from tfx_parallel.components.common import na_values as na_lib

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
    missing: sampled missing cells (empty, or an na_values token).
    na_tokens: the na_values tokens other than "" seen in the sample, sorted.
    distinct: distinct non-missing sampled values (string columns).
    date_parts: string columns whose sampled values are dates: the parts the trainer
      derives (column_rules.date_kind); else ().
  """
  name: str
  type: str
  origin: str
  non_empty: int = 0
  numeric: int = 0
  odd_cells: Tuple[Tuple[str, int, str], ...] = ()
  missing: int = 0
  na_tokens: Tuple[str, ...] = ()
  distinct: int = 0
  date_parts: Tuple[str, ...] = ()

  @property
  def odd_count(self) -> int:
    """Sampled cells that do not fit the type."""
    if self.type in NUMERIC_TYPES:
      return self.non_empty - self.numeric
    return 0

  @property
  def id_like(self) -> bool:
    """A string column that the trainer's default rule would leave out (column_rules)."""
    return (self.type == "string" and not self.date_parts
            and column_rules.id_like(self.distinct, self.non_empty))

  def to_dict(self) -> dict:
    out = {"type": self.type, "origin": self.origin, "sampled_cells": self.non_empty,
           "numeric_cells": self.numeric, "missing_cells": self.missing}
    if self.na_tokens:
      out["na_tokens"] = list(self.na_tokens)
    if self.type == "string":
      out["distinct"] = self.distinct
      if self.date_parts:
        out["date_parts"] = list(self.date_parts)
      elif self.id_like:
        out["id_like"] = True
    return out


def _parses(cell: str, parse) -> bool:
  try:
    parse(cell)
  except (ValueError, OverflowError):
    return False
  return True


def infer_column(name: str, cells: Sequence[Tuple[str, int, str]],
                 na: AbstractSet[str] = na_lib.token_set()) -> ColumnReport:
  """Type of one column from its sampled (path, line, cell) triples (see module doc);
  ``na``: the cells read as missing (na_values.token_set)."""
  non_empty = [c for c in cells if c[2] not in na]
  tokens = tuple(sorted({c[2] for c in cells if c[2] and c[2] in na}))
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
  values = collections.Counter(c[2] for c in non_empty)
  return ColumnReport(name=name, type=typ, origin=INFERRED, non_empty=len(non_empty),
                      numeric=len(numbers), odd_cells=tuple(odd[:MAX_EXAMPLES]),
                      missing=len(cells) - len(non_empty), na_tokens=tokens,
                      distinct=len(values),
                      date_parts=(column_rules.date_kind(values) or ()
                                  if typ == "string" else ()))


def infer_types(header: Sequence[str], sample: Sequence[SampleRow],
                explicit: Optional[Mapping[str, str]] = None,
                keep: Optional[Sequence[str]] = None,
                na: AbstractSet[str] = na_lib.token_set()) -> Dict[str, ColumnReport]:
  """ColumnReports of the kept columns (all by default), in header order.

  ``explicit`` types win over inference; their report still counts the sampled cells,
  and odd_cells lists sampled cells that would be bad rows under that type. ``na``: the
  cells read as missing (na_values.token_set).
  """
  explicit = dict(explicit or {})
  kept = set(header if keep is None else keep)
  reports = {}
  for j, name in enumerate(header):
    if name not in kept:
      continue
    cells = [(row.path, row.line, row.cells[j]) for row in sample]
    report = infer_column(name, cells, na)
    if name in explicit:
      typ = explicit[name]
      parse = {"int": int, "float": float}.get(typ)
      non_empty = [c for c in cells if c[2] not in na]
      odd = ([c for c in non_empty if not _parses(c[2], parse)] if parse else [])
      report = dataclasses.replace(
          report, type=typ, origin=EXPLICIT, odd_cells=tuple(odd[:MAX_EXAMPLES]),
          date_parts=report.date_parts if typ == "string" else ())
    reports[name] = report
  return reports


def _where(cells: Sequence[Tuple[str, int, str]]) -> str:
  return ", ".join(f"{path}:{line} {cell!r}" for path, line, cell in cells)


def describe(reports: Mapping[str, ColumnReport], sampled_rows: int,
             label_key: str) -> Tuple[str, List[str]]:
  """(one INFO line with every column's type, WARNING lines for what needs a look).

  Warnings: a string column whose sampled cells are mostly numbers (it may be meant to
  be numeric: the fix), and every numeric column whose sample has cells that are not
  numbers (those rows are bad rows). Ordinary string columns get no line each
  (``categorical_line`` names them together); date and ID-like string columns are named
  by the trainer, which decides on the train split.
  """
  types = ", ".join(f"{r.name}={r.type}" + ("" if r.origin == INFERRED else " (explicit)")
                    for r in reports.values())
  label = reports.get(label_key)
  kind = (" (string: class names)" if label is not None and label.type == "string" else "")
  info = (f"PartitionedExampleGen column types (inferred from the first {sampled_rows} "
          f"data rows unless explicit): {types}; label {label_key!r}{kind}")
  seen = sorted({t for r in reports.values() for t in r.na_tokens})
  if seen:
    where = ", ".join(f"{t!r} in " + ", ".join(r.name for r in reports.values()
                                              if t in r.na_tokens) for t in seen)
    info += f"; read as missing values (na_values): {where}"
  warnings = []
  for r in reports.values():
    if r.type == "string" and r.name == label_key:
      continue  # A string label holds class names (sources.check_label); info says so.
    if r.type == "string" and (r.date_parts or r.id_like):
      continue  # The trainer decides on the train split and says so, once (columns.py).
    if r.type == "string":
      # Suggest a numeric type only where most sampled cells are numbers: for a column
      # of words it would make every row a bad row (issue 38). Other string columns
      # are named once, together, by categorical_line (issue 47: no line per column).
      if r.origin != EXPLICIT and r.numeric >= r.non_empty / 2 > 0:
        warnings.append(
            f"column {r.name!r} is a string column ({r.non_empty - r.numeric} of "
            f"{r.non_empty} sampled cells are not numbers): it is written as a bytes_list "
            f"feature, and the trainer uses it as a categorical feature (ids from its "
            f"vocabulary). If it is numeric, set example_gen.column_types.{r.name}='float' "
            f"and its {r.non_empty - r.numeric} sampled non-numbers become bad rows.")
    elif r.odd_cells:
      warnings.append(
          f"column {r.name!r} is {r.type} ({r.numeric} of {r.non_empty} sampled cells "
          f"are numbers, at least {NUMERIC_SHARE:.0%} needed), but {r.odd_count} sampled "
          f"cells are not: {_where(r.odd_cells)}. Those rows are bad rows: the run fails "
          f"on them (bad_row_policy='fail') or skips and counts them ('skip').")
  return info, warnings


def categorical_line(reports: Mapping[str, ColumnReport], label_key: str) -> Optional[str]:
  """One console line naming the ordinary string columns (not the label, not dates nor
  ID-like ones, which the trainer names, nor the mostly numeric ones ``describe`` warns
  about), or None when there are none."""
  names = [r.name for r in reports.values()
           if r.type == "string" and r.name != label_key and not r.date_parts
           and not r.id_like and not (r.origin != EXPLICIT and r.numeric >= r.non_empty / 2 > 0)]
  if not names:
    return None
  return (f"string columns, used as categorical features (ids from their vocabulary): "
          f"{', '.join(repr(n) for n in names)}")


def to_property(reports: Mapping[str, ColumnReport]) -> str:
  """JSON {column: type} in header order, label included (the COLUMN_TYPES property)."""
  return json.dumps({name: r.type for name, r in reports.items()})


def inference_property(reports: Mapping[str, ColumnReport], sampled_rows: int,
                       na: AbstractSet[str] = na_lib.token_set()) -> str:
  """JSON of how each type was decided (the TYPE_INFERENCE property), with the tokens
  read as missing (``na_values``)."""
  return json.dumps({"sampled_rows": sampled_rows, "numeric_share": NUMERIC_SHARE,
                     "na_values": sorted(na),
                     "columns": {name: r.to_dict() for name, r in reports.items()}})
