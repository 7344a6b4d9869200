"""What the splits hold: duplicate rows, distinct rows and label values per split, and
whether the eval split represents the data.

A side branch of the ingest (ingest.build) counts, per batch and split, the 64-bit hash
of every written row (its kept columns, label included: ``row_hashes``) and the label's
values; one merge writes ``split_stats.json`` into the staging directory, where the
executor reads it (``read``). ``assess`` (pure) turns it into the Examples' properties
``duplicate_share`` and ``eval_split_warnings`` (components/common/keys.py).

The eval split is unrepresentative (one warning each, in words a user can act on) when:

* it holds few distinct rows: fewer than ``MIN_EVAL_DISTINCT_ROWS`` and fewer than its
  rows (duplicates make up the rest), so its metrics rest on a handful of examples;
* a class is missing from a split although it should have ``MIN_EXPECTED_CLASS_ROWS``
  or more rows there by its share of the data (a label is class-like when it is a string
  or holds at most ``MAX_CLASSES`` whole numbers);
* its label distribution is far from train's: classes, a total variation distance of at
  least ``MAX_CLASS_SHIFT`` that chance explains with probability under ``P_VALUE``
  (chi-square against train's shares); numbers, an eval mean at least
  ``MAX_MEAN_SHIFT`` train standard deviations away and ``MEAN_Z`` standard errors.
"""
import hashlib
import json
import math
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_parallel.components.partitioned_example_gen import partition
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch

STATS_FILE = "split_stats.json"
MAX_LABEL_VALUES = 1000
MAX_CLASSES = 20
MIN_EVAL_DISTINCT_ROWS = 30
MIN_EXPECTED_CLASS_ROWS = 5
MAX_CLASS_SHIFT = 0.15
P_VALUE = 1e-3
MAX_MEAN_SHIFT = 0.25
MEAN_Z = 4.0
_MISSING = np.uint64(0x9E3779B97F4A7C15)
# What a user can do, ending each warning (the evaluator's verdict repeats the warnings):
# the row split is seeded (partition.file_bases), so another seed gives another split.
RESPLIT = "set example_gen.seed=N with another N for another split"
DEDUPLICATE = ("drop the copies in pandas (df.drop_duplicates()) if they are not real "
               "repeats, or bring more distinct rows")


def _string_hashes(values: Sequence[Optional[bytes]]) -> np.ndarray:
  """blake2b-64 of each value (None: a constant), hashed once per distinct value."""
  known = {v: int.from_bytes(hashlib.blake2b(v, digest_size=8).digest(), "big")
           for v in set(values) if v is not None}
  known[None] = int(_MISSING)
  return np.fromiter(map(known.__getitem__, values), dtype=np.uint64, count=len(values))


def row_hashes(batch: RowBatch, numeric_keys: Sequence[str],
               string_keys: Sequence[str]) -> np.ndarray:
  """uint64 per row from the values of its columns (missing values included), the same
  on every worker and run (no salted hash): equal rows, equal hashes."""
  columns = []
  for k in numeric_keys:
    values = np.asarray(batch.numeric[k], dtype=np.float64) + 0.0  # -0.0 is 0.0
    values[np.isnan(values)] = np.nan  # One NaN.
    columns.append(values.view(np.uint64))
  columns.extend(_string_hashes(batch.strings[k]) for k in string_keys)
  if not columns:
    return np.zeros(batch.num_rows, dtype=np.uint64)
  bits = np.stack(columns, axis=1)  # [rows, columns]
  with np.errstate(over="ignore"):  # Each column salted by its position, then mixed.
    salted = bits + np.arange(1, bits.shape[1] + 1, dtype=np.uint64) * _MISSING
    return partition.splitmix64(partition.splitmix64(salted).sum(axis=1, dtype=np.uint64))


def _label_counts(batch: RowBatch, label: str, where: np.ndarray) -> Dict[str, Any]:
  """The label's values at rows ``where``: counts by text (None past MAX_LABEL_VALUES
  distinct values) and, for a numeric label, n, sum and sum of squares."""
  if label in batch.strings:
    column = batch.strings[label]
    counts: Dict[str, int] = {}
    for j in where.tolist():
      v = column[j]
      if v is not None:
        text = v.decode("utf-8", "replace")
        counts[text] = counts.get(text, 0) + 1
    return {"labels": counts if len(counts) <= MAX_LABEL_VALUES else None}
  v = np.asarray(batch.numeric[label], dtype=np.float64)[where]
  v = v[~np.isnan(v)]
  values, n = np.unique(v, return_counts=True)
  # Counted by value only while they may be classes (_class_like: at most MAX_CLASSES
  # whole numbers); a continuous label is judged by its mean (_mean_warning).
  labels = (None if values.size > MAX_CLASSES or not np.all(np.mod(values, 1) == 0) else
            {f"{x:.17g}": int(c) for x, c in zip(values.tolist(), n.tolist())})
  return {"labels": labels, "label_n": int(v.size), "label_sum": float(v.sum()),
          "label_sumsq": float((v * v).sum())}


