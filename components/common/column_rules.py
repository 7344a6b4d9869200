"""What a string column holds, decided the same way by PartitionedExampleGen's inference
(over its sampled rows, for its report) and by DistributedTrainer (over the train split,
which is what counts). Pure: no TensorFlow, no Beam.

* **dates**: at least ``DATE_SHARE`` (99%) of the column's non-missing values are ISO
  dates ``YYYY-MM-DD``, optionally followed by ``T`` or a space and a time ``HH:MM`` or
  ``HH:MM:SS`` (any fraction of a second and a ``Z`` or ``+HH:MM`` offset are allowed and
  ignored), with a valid calendar day. The trainer derives numeric features from them
  (``DATE_PARTS``, plus ``hour`` when some value has a time); a value that is not a date
  is a missing value of those features.
* **ID-like**: not dates, at least ``ID_MIN_VALUES`` (20) non-missing values, and
  distinct values / non-missing values >= ``ID_LIKE_RATIO`` (0.5, trainer config
  ``id_like_ratio``). Each value then recurs about twice or less: an embedding would
  learn most ids from one or two rows, and eval rows bring mostly unseen values (id 0).
  The car-name column of issue 38's 406-row file (256 distinct names in 329 train rows,
  ratio 0.78) cost R^2 0.80 -> 0.39 when embedded; a real category repeats its values
  (taxi ``company``: 51 in 2,000 rows, 0.03; penguin ``island``: 3 in 275). Below 20
  values nothing is judged: too few to tell.
"""
import datetime
import re
from typing import Mapping, Optional, Tuple

DATE_SHARE = 0.99
ID_LIKE_RATIO = 0.5
ID_MIN_VALUES = 20
DATE_PARTS = ("year", "month", "day", "day_of_week")  # day_of_week: Monday 0 .. Sunday 6.
HOUR = "hour"
# Anchored: the whole cell. Groups: year, month, day, hour (optional).
DATE_PATTERN = (r"(\d{4})-(\d{2})-(\d{2})"
                r"(?:[T ](\d{2}):\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
_DATE_RE = re.compile(DATE_PATTERN)


def parse_date(text: str) -> Optional[Tuple[int, int, int, Optional[int]]]:
  """(year, month, day, hour or None) of an ISO date cell, or None if it is not one."""
  m = _DATE_RE.fullmatch(text)
  if m is None:
    return None
  year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
  hour = None if m.group(4) is None else int(m.group(4))
  try:
    datetime.date(year, month, day)
  except ValueError:
    return None
  if hour is not None and hour > 23:
    return None
  return year, month, day, hour


def date_parts(text: str) -> Optional[Mapping[str, int]]:
  """{part: value} of an ISO date cell (``hour`` only when it has a time), or None."""
  parsed = parse_date(text)
  if parsed is None:
    return None
  year, month, day, hour = parsed
  out = {"year": year, "month": month, "day": day,
         "day_of_week": datetime.date(year, month, day).weekday()}
  if hour is not None:
    out[HOUR] = hour
  return out


def date_kind(counts: Mapping[str, int]) -> Optional[Tuple[str, ...]]:
  """The parts to derive when the values (value -> count, missing ones left out) are
  dates by the rule above, else None."""
  total = sum(counts.values())
  if not total:
    return None
  dates = 0
  timed = False
  for value, n in counts.items():
    parsed = parse_date(value)
    if parsed is not None:
      dates += n
      timed = timed or parsed[3] is not None
  if dates < DATE_SHARE * total:
    return None
  return DATE_PARTS + ((HOUR,) if timed else ())


def id_like(distinct: int, values: int, ratio: Optional[float] = ID_LIKE_RATIO) -> bool:
  """True if ``distinct`` values among ``values`` non-missing ones make a column ID-like
  (``ratio`` None: never)."""
  return ratio is not None and values >= ID_MIN_VALUES and distinct >= ratio * values
