"""Which CSV columns become features: pandas' row index and ID-like numeric columns are
left out, ``columns`` selects exactly, ``keep_columns`` overrides. Pure: no Beam, no TFX.

Decided on the driver from the header and the sampled rows (inference.SampleRow), before
Beam starts, so a left-out column is never parsed or written:

* **Row index**: ``df.to_csv()`` writes pandas' index as a first column whose header
  cell is empty (``Unnamed: 0`` once read back and written again). Its values number the
  rows: a feature that says where a row sits in the file, a label leak on a sorted file
  (issue 47: acc 0.942 with it, 0.814 without, blessed).
* **ID-like numeric column** (column_rules.ID_MIN_VALUES or more sampled values, all
  distinct): a row number (integers increasing with the row order, unless the name says
  the column counts time: ``YEAR``, ``month_no``), or an ID by name (``id``, ``*_id``,
  ``* ID``, camelCase ``PassengerId``, ``Unnamed: N``, reset_index()'s ``index``).
* **Shuffled row index**: a first column (where pandas writes its index, named or not)
  holding exactly the row numbers 0..n-1 (or 1..n) of the n sampled rows in another
  order: df.sample(frac=1) then df.to_csv(). A numeric feature that merely has many distinct
  values (a price, a count) is neither and stays.
* ``columns`` given: exactly those columns (plus the label and the split key) are
  written, and no rule above applies to them.
* ``keep_columns`` names a column the rules would leave out: it stays.

Every choice is recorded (``record``) as the Examples' ``input_columns`` property.
"""
import dataclasses
import re
from typing import Dict, List, Optional, Sequence, Tuple

from tfx_parallel.components.common import column_rules

KEEP_KEY = "example_gen.keep_columns"
_UNNAMED_RE = re.compile(r"Unnamed: \d+")
# An ID by its name: "id", or "id" ending a name after a separator ("store_id",
# "Patient ID", "patient-id") or a lowercase letter in camelCase ("PassengerId",
# "customerID"), not a word that ends in the letters ("Paid", "COVID", "valid").
_ID_NAME_RE = re.compile(r"(?:.*[ _.\-])?(?:id|ID|Id)|.*[a-z](?:Id|ID)")
# A column that counts time (a year, a month number, a period) rises with the row order
# in a file sorted by time, one row per step, as a row number does: it is a feature
# (statsmodels' sunspots: YEAR 1700..2008 is the only feature), never left out as one.
_TIME_WORDS = frozenset(("year", "yr", "month", "week", "day", "date", "time", "quarter",
                         "period", "season", "epoch", "t"))
_WORD_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
ROW_INDEX = "row index"
ID_LIKE = "ID-like"


def is_index_name(name: str, position: int) -> bool:
  """pandas' unnamed row index: the first column, named "" or "Unnamed: 0"."""
  return position == 0 and (name == "" or name == "Unnamed: 0")


def is_id_name(name: str) -> bool:
  return (_ID_NAME_RE.fullmatch(name) is not None or name in ("index", "level_0")
          or _UNNAMED_RE.fullmatch(name) is not None)


def is_shuffled_index(values: Sequence[str], missing: int) -> bool:
  """The first column's sampled values are the row numbers 0..n-1 (or 1..n) of the n
  sampled rows in another order: pandas' index written by df.to_csv() after
  df.sample(frac=1), under a name (rename_axis) or none. A count or a measurement is
  not exactly every number from 0 to n-1."""
  numbers = _numbers(values)
  if missing or numbers is None or len(numbers) < column_rules.ID_MIN_VALUES:
    return False
  if not all(v.is_integer() for v in numbers):
    return False
  start = min(numbers)
  return start in (0.0, 1.0) and sorted(numbers) == [start + i for i in range(len(numbers))]


def is_time_name(name: str) -> bool:
  """A name that says the column counts time: a word of it is one of _TIME_WORDS
  ("YEAR", "year_built", "monthNo", "t")."""
  return any(w.lower() in _TIME_WORDS for w in _WORD_RE.findall(name))


