"""What the trainer makes of each string feature, from the train split's counts (pure).

Decided once, after the scan (stats.prepare_all), for the string features of any
Examples (PartitionedExampleGen's or stock CsvExampleGen's), in this order:

1. **Missing-value tokens** (``na_values``, common/na_values.py: pandas' set by default)
   are missing values, never categories: left out of the vocabulary (id 0, as an absent
   value) and counted in ``missing values``.
2. ``keep_as_category`` names a feature: it stays a category, whatever follows.
3. **Dates** (common/column_rules.py: >= 99% of the non-missing values are ISO dates):
   the feature becomes numeric features ``<name>_year``, ``_month``, ``_day``,
   ``_day_of_week`` (and ``_hour`` when values have a time), computed in the graph from
   the raw string (preprocess.Preprocessor), so serving takes the same raw column. A
   value that is not a date is a missing value of those features (filled with the train
   mean of each).
4. **Numbers written as text**: a feature whose values held a missing-value token and
   whose other values are >= 99% numbers (stock CsvExampleGen types a CSV column with
   ``NA`` cells as a string column) is read as a number in the graph, the token and any
   non-number missing, with one WARNING naming the feature, the tokens and the fix.
5. **ID-like** (column_rules.id_like, trainer config ``id_like_ratio``): left out of the
   model, with one console line naming it, why, and how to keep it.

Everything decided is recorded in history.json's ``input_columns``.
"""
import dataclasses
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from tfx_parallel.components.common import column_rules

NUMBER = "number"
NUMBER_SHARE = 0.99
# What a number looks like in a CSV cell (the graph uses the same pattern, RE2 syntax).
NUMBER_PATTERN = r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_NUMBER_RE = re.compile(NUMBER_PATTERN)
KEEP_KEY = "trainer.keep_as_category"
RATIO_KEY = "trainer.id_like_ratio"


@dataclasses.dataclass(frozen=True)
class Derived:
  """Numeric features computed from one string feature.

  Attributes:
    source: the string feature in the tf.Examples.
    parts: column_rules date parts, or ("number",).
    names: the model input of each part.
    mean, std: of each part over the train values that have it.
    invalid: non-missing train values that are not dates / numbers (missing parts).
  """
  source: str
  parts: Tuple[str, ...]
  names: Tuple[str, ...]
  mean: Tuple[float, ...]
  std: Tuple[float, ...]
  invalid: int = 0


@dataclasses.dataclass
class Columns:
  """The decisions of :func:`decide` (see the module docstring)."""
  counts: Dict[str, Dict[str, int]]           # kept categories: value -> count, no tokens
  derived: Dict[str, Derived]
  left_out: Dict[str, str]                     # feature -> why
  na_tokens: Dict[str, Dict[str, int]]         # feature -> token -> train count
  messages: List[str] = dataclasses.field(default_factory=list)
  warnings: List[str] = dataclasses.field(default_factory=list)

  @property
  def categories(self) -> List[str]:
    return list(self.counts)

  def record(self) -> Dict[str, Any]:
    """history.json's ``input_columns`` (empty when nothing was decided)."""
    out: Dict[str, Any] = {}
    if self.left_out:
      out["left_out"] = dict(self.left_out)
    dates = {s: list(d.names) for s, d in self.derived.items() if d.parts != (NUMBER,)}
    if dates:
      out["dates"] = dates
    numbers = sorted(s for s, d in self.derived.items() if d.parts == (NUMBER,))
    if numbers:
      out["numbers_from_text"] = numbers
    if self.na_tokens:
      out["na_tokens"] = {k: dict(v) for k, v in self.na_tokens.items()}
    return out


def _moments(values: Sequence[Tuple[float, int]]) -> Tuple[float, float]:
  n = sum(c for _, c in values)
  if not n:
    return 0.0, 1.0
  mean = sum(v * c for v, c in values) / n
  var = sum(c * (v - mean) ** 2 for v, c in values) / n
  return float(mean), float(max(math.sqrt(var), 1e-6))