class _BatchStats(beam.DoFn):
  """RowBatch -> {split: {"hashes", "rows", "labels", "label_n", ...}}."""

  def __init__(self, splits, num_shards: int, numeric_keys, string_keys, label: str):
    self._partitioner = partition.Partitioner(splits, num_shards)
    self._numeric, self._strings, self._label = tuple(numeric_keys), tuple(string_keys), label

  def process(self, batch: RowBatch):
    split, _ = self._partitioner.assign_keys(batch.keys)
    hashes = row_hashes(batch, self._numeric, self._strings)
    out = {}
    for i, name in enumerate(self._partitioner.split_names):
      where = np.flatnonzero(split == i)
      if where.size:
        out[name] = {"hashes": np.unique(hashes[where]), "rows": int(where.size),
                     **_label_counts(batch, self._label, where)}
    yield out


def merge(parts: Iterable[Dict[str, Dict[str, Any]]]) -> Dict[str, Any]:
  """The per-batch stats -> split_stats.json's content."""
  hashes: Dict[str, List[np.ndarray]] = {}
  splits: Dict[str, Dict[str, Any]] = {}
  for part in parts:
    for name, entry in part.items():
      hashes.setdefault(name, []).append(entry["hashes"])
      s = splits.setdefault(name, {"rows": 0, "labels": {}, "labels_overflow": False})
      s["rows"] += entry["rows"]
      if entry["labels"] is None:
        s["labels"], s["labels_overflow"] = {}, True
      if not s["labels_overflow"]:
        for v, n in entry["labels"].items():
          s["labels"][v] = s["labels"].get(v, 0) + n
        if len(s["labels"]) > MAX_LABEL_VALUES:
          s["labels"], s["labels_overflow"] = {}, True
      for k in ("label_n", "label_sum", "label_sumsq"):
        if k in entry:
          s[k] = s.get(k, 0) + entry[k]
  every = []
  for name, arrays in hashes.items():
    distinct = np.unique(np.concatenate(arrays))
    splits[name]["distinct_rows"] = int(distinct.size)
    every.append(distinct)
  rows = sum(s["rows"] for s in splits.values())
  distinct_rows = int(np.unique(np.concatenate(every)).size) if every else 0
  # A row repeated across splits counts once in distinct_rows: duplicates are over all.
  return {"rows": rows, "distinct_rows": distinct_rows, "splits": splits}


def _write(parts, path: str, options=None) -> None:
  if options is not None:
    FileSystems.set_options(options)
  with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
    f.write(json.dumps(merge(parts), sort_keys=True).encode("utf-8"))


@beam.ptransform_fn
def WriteSplitStats(rows, root: str, splits, num_shards: int, numeric_keys, string_keys,
                    label: str, options=None):
  """RowBatches -> root/split_stats.json (one GroupByKey on a constant key, as
  write.WriteSummary, for DaskRunner)."""
  return (rows
          | "BatchStats" >> beam.ParDo(_BatchStats(splits, num_shards, numeric_keys,
                                                   string_keys, label))
          | "OneKey" >> beam.Map(lambda s: (None, s))
          | "Collect" >> beam.GroupByKey()
          | "Write" >> beam.MapTuple(lambda _, parts: _write(
              parts, root.rstrip("/") + "/" + STATS_FILE, options)))


def read(root: str) -> Optional[Dict[str, Any]]:
  """split_stats.json of a staging directory; None when no batch had rows."""
  path = root.rstrip("/") + "/" + STATS_FILE
  if not FileSystems.exists(path):
    return None
  with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
    return json.loads(f.read().decode("utf-8"))


# ----------------------------------------------------------------------------- assess


def duplicate_share(stats: Dict[str, Any]) -> float:
  """Share of rows that repeat an earlier row (over all splits)."""
  rows = stats.get("rows", 0)
  return (rows - stats.get("distinct_rows", 0)) / rows if rows else 0.0


def _class_like(splits: Dict[str, Dict[str, Any]]) -> bool:
  values = set()
  for s in splits.values():
    if s.get("labels_overflow"):
      return False
    values.update(s["labels"])
  if not any("label_n" in s for s in splits.values()):
    return True  # A string label: class names.
  try:
    numbers = [float(v) for v in values]
  except ValueError:
    return True
  return len(numbers) <= MAX_CLASSES and all(n.is_integer() for n in numbers)