@dataclasses.dataclass(frozen=True)
class Choice:
  """The columns written and why the others are not.

  Attributes:
    kept: the columns written (features, label, split key), in header order.
    left_out: column -> why (row index, ID-like), in header order.
    not_selected: columns outside ``columns`` (when it is given).
    kept_by_setting: column -> the setting that kept it against a rule.
  """
  kept: Tuple[str, ...]
  left_out: Dict[str, str]
  not_selected: Tuple[str, ...] = ()
  kept_by_setting: Dict[str, str] = dataclasses.field(default_factory=dict)

  def record(self) -> Dict:
    out = {}
    if self.left_out:
      out["left_out"] = dict(self.left_out)
    if self.not_selected:
      out["not_selected"] = list(self.not_selected)
    if self.kept_by_setting:
      out["kept"] = dict(self.kept_by_setting)
    return out

  def lines(self) -> List[str]:
    """One console line per column left out, naming why and how to keep it."""
    out = []
    for name, why in self.left_out.items():
      shown = repr(name) if name else "'' (no name)"
      keep = (f"To keep it, set {KEEP_KEY}=[{name!r}]" if name else
              "To keep it, name it in the CSV header and set "
              f"{KEEP_KEY}=['<name>']")
      out.append(f"leaving out column {shown}, {why}. {keep}")
    return out


def _numbers(values: Sequence[str]) -> Optional[List[float]]:
  try:
    return [float(v) for v in values]
  except ValueError:
    return None


def id_like_reason(name: str, values: Sequence[str], missing: int) -> Optional[str]:
  """Why a numeric column's sampled values (non-missing, in row order) make it ID-like,
  or None."""
  numbers = _numbers(values)
  if numbers is None or len(numbers) < column_rules.ID_MIN_VALUES:
    return None
  if len(set(numbers)) != len(numbers):
    return None
  whole = all(float(v).is_integer() for v in numbers)
  increasing = all(a < b for a, b in zip(numbers, numbers[1:]))
  if whole and increasing and not missing and not is_time_name(name):
    return (f"{ID_LIKE}: a row number ({len(numbers)} distinct integers, increasing with "
            f"the row order, in the sampled rows)")
  if is_id_name(name):
    return (f"{ID_LIKE}: an ID by its name ({len(numbers)} distinct values in "
            f"{len(numbers)} sampled rows)")
  return None


def choose(header: Sequence[str], sample_cells: Sequence[Sequence[str]],
           numeric: Sequence[str], required: Sequence[str],
           columns: Optional[Sequence[str]], keep: Sequence[str], na) -> Choice:
  """The columns to write.

  Args:
    header: every column, in file order.
    sample_cells: the sampled data rows' cells, in row order.
    numeric: the columns whose sampled cells are numbers (inference.NUMERIC_SHARE).
    required: the label and split key: always written.
    columns: ``example_gen.columns`` (None: every column, less the rules' exclusions).
    keep: ``example_gen.keep_columns``.
    na: the cells read as missing.
  """
  if columns is not None:
    chosen = set(columns) | set(required)
    return Choice(kept=tuple(c for c in header if c in chosen), left_out={},
                  not_selected=tuple(c for c in header if c not in chosen))
  left_out: Dict[str, str] = {}
  kept_by_setting: Dict[str, str] = {}
  numeric = set(numeric)
  for j, name in enumerate(header):
    if name in required:
      continue
    why = None
    if is_index_name(name, j):
      why = (f"{ROW_INDEX}: pandas' df.to_csv() writes the row index as a first column "
             f"without a name (df.to_csv(index=False) leaves it out)")
    elif name in numeric:
      cells = [row[j] for row in sample_cells]
      values = [c for c in cells if c not in na]
      if j == 0 and is_shuffled_index(values, len(cells) - len(values)):
        why = (f"{ROW_INDEX}: the row numbers 0..{len(values) - 1} in another order, "
               f"pandas' index written by df.to_csv() after df.sample(frac=1) (on a file "
               f"sorted by the label, a label leak)")
      else:
        why = id_like_reason(name, values, len(cells) - len(values))
    if why is None:
      continue
    if name in keep:
      kept_by_setting[name] = f"{KEEP_KEY} (the rule said: {why})"
    else:
      left_out[name] = why
  return Choice(kept=tuple(c for c in header if c not in left_out), left_out=left_out,
                kept_by_setting=kept_by_setting)