def is_number(text: str) -> bool:
  return _NUMBER_RE.fullmatch(text) is not None


def _date_derived(name: str, values: Mapping[str, int], parts: Tuple[str, ...],
                  taken: Set[str]) -> Derived:
  per_part: Dict[str, List[Tuple[float, int]]] = {p: [] for p in parts}
  invalid = 0
  for text, n in values.items():
    got = column_rules.date_parts(text)
    if got is None:
      invalid += n
      continue
    for p in parts:
      if p in got:
        per_part[p].append((float(got[p]), n))
  sep = "__" if any(f"{name}_{p}" in taken for p in parts) else "_"
  moments = [_moments(per_part[p]) for p in parts]
  return Derived(name, parts, tuple(f"{name}{sep}{p}" for p in parts),
                 tuple(m for m, _ in moments), tuple(s for _, s in moments), invalid)


def _number_derived(name: str, values: Mapping[str, int]) -> Derived:
  numbers = [(float(v), n) for v, n in values.items() if is_number(v)]
  mean, std = _moments(numbers)
  invalid = sum(values.values()) - sum(n for _, n in numbers)
  return Derived(name, (NUMBER,), (name,), (mean,), (std,), invalid)


def _quoted(tokens) -> str:
  return ", ".join(repr(t) for t in tokens)


def decide(counts: Mapping[str, Mapping[str, int]], string_keys: Sequence[str],
           na: Set[str], id_like_ratio: Optional[float] = column_rules.ID_LIKE_RATIO,
           keep: Sequence[str] = (), taken: Sequence[str] = ()) -> Columns:
  """The decisions for ``string_keys`` from ``counts`` (feature -> value -> train count,
  as stats.scan counts them); ``taken``: the other feature names (derived names avoid
  them)."""
  taken_names = set(taken) | set(string_keys)
  out = Columns(counts={}, derived={}, left_out={}, na_tokens={})
  for name in string_keys:
    raw = counts.get(name, {})
    tokens = {t: int(n) for t, n in raw.items() if t in na}
    values = {v: int(n) for v, n in raw.items() if v not in na}
    if tokens:
      out.na_tokens[name] = dict(sorted(tokens.items()))
    total = sum(values.values())
    keep_hint = f"{KEEP_KEY}=[{name!r}]"
    if name in keep:
      out.counts[name] = values
      continue
    parts = column_rules.date_kind(values)
    if parts:
      d = out.derived[name] = _date_derived(name, values, parts, taken_names)
      out.messages.append(
          f"date feature {name!r}: {total - d.invalid} of {total} train values are ISO "
          f"dates, read as numeric features {', '.join(d.names)} (a value that is not a "
          f"date is missing). To use it as a category, set {keep_hint}")
      continue
    numbers = sum(n for v, n in values.items() if is_number(v))
    if tokens and total and numbers >= NUMBER_SHARE * total:
      out.derived[name] = _number_derived(name, values)
      shown = _quoted(tokens)
      out.warnings.append(
          f"string feature {name!r} holds numbers ({numbers} of {total + sum(tokens.values())}"
          f" train values) and the missing-value token(s) {shown} ({sum(tokens.values())}):"
          f" whatever wrote the Examples (stock CsvExampleGen reads {shown} as text) typed "
          f"it as a string column. The trainer reads it as a number, {shown} as missing. "
          f"Fix it at the source: leave missing cells empty in the CSV, or ingest it with "
          f"PartitionedExampleGen, which reads example_gen.na_values as missing; to keep "
          f"it a category, set {keep_hint}")
      continue
    if column_rules.id_like(len(values), total, id_like_ratio):
      why = (f"ID-like: {len(values)} distinct of {total} non-missing train values "
             f"(ratio {len(values) / total:.2f} >= {RATIO_KEY} {id_like_ratio:g})")
      out.left_out[name] = why
      out.messages.append(
          f"leaving out string feature {name!r}, {why}: an embedding would learn most "
          f"values from a row or two and meet mostly unseen ones. To embed it, set "
          f"{keep_hint}")
      continue
    out.counts[name] = values
  return out