def _shown(name: str) -> str:
  return repr(name)


def assess(stats: Optional[Dict[str, Any]], train: str = "train", eval_split: str = "eval"
           ) -> List[str]:
  """The eval split's warnings (see the module docstring); [] when it looks fine."""
  if not stats:
    return []
  splits = stats["splits"]
  tr, ev = splits.get(train), splits.get(eval_split)
  if not tr or not ev:
    return [f"the {eval_split!r} split is empty" if tr else f"the {train!r} split is empty"]
  warnings = []
  if ev["distinct_rows"] < min(MIN_EVAL_DISTINCT_ROWS, ev["rows"]):
    warnings.append(
        f"the {eval_split!r} split holds {ev['distinct_rows']} distinct rows in its "
        f"{ev['rows']} rows (duplicates make up the rest): its metrics rest on "
        f"{ev['distinct_rows']} examples: {DEDUPLICATE}")
  if _class_like(splits):
    warnings.extend(_class_warnings(tr["labels"], ev["labels"], train, eval_split))
  elif tr.get("label_n", 0) > 1 and ev.get("label_n", 0) > 0:
    warnings.extend(_mean_warning(tr, ev, train, eval_split))
  return warnings


def _class_warnings(tr: Dict[str, int], ev: Dict[str, int], train: str, eval_split: str
                    ) -> List[str]:
  n_tr, n_ev = sum(tr.values()), sum(ev.values())
  total = n_tr + n_ev
  out = []
  if not n_tr or not n_ev:
    return out
  for name in sorted(set(tr) | set(ev)):
    share = (tr.get(name, 0) + ev.get(name, 0)) / total
    for split, counts, n in ((train, tr, n_tr), (eval_split, ev, n_ev)):
      if not counts.get(name) and share * n >= MIN_EXPECTED_CLASS_ROWS:
        out.append(f"label class {_shown(name)} has no rows in the {split!r} split "
                   f"(about {share * n:.0f} expected from its share of the data); "
                 f"{RESPLIT}")
  classes = sorted(set(tr) | set(ev))
  shift = 0.5 * sum(abs(tr.get(c, 0) / n_tr - ev.get(c, 0) / n_ev) for c in classes)
  if shift >= MAX_CLASS_SHIFT and len(classes) > 1:
    # Start-up: scipy.stats only where a class shift needs its test.
    from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
    expected = [max(tr.get(c, 0) / n_tr, 0.5 / n_tr) * n_ev for c in classes]
    scale = n_ev / sum(expected)
    chi2 = sum((ev.get(c, 0) - e * scale) ** 2 / (e * scale) for c, e in zip(classes, expected))
    p = float(scipy_stats.chi2.sf(chi2, len(classes) - 1))
    if p < P_VALUE:
      def top(counts, n):
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        return ", ".join(f"{_shown(c)} {100 * k / n:.0f}%" for c, k in ranked)
      out.append(f"the label distribution of the {eval_split!r} split is far from the "
                 f"{train!r} split's (total variation {shift:.2f}, chi-square p {p:.1g}): "
                 f"{eval_split} {top(ev, n_ev)}; {train} {top(tr, n_tr)}; {RESPLIT}")
  return out


def _mean_warning(tr: Dict[str, Any], ev: Dict[str, Any], train: str, eval_split: str
                  ) -> List[str]:
  mean_tr = tr["label_sum"] / tr["label_n"]
  var_tr = max(tr["label_sumsq"] / tr["label_n"] - mean_tr ** 2, 0.0)
  std = math.sqrt(var_tr)
  mean_ev = ev["label_sum"] / ev["label_n"]
  if std == 0:
    return []
  shift = abs(mean_ev - mean_tr) / std
  z = shift * math.sqrt(ev["label_n"])
  if shift >= MAX_MEAN_SHIFT and z >= MEAN_Z:
    return [f"the label's mean in the {eval_split!r} split, {mean_ev:.4g}, is {shift:.2f} "
            f"standard deviations from the {train!r} split's {mean_tr:.4g} ({z:.1f} "
            f"standard errors); {RESPLIT}"]
  return []


def summary_line(stats: Optional[Dict[str, Any]]) -> str:
  """One console line: rows, distinct rows and the duplicate share, per split."""
  if not stats:
    return "no rows"
  per = ", ".join(f"{name} {s['rows']} rows ({s['distinct_rows']} distinct)"
                  for name, s in sorted(stats["splits"].items()))
  return (f"{stats['rows']} rows, {stats['distinct_rows']} distinct: duplicate share "
          f"{100 * duplicate_share(stats):.1f}%; {per}")
