"""Numbers for people: 4 significant digits, thousands separators for rates.

Console lines and tables use these; files meant for programs (``metrics.json``,
``history.json``, ``--json``) keep full precision. Pure functions, no imports beyond
the standard library, so any component or the CLI can use them.
"""
import math
from typing import Optional

SIGNIFICANT_DIGITS = 4


def _special(value) -> Optional[str]:
  """The text of None / NaN / inf / a non-number, else None (a finite number)."""
  if value is None:
    return "-"
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return str(value)
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)  # "nan", "inf", "-inf": never hide a non-finite value.
  return None


def sig(value, digits: int = SIGNIFICANT_DIGITS) -> str:
  """``value`` to ``digits`` significant digits: 0.00010178999 -> "0.0001018".

  Integers are printed whole (a step count is exact); values of 10**digits or more are
  rounded to a whole number with thousands separators (123456.7 -> "123,457") rather
  than put in scientific notation; tiny values use it (9.5e-08 -> "9.5e-08").
  """
  special = _special(value)
  if special is not None:
    return special
  if isinstance(value, int):
    return f"{value:,}" if abs(value) >= 10 ** digits else str(value)
  if abs(value) >= 10 ** digits:
    return f"{value:,.0f}"
  return f"{value:.{digits}g}"


def rate(value) -> str:
  """A throughput (examples/s, rows/s): whole numbers with separators from 100 up.

  4582.613 -> "4,583"; 12.3456 -> "12.35".
  """
  special = _special(value)
  if special is not None:
    return special
  if abs(value) >= 100:
    return f"{value:,.0f}"
  return sig(float(value))


def count(value) -> str:
  """A count of rows or steps with thousands separators: 10000 -> "10,000"."""
  special = _special(value)
  if special is not None:
    return special
  return f"{int(value):,}"


def seconds(value) -> str:
  """A duration: "0.42 s", "4.2 s", "12 s", "4 min 05 s", "2 h 03 min"."""
  special = _special(value)
  if special is not None:
    return special
  value = float(value)
  if value < 0:
    return "-" + seconds(-value)
  if value < 10:
    return f"{value:.2g} s" if value < 1 else f"{value:.1f} s"
  if value < 60:
    return f"{value:.0f} s"
  whole = int(round(value))
  if whole < 3600:
    return f"{whole // 60} min {whole % 60:02d} s"
  return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def name(text: str) -> str:
  """A class or column name as an item of a comma-separated list: quoted (repr) when it
  holds a comma or quote, starts or ends with a space, or is empty, so the list reads
  unambiguously; as it is otherwise."""
  text = str(text)
  if not text or "," in text or "'" in text or '"' in text or text != text.strip():
    return repr(text)
  return text
