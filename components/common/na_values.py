"""The text that reads as a missing value in a CSV cell, in every column type (pure).

By default it is the set pandas reads as missing (``pandas.read_csv``'s default
``na_values``): ``STR_NA_VALUES`` in ``pandas/_libs/parsers.pyx``, lines 1358-1377 of
pandas 1.5.3 (the version installed with TFX here; pandas 2 adds ``"None"``). It is
copied, not imported, so Beam workers need not import pandas;
tests/test_na_values.py compares the two.

An empty cell is always missing, whatever the configured tokens. Config
``example_gen.na_values`` (PartitionedExampleGen) and ``trainer.na_values`` (a string
feature of any Examples, e.g. stock CsvExampleGen's) replace the set; ``[]`` leaves only
the empty cell missing.
"""
from typing import FrozenSet, Iterable, Optional, Sequence, Tuple

PANDAS_NA_VALUES: Tuple[str, ...] = (
    "", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND",
    "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null")


def token_set(na_values: Optional[Iterable[str]] = None) -> FrozenSet[str]:
  """The tokens read as missing: ``na_values`` (None: pandas' default) plus ""."""
  tokens = PANDAS_NA_VALUES if na_values is None else tuple(na_values)
  return frozenset(tokens) | {""}


def numeric_tokens(tokens: Iterable[str]) -> Tuple[float, ...]:
  """The tokens that parse as numbers other than NaN (e.g. a configured "-999"): a
  numeric column compares its values with these, as pandas does."""
  out = []
  for t in tokens:
    try:
      v = float(t)
    except ValueError:
      continue
    if v == v:
      out.append(v)
  return tuple(sorted(set(out)))


def check(na_values: Optional[Sequence[str]]) -> Optional[str]:
  """None if ``na_values`` is a valid setting (None or a list of strings), else why not."""
  if na_values is None:
    return None
  if isinstance(na_values, str) or not all(isinstance(t, str) for t in na_values):
    return "must be a list of strings (use [] for none but the empty cell)"
  return None
