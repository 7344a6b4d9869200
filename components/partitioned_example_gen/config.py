"""Typed config of PartitionedExampleGen, validated before any work starts."""
import dataclasses
from typing import Dict, Optional, Tuple

from tfx_parallel.components.common import na_values as na_lib
from tfx_parallel.components.common.config_util import require

SYNTHETIC = "synthetic"
TAXI = "taxi"
BAD_ROW_POLICIES = ("fail", "skip")
DEFAULT_WEIGHTS = (1.0, 2.0)


@dataclasses.dataclass(frozen=True)
class ExampleGenConfig:
  """Where the rows come from and how they are partitioned.

  Attributes:
    source: "synthetic" (the seed problem, generated inside Beam), "taxi" (the Chicago
      taxi CSV shipped in the tfx wheel) or a CSV file glob (local, gs://, ...).
    label: label column. Defaults: "y" for synthetic, "fare" for taxi; a CSV has no
      default: it must be named (sources.plan_source lists the header's columns).
    rows: synthetic rows to generate.
    num_features: synthetic feature count F (columns x0..x{F-1}).
    weights: synthetic true weights; default [1, 2] extended deterministically.
    bias: synthetic true bias.
    noise: standard deviation of the synthetic label noise.
    seed: synthetic generator seed, and the seed of a CSV's row split (split_key None).
    split_ratios: split name -> hash buckets (default train:eval = 4:1); the shorthand
      for stock output_config, splits in sorted name order (output_splits.py).
    split_key: shorthand for output_config's partition_feature_name: an int or string
      column whose value decides the split (rows that share it stay together). None
      (default): a CSV is split like a seeded random split over rows: each row's split
      is a hash of (seed, its file, its line number), so every occurrence of a duplicate
      row is placed on its own (partition.py ``row_ids``). A stock output_config without
      partition_feature_name hashes the whole row, as stock ExampleGen does.
    num_workers: training workers the shards are sized for.
    shards_per_worker: files per worker per split (shards = workers * this).
    bad_row_policy: "fail" (default: error naming file and line) or "skip" (count them).
    column_types: optional CSV column -> "float" | "int" | "string"; others are inferred
      from the first ``type_inference_rows`` data rows (see inference.py: numeric when
      >= 99% of the sampled non-empty cells are numbers; the other cells are bad rows).
    columns: optional CSV columns to keep (the label is always kept): exactly these are
      written, whatever their name or values; None keeps every column but pandas' row
      index and ID-like numeric columns (column_choice.py ``choose``), except for "taxi",
      which keeps sources.TAXI_FEATURE_COLUMNS.
    keep_columns: columns that the row-index and ID-like rules would leave out, kept
      as features.
    verify_output: re-read every written record (both CRCs, parse as tf.train.Example,
      row counts per split) before the artifact is published; off by default, its cost
      is in benchmarks/RESULTS.md.
    type_inference_rows: data rows (from the first files, in order) sampled to infer
      the types of the columns not in column_types.
    na_values: cell texts read as a missing value in every column (numeric, string,
      label), besides the empty cell, which always is. None (default): the set pandas
      reads, ``NA``, ``N/A``, ``NULL``, ``NaN``, ``#N/A``, ... (common/na_values.py,
      from pandas' ``STR_NA_VALUES``); a list replaces it; ``[]``: only the empty cell.
  """
  source: str = SYNTHETIC
  label: Optional[str] = None
  rows: int = 10_000
  num_features: int = 2
  weights: Optional[Tuple[float, ...]] = None
  bias: float = 3.0
  noise: float = 0.01
  seed: int = 42
  split_ratios: Dict[str, int] = dataclasses.field(
      default_factory=lambda: {"train": 4, "eval": 1})
  split_key: Optional[str] = None
  num_workers: int = 1
  shards_per_worker: int = 2
  bad_row_policy: str = "fail"
  column_types: Optional[Dict[str, str]] = None
  columns: Optional[Tuple[str, ...]] = None
  keep_columns: Tuple[str, ...] = ()
  verify_output: bool = False
  type_inference_rows: int = 10_000
  na_values: Optional[Tuple[str, ...]] = None

  @property
  def is_synthetic(self) -> bool:
    return self.source == SYNTHETIC

  @property
  def label_key(self) -> str:
    """The label column; "" for a CSV without one (plan_source then fails, listing the
    columns)."""
    if self.label:
      return self.label
    return {SYNTHETIC: "y", TAXI: "fare"}.get(self.source, "")

  @property
  def num_shards(self) -> int:
    return self.num_workers * self.shards_per_worker

  def true_weights(self) -> Tuple[float, ...]:
    """[1, 2] extended deterministically: w_i = 1 + i for i >= 2 too."""
    if self.weights is not None:
      return tuple(float(w) for w in self.weights)
    return tuple(float(i + 1) for i in range(self.num_features))

  @property
  def split_names(self) -> Tuple[str, ...]:
    """The shorthand's split names in a fixed (sorted) order, independent of dict order
    and JSON. With an output_config, output_splits.resolve has the names."""
    return tuple(sorted(self.split_ratios))

  def validate(self) -> "ExampleGenConfig":
    require(isinstance(self.source, str) and bool(self.source), "source",
            "must be 'synthetic', 'taxi' or a CSV path/glob")
    require(isinstance(self.rows, int) and self.rows > 0, "rows",
            f"must be a positive integer. Received: rows={self.rows!r}")
    require(isinstance(self.num_features, int) and self.num_features > 0,
            "num_features", f"must be >= 1. Received: {self.num_features!r}")
    if self.weights is not None:
      require(len(self.weights) == self.num_features, "weights",
              f"needs num_features={self.num_features} values. "
              f"Received: {len(self.weights)}")
    require(self.noise >= 0, "noise", f"must be >= 0. Received: {self.noise}")
    require(isinstance(self.seed, int) and self.seed >= 0, "seed",
            f"must be a non-negative integer. Received: {self.seed!r}")
    require(bool(self.split_ratios), "split_ratios", "must name at least one split")
    for name, ratio in self.split_ratios.items():
      require(isinstance(ratio, int) and ratio > 0, f"split_ratios.{name}",
              f"must be a positive integer. Received: {ratio!r}")
      require(name.replace("_", "").replace("-", "").isalnum(),
              f"split_ratios.{name}", "split names must be alphanumeric")
    require(isinstance(self.num_workers, int) and self.num_workers >= 1,
            "num_workers", f"must be >= 1. Received: {self.num_workers!r}")
    require(isinstance(self.shards_per_worker, int) and self.shards_per_worker >= 1,
            "shards_per_worker", f"must be >= 1. Received: {self.shards_per_worker!r}")
    require(self.bad_row_policy in BAD_ROW_POLICIES, "bad_row_policy",
            f"must be one of {BAD_ROW_POLICIES}. Received: {self.bad_row_policy!r}")
    require(isinstance(self.verify_output, bool), "verify_output",
            f"must be true or false. Received: {self.verify_output!r}")
    require(isinstance(self.type_inference_rows, int) and self.type_inference_rows >= 1,
            "type_inference_rows",
            f"must be a positive integer. Received: {self.type_inference_rows!r}")
    problem = na_lib.check(self.na_values)
    require(problem is None, "na_values", f"{problem}. Received: {self.na_values!r}")
    if self.column_types:
      for col, typ in self.column_types.items():
        require(typ in ("float", "int", "string"), f"column_types.{col}",
                f"must be float, int or string. Received: {typ!r}")
    if self.is_synthetic:
      require(self.split_key is None, "split_key",
              "synthetic rows are split by row index; leave split_key unset. "
              f"Received: {self.split_key!r}")
      features = {f"x{i}" for i in range(self.num_features)}
      require(self.label_key not in features, "label",
              f"must not clash with the synthetic features x0..x{self.num_features - 1}. "
              f"Received: {self.label!r}")
    if self.columns is not None:
      require(len(self.columns) > 0 and all(isinstance(c, str) and c for c in self.columns),
              "columns", f"must be a non-empty list of column names. Received: {self.columns!r}")
      require(len(set(self.columns)) == len(self.columns), "columns",
              f"has duplicates. Received: {self.columns!r}")
    require(isinstance(self.keep_columns, (list, tuple))
            and all(isinstance(c, str) and c for c in self.keep_columns), "keep_columns",
            f"must be a list of column names. Received: {self.keep_columns!r}")
    return self
