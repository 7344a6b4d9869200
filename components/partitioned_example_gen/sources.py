"""The three row sources: synthetic, CSV files, and the Chicago taxi CSV from the tfx wheel.

``plan_source(config)`` runs on the driver before Beam starts and does every check that
needs no full read: the glob matches files, the first file has a header naming the label,
``columns`` / ``column_types`` / the partition feature name real columns, and the column
types are known (explicit, or inferred from the first rows by inference.py). It returns a
``SyntheticSpec`` or a ``CsvLayout``; ``read_rows(pipeline, plan, policy)`` turns either
into a PCollection of ``RowBatch``.

Synthetic rows: ``y = x . w + b + noise`` with ``x ~ N(0, 1)`` per feature and
``noise ~ N(0, config.noise^2)``. Rows are generated inside Beam in chunks of
``SYNTHETIC_CHUNK_ROWS``; chunk ``i`` uses ``numpy.random.default_rng([seed, i])``, so the
data depends only on the config and never has to fit in the driver's memory.

CSV rows: one record per line (quoted fields may contain commas, not newlines), a header
row in every file (all files must have the same header), UTF-8. Line numbers count from 1
with the header as line 1, so error messages match what an editor shows. Blank lines are
ignored. Numeric columns ("float", "int") are parsed with ``float``/``int`` (an int beyond
+-2**53 is a bad cell: a RowBatch holds ints as float64, exact only that far). An empty
cell, a cell that is one of the ``na_values`` tokens (pandas' set by default: ``NA``,
``N/A``, ``NULL``, ``NaN``, ...; common/na_values.py), and in a float column the text
``nan`` are missing values, in every column type: the feature is absent from that
Example.
Each row's split key is its position (partition.row_ids, seeded), or with a split key or
a stock output_config, stock CsvExampleGen's (stock_key.py). Files are read by
line-aligned byte ranges (file_ranges), so one big file is read in parallel.
"""
import csv
import dataclasses
import difflib
import os
from typing import Dict, FrozenSet, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from tfx_parallel.components.common import na_values as na_lib
from tfx_parallel.components.partitioned_example_gen import column_choice
from tfx_parallel.components.partitioned_example_gen import config as config_lib
from tfx_parallel.components.partitioned_example_gen import inference
from tfx_parallel.components.partitioned_example_gen import partition
from tfx_parallel.components.partitioned_example_gen import stock_key
from tfx_parallel.components.partitioned_example_gen.rows import MAX_EXACT_INT
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch
from tfx_parallel.components.partitioned_example_gen.rows import string_column

METRICS_NAMESPACE = "PartitionedExampleGen"

SYNTHETIC_CHUNK_ROWS = 4096   # rows per generated element; part of the data's definition.
CSV_BATCH_LINES = 1000        # lines per element between reading and parsing.
_READ_BLOCK_BYTES = 4 << 20
RANGE_BYTES = 8 << 20         # bytes per read range of an uncompressed CSV file.

NUMERIC_TYPES = inference.NUMERIC_TYPES

# The taxi CSV: label "fare"; numeric features that are known when a trip ends. Dropped:
# "tips" (paid after the fare, a leak), the ID-like census tracts and community areas,
# "trip_start_timestamp" (redundant with month/day/hour, and float32 cannot hold it
# exactly), and the string columns payment_type and company.
TAXI_LABEL = "fare"
TAXI_FEATURE_COLUMNS = (
    "trip_miles", "trip_seconds", "trip_start_hour", "trip_start_month", "trip_start_day",
    "pickup_latitude", "pickup_longitude", "dropoff_latitude", "dropoff_longitude")


class BadInputError(ValueError):
  """The input data is unusable; the message names the file and line (or the glob)."""


class LabelError(BadInputError):
  """The label is not given, or not a column of the header (or not usable as typed)."""


def taxi_csv_path() -> str:
  """The Chicago taxi sample CSV shipped inside the tfx wheel (15,002 rows)."""
  import tfx  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(tfx.__file__), "examples", "chicago_taxi_pipeline",
                      "data", "simple", "data.csv")


@dataclasses.dataclass(frozen=True)
class SyntheticSpec:
  """The synthetic linear-regression problem (see the module docstring)."""
  rows: int
  weights: Tuple[float, ...]
  bias: float
  noise: float
  seed: int
  label_key: str = "y"

  @property
  def source(self) -> str:
    return config_lib.SYNTHETIC

  @property
  def feature_keys(self) -> Tuple[str, ...]:
    return tuple(f"x{i}" for i in range(len(self.weights)))

  @property
  def numeric_keys(self) -> Tuple[str, ...]:
    return self.feature_keys + (self.label_key,)

  @property
  def string_keys(self) -> Tuple[str, ...]:
    return ()

  @property
  def int_keys(self) -> Tuple[str, ...]:
    return ()


@dataclasses.dataclass(frozen=True)
class CsvLayout:
  """What parsing needs to know about the CSV files, fixed before Beam starts.

  Attributes:
    source: the config's source ("taxi" or the glob), recorded on the artifact.
    files: matched files, sorted.
    header: every column of the header, in file order.
    types: kept column -> "float" | "int" | "string", in header order.
    label_key: the label column: numeric (regression, or numbered classes) or string
      (class names; see check_label).
    split_key: the partition feature (output_config's partition_feature_name, or
      config.split_key): an int or string column whose stock Feature is hashed into
      splits; None hashes the row's stock Example (stock_key.py).
    reports: how each kept column's type was decided (inference.ColumnReport).
    sampled_rows: data rows the types were inferred from.
    na_values: the cell texts read as missing (config na_values, plus "").
    choice: which columns are written and why the others are not (column_choice).
    row_split_seed: the seed of the row split (partition.row_ids): each row's key is
      its position, (file, line). None: the stock key (split_key, or the stock Example).
  """
  source: str
  files: Tuple[str, ...]
  header: Tuple[str, ...]
  types: Dict[str, str]
  label_key: str
  split_key: Optional[str] = None
  reports: Tuple[inference.ColumnReport, ...] = ()
  sampled_rows: int = 0
  na_values: FrozenSet[str] = na_lib.token_set()
  choice: Optional[column_choice.Choice] = None
  row_split_seed: Optional[int] = None

  @property
  def numeric_keys(self) -> Tuple[str, ...]:
    return tuple(c for c, t in self.types.items() if t in NUMERIC_TYPES)

  @property
  def string_keys(self) -> Tuple[str, ...]:
    return tuple(c for c, t in self.types.items() if t == "string")

  @property
  def int_keys(self) -> Tuple[str, ...]:
    """The "int" columns: written as int64_list features."""
    return tuple(c for c, t in self.types.items() if t == "int")

  @property
  def feature_keys(self) -> Tuple[str, ...]:
    return tuple(c for c in self.numeric_keys if c != self.label_key)

  def file_base(self, path: str) -> int:
    """The row split's offset of one of ``files`` (partition.file_bases)."""
    bases = self.__dict__.get("_bases")
    if bases is None:
      bases = partition.file_bases(self.files, self.row_split_seed or 0)
      object.__setattr__(self, "_bases", bases)
    return bases[path]


SourcePlan = Union[SyntheticSpec, CsvLayout]


# ----------------------------------------------------------------------------- planning


def plan_source(config: config_lib.ExampleGenConfig, pattern: Optional[str] = None,
                partition_feature: Optional[str] = None,
                row_split: bool = True) -> SourcePlan:
  """Checks the source and fixes its layout; raises BadInputError before any Beam work.

  Args:
    config: the validated config.
    pattern: the CSV glob with span and version resolved (driver.ResolvedInput.pattern);
      default: the config's source.
    partition_feature: output_config's partition_feature_name; default config.split_key.
    row_split: without a partition feature, split by row position (seeded: the
      default); False hashes each row's stock Example, as a stock output_config does.
  """
  partition_feature = partition_feature or config.split_key
  if config.is_synthetic:
    return SyntheticSpec(rows=config.rows, weights=config.true_weights(), bias=config.bias,
                         noise=config.noise, seed=config.seed, label_key=config.label_key)
  if config.source == config_lib.TAXI:
    columns = tuple(config.columns or TAXI_FEATURE_COLUMNS)
    column_types = {c: "float" for c in columns + (config.label_key,)}
    column_types.update(config.column_types or {})
  else:
    columns = tuple(config.columns) if config.columns else None
    column_types = dict(config.column_types or {})
  if pattern is None:
    pattern = taxi_csv_path() if config.source == config_lib.TAXI else config.source
  files = match_files(pattern)
  if not files:
    raise BadInputError(f"source: no files match {pattern!r}")
  first = files[0]
  header, sample = read_header_and_sample(files, config.type_inference_rows)
  label = config.label_key
  check_label_named(label, header, first)
  for key, names in (("columns", columns or ()), ("column_types", column_types),
                     ("keep_columns", config.keep_columns),
                     ("partition_feature_name (split_key)",
                      [partition_feature] if partition_feature else [])):
    for name in names:
      if name not in header:
        raise BadInputError(f"{first}:1: {key} names column {name!r}, which is not in "
                            f"the header {list(header)}{did_you_mean(name, header)}")
  if not sample:
    where = first if len(files) == 1 else f"{pattern!r} ({len(files)} files)"
    raise BadInputError(f"{where}: no data rows after the header")
  required = [label] + ([partition_feature] if partition_feature else [])
  na = na_lib.token_set(config.na_values)
  named = [c for c in header if c]  # pandas' unnamed index column is never a feature.
  all_reports = inference.infer_types(header, sample, explicit=column_types, keep=named,
                                      na=na)
  choice = column_choice.choose(
      header, [row.cells for row in sample],
      numeric=[c for c, r in all_reports.items() if r.type in NUMERIC_TYPES],
      required=required, columns=columns, keep=config.keep_columns, na=na)
  reports = {c: r for c, r in all_reports.items() if c in set(choice.kept)}
  types = {c: r.type for c, r in reports.items()}
  check_label(reports[label], first, len(sample))
  if partition_feature and types[partition_feature] not in ("int", "string"):
    raise BadInputError(
        f"{first}: partition_feature_name (split_key) {partition_feature!r} is a "
        f"{types[partition_feature]} column; stock ExampleGen partitions only on int and "
        f"string features. Set column_types.{partition_feature}='string' to hash its text")
  return CsvLayout(source=config.source, files=files, header=header, types=types,
                   label_key=label, split_key=partition_feature,
                   reports=tuple(reports.values()), sampled_rows=len(sample), na_values=na,
                   choice=choice, row_split_seed=(config.seed if row_split and
                                                  not partition_feature else None))


def did_you_mean(name: str, header: Sequence[str]) -> str:
  """" Did you mean 'price'?" for the header's names close to ``name``, else ""."""
  folded = {c.lower(): c for c in header if c}
  close = difflib.get_close_matches(name.lower(), list(folded), n=3, cutoff=0.6)
  if not close:
    return ""
  return " Did you mean " + " or ".join(repr(folded[c]) for c in close) + "?"


def check_label_named(label: str, header: Sequence[str], where: str) -> None:
  """Raises BadInputError unless ``label`` is a column of ``header``: a CSV has no
  default label (a run that guessed one trained on the wrong column, issue 47)."""
  columns = ", ".join(repr(c) for c in header if c)
  if not label:
    raise LabelError(
        f"{where}: no label column given. Name the column to predict with set "
        f"label=COLUMN; the columns are: {columns}")
  if label not in header:
    raise LabelError(f"{where}:1: label column {label!r} not in the header."
                        f"{did_you_mean(label, header)} The columns are: {columns}")


# A label column inferred "string" whose sampled non-empty cells are at least this share
# numbers is ambiguous (a numeric target with text in it, or numbered classes with a few
# names): the run stops and asks, see check_label.
MOSTLY_NUMERIC_LABEL = 0.5


def check_label(report: inference.ColumnReport, where: str, sampled_rows: int) -> None:
  """Raises BadInputError unless the label column can be trained on as typed.

  A numeric label (>= NUMERIC_SHARE of its sampled cells are numbers, or explicit) is a
  regression or numbered-class label; its other cells are bad rows, as in any numeric
  column. A string label is a class label (the trainer infers binary or multiclass and
  records the classes); an explicit "string" is always one. An inferred string label of
  which at least MOSTLY_NUMERIC_LABEL of the sampled cells are numbers fails here: its
  message names both ways out, each of which keeps the rows that are numbers.
  """
  if report.type in NUMERIC_TYPES or report.origin == inference.EXPLICIT:
    return
  if report.non_empty == 0:
    raise LabelError(
        f"{where}: label column {report.name!r} has no value in the first "
        f"{sampled_rows} data rows; is it the right column?")
  if report.numeric >= MOSTLY_NUMERIC_LABEL * report.non_empty:
    text = report.non_empty - report.numeric
    raise LabelError(
        f"{where}: label column {report.name!r} is ambiguous: {report.numeric} of "
        f"{report.non_empty} non-empty cells in the first {sampled_rows} data rows are "
        f"numbers and {text} are not (at least {inference.NUMERIC_SHARE:.0%} numbers make a "
        f"numeric label). Set example_gen.column_types.{report.name}='float' for a numeric "
        f"label (the {text} non-numbers become bad rows: example_gen.bad_row_policy), or "
        f"example_gen.column_types.{report.name}='string' to use every value as a class "
        f"name")


def match_files(pattern: str) -> Tuple[str, ...]:
  """Sorted paths matching a glob on any Beam filesystem; empty if none."""
  return tuple(sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list))


def open_file(path: str):
  """A binary reader; .gz/.bz2/... files are decompressed (Beam's AUTO compression)."""
  return FileSystems.open(path)


def parse_header(line: str, path: str) -> Tuple[str, ...]:
  line = line.lstrip("\ufeff").rstrip("\r\n")
  try:
    header = tuple(next(csv.reader([line], strict=True), []))
  except csv.Error as e:
    raise BadInputError(f"{path}:1: malformed header ({e})") from e
  if not header or not all(header[1:]):
    raise BadInputError(f"{path}:1: header has an empty column name: {list(header)}. "
                        f"Only the first column may be unnamed (pandas' row index, left "
                        f"out); name the others in the header")
  if len(set(header)) != len(header):
    raise BadInputError(f"{path}:1: header has duplicate column names: {list(header)}")
  return header


def read_header_and_sample(files: Sequence[str], max_rows: int
                           ) -> Tuple[Tuple[str, ...], List[inference.SampleRow]]:
  """The first file's header and up to ``max_rows`` well-formed data rows, read from the
  files in order (the next file when one is short). Malformed rows are left out here:
  the parse stage reports them with their line numbers."""
  header = None
  sample: List[inference.SampleRow] = []
  for path in files:
    with open_file(path) as f:
      first = f.readline().decode("utf-8", errors="replace")
      if not first.strip():
        if header is None:
          raise BadInputError(f"{path}:1: empty file, expected a header row")
        continue
      this_header = parse_header(first, path)
      if header is None:
        header = this_header
      elif this_header != header:
        raise BadInputError(f"{path}:1: header {list(this_header)} differs from the "
                            f"header of {files[0]}: {list(header)}")
      line_no = 1
      while len(sample) < max_rows:
        raw = f.readline()
        if not raw:
          break
        line_no += 1
        line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not line:
          continue
        try:
          row = next(csv.reader([line], strict=True))
        except csv.Error:
          continue
        if len(row) == len(header):
          sample.append(inference.SampleRow(path, line_no, tuple(row)))
    if len(sample) >= max_rows:
      break
  return header, sample


# ----------------------------------------------------------------------------- synthetic


def synthetic_chunks(rows: int, chunk_rows: int = SYNTHETIC_CHUNK_ROWS) -> List[Tuple[int, int, int]]:
  """(chunk index, first row, end row) covering rows [0, rows)."""
  return [(i, start, min(start + chunk_rows, rows))
          for i, start in enumerate(range(0, rows, chunk_rows))]


def generate_synthetic_chunk(spec: SyntheticSpec, chunk: Tuple[int, int, int]) -> RowBatch:
  """Rows [start, end) of the synthetic problem; depends only on spec and chunk."""
  index, start, end = chunk
  n = end - start
  rng = np.random.default_rng([spec.seed, index])
  x = rng.standard_normal((n, len(spec.weights)))
  y = x @ np.asarray(spec.weights) + spec.bias + spec.noise * rng.standard_normal(n)
  numeric = {k: np.ascontiguousarray(x[:, i]) for i, k in enumerate(spec.feature_keys)}
  numeric[spec.label_key] = y
  return RowBatch(sort_key=(config_lib.SYNTHETIC, start), numeric=numeric, strings={},
                  keys=np.arange(start, end, dtype=np.int64))


class _GenerateChunk(beam.DoFn):

  def __init__(self, spec: SyntheticSpec):
    self._spec = spec
    self._rows = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_generated")

  def process(self, chunk):
    batch = generate_synthetic_chunk(self._spec, chunk)
    self._rows.inc(batch.num_rows)
    yield batch


@beam.ptransform_fn
def GenerateSynthetic(pipeline, spec: SyntheticSpec) -> beam.PCollection:
  """RowBatches of the synthetic problem; only the chunk ranges start on the driver."""
  return (pipeline
          | "Chunks" >> beam.Create(synthetic_chunks(spec.rows))
          | "Generate" >> beam.ParDo(_GenerateChunk(spec)))


# ----------------------------------------------------------------------------- CSV

LineBatch = Tuple[str, int, bytes]  # (path, line number of the first line, lines joined by \n)


def iter_line_batches(f, batch_lines: int, first_line_no: int = 1,
                      block_bytes: int = _READ_BLOCK_BYTES) -> Iterator[Tuple[int, List[bytes]]]:
  """(line number of the first line, up to batch_lines lines) from a binary file object,
  read in large blocks; the first line read is numbered ``first_line_no``."""
  leftover = b""
  pending: List[bytes] = []
  line_no = first_line_no
  while True:
    block = f.read(block_bytes)
    if not block:
      break
    parts = (leftover + block).split(b"\n")
    leftover = parts.pop()
    pending.extend(parts)
    while len(pending) >= batch_lines:
      yield line_no, pending[:batch_lines]
      pending = pending[batch_lines:]
      line_no += batch_lines
  if leftover:
    pending.append(leftover)
  if pending:
    yield line_no, pending


class FileRange(NamedTuple):
  """Lines [first_line, ...) of a file: bytes [start, end) (end None: to the end).

  A range with start 0 begins with the header; other ranges begin at a line start.
  """
  path: str
  start: int
  end: Optional[int]
  first_line: int


def file_ranges(files: Sequence[str], range_bytes: int = RANGE_BYTES) -> List[FileRange]:
  """Line-aligned byte ranges of about ``range_bytes`` covering every file, in order.

  Ranges let the read itself run in parallel: on runners that do not redistribute
  (DaskRunner runs Reshuffle as a no-op), one file would otherwise be one task. Line
  numbers of the range starts are counted here, on the driver, in one pass over each
  file larger than ``range_bytes`` (memory speed: bytes.count). Compressed files cannot
  seek and are one range each.
  """
  ranges = []
  for path in files:
    metadata = FileSystems.match([path])[0].metadata_list[0]
    compressed = CompressionTypes.detect_compression_type(path) != CompressionTypes.UNCOMPRESSED
    if compressed or metadata.size_in_bytes <= range_bytes:
      ranges.append(FileRange(path, 0, None, 1))
      continue
    starts = [(0, 1)]
    offset, lines, target = 0, 0, range_bytes
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
      while True:
        block = f.read(_READ_BLOCK_BYTES)
        if not block:
          break
        end = offset + len(block)
        while target < end:
          i = block.find(b"\n", max(target - offset, 0))
          if i < 0:
            break  # The next line break is in a later block.
          boundary = offset + i + 1
          if boundary < metadata.size_in_bytes:
            starts.append((boundary, lines + block.count(b"\n", 0, i + 1) + 1))
          target = boundary + range_bytes
        lines += block.count(b"\n")
        offset = end
    for (start, first_line), (end, _) in zip(starts, starts[1:] + [(None, 0)]):
      ranges.append(FileRange(path, start, end, first_line))
  return ranges


class _Limited:
  """Reads at most ``limit`` bytes (all when None) from a binary file object."""

  def __init__(self, f, limit: Optional[int]):
    self._f = f
    self._left = limit

  def read(self, size: int) -> bytes:
    if self._left is None:
      return self._f.read(size)
    data = self._f.read(min(size, self._left)) if self._left > 0 else b""
    self._left -= len(data)
    return data


class _ReadLines(beam.DoFn):
  """A FileRange -> LineBatches of its data lines; the range that starts the file checks
  the header against the first file's."""

  def __init__(self, header: Sequence[str], first_file: str, batch_lines: int):
    self._header = tuple(header)
    self._first_file = first_file
    self._batch_lines = batch_lines
    self._lines = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "lines_read")

  def process(self, file_range) -> Iterator[LineBatch]:
    if isinstance(file_range, str):
      file_range = FileRange(file_range, 0, None, 1)
    path = file_range.path
    with open_file(path) as f:
      if file_range.start == 0:
        header = f.readline()
        if not header.strip():
          raise BadInputError(f"{path}:1: empty file, expected a header row")
        self._check_header(path, header)
        first_line, limit = 2, (None if file_range.end is None
                                else file_range.end - len(header))
      else:
        f.seek(file_range.start)
        first_line = file_range.first_line
        limit = None if file_range.end is None else file_range.end - file_range.start
      for line_no, lines in iter_line_batches(_Limited(f, limit), self._batch_lines,
                                              first_line_no=first_line):
        self._lines.inc(len(lines))
        yield path, line_no, b"\n".join(lines)

  def _check_header(self, path: str, line: bytes):
    try:
      text = line.decode("utf-8")
    except UnicodeDecodeError as e:
      raise BadInputError(f"{path}:1: header is not UTF-8 ({e})") from e
    header = parse_header(text, path)
    if header != self._header:
      raise BadInputError(f"{path}:1: header {list(header)} differs from the header of "
                          f"{self._first_file}: {list(self._header)}")


@beam.ptransform_fn
def ReadCsvLines(pipeline, files: Sequence[str], header: Sequence[str],
                 batch_lines: int = CSV_BATCH_LINES,
                 range_bytes: Optional[int] = None) -> beam.PCollection:
  """Files -> LineBatches, read by line-aligned ranges (file_ranges). The ranges, not
  the lines, are redistributed (Reshuffle) so reading and parsing run in parallel: a
  Reshuffle of the lines made the default (in-memory) runner hold every line of the
  input at once, about 350 bytes a row (issue 30), while the ranges are a few dozen
  bytes each; reading, parsing and encoding then stream range by range.
  ``range_bytes`` defaults to RANGE_BYTES, read when the pipeline is built."""
  ranges = file_ranges(files, RANGE_BYTES if range_bytes is None else range_bytes)
  return (pipeline
          | "Files" >> beam.Create(ranges)
          | "Redistribute" >> beam.Reshuffle()
          | "Read" >> beam.ParDo(_ReadLines(header, files[0], batch_lines)))


def _split_line(line: str) -> List[str]:
  return next(csv.reader([line], strict=True), [])


def parse_csv_lines(layout: CsvLayout, line_batch: LineBatch,
                    key_encoder: Optional[stock_key.StockKeyEncoder] = None
                    ) -> Tuple[RowBatch, List[Tuple[int, str]]]:
  """Parses one LineBatch into a RowBatch of its good rows and the bad rows' messages.

  ``key_encoder``: the layout's StockKeyEncoder, kept by the caller across batches
  (default: a new one).

  Returns:
    (rows, bad) where bad is a list of (line number, "path:line: what is wrong"), in line
    order. Blank lines are neither rows nor bad.
  """
  path, first_line, blob = line_batch
  raw = blob.split(b"\n")
  if b"\r" in blob:
    raw = [r[:-1] if r.endswith(b"\r") else r for r in raw]
  bad: Dict[int, str] = {}

  def fail(i: int, message: str):
    bad.setdefault(i, f"{path}:{first_line + i}: {message}")

  try:
    lines = [r.decode("utf-8") for r in raw]
  except UnicodeDecodeError:
    lines = []
    for i, r in enumerate(raw):
      try:
        lines.append(r.decode("utf-8"))
      except UnicodeDecodeError as e:
        fail(i, f"not UTF-8 ({e})")
        lines.append("")
  try:
    rows = list(csv.reader(lines, strict=True))
  except csv.Error:
    rows = None
  if rows is None or len(rows) != len(lines):  # Some line has unbalanced quotes.
    rows = []
    for i, line in enumerate(lines):
      try:
        rows.append(_split_line(line))
      except csv.Error as e:
        fail(i, f"malformed CSV row ({e})")
        rows.append([])

  ncols = len(layout.header)
  good = []
  for i, row in enumerate(rows):
    if len(row) == ncols:
      good.append(i)
    elif row or raw[i].strip():  # A non-blank line with the wrong column count.
      if i not in bad:
        fail(i, f"expected {ncols} columns, got {len(row)}")
  good_rows = [rows[i] for i in good]
  columns = list(zip(*good_rows)) if good_rows else [()] * ncols
  index = {name: j for j, name in enumerate(layout.header)}

  ok = np.ones(len(good), dtype=bool)
  numeric: Dict[str, np.ndarray] = {}
  strings: Dict[str, List[Optional[bytes]]] = {}
  na = layout.na_values
  na_numbers = _na_numbers(na)
  for name, typ in layout.types.items():
    cells = columns[index[name]]
    if typ == "string":
      strings[name] = string_column(cells, na)
      continue
    values, errors = _parse_numeric(cells, typ, na)
    if na_numbers.size:  # A configured token such as "-999": missing as a number too.
      values[np.isin(values, na_numbers)] = np.nan
    numeric[name] = values
    for k, cell in errors:
      ok[k] = False
      fail(good[k], f"column {name!r}: expected {_expected(typ, cell)}, got {cell!r}")

  batch = RowBatch(sort_key=(path, first_line), numeric=numeric, strings=strings,
                   keys=[b""] * len(good))  # Placeholder: the keys are built below.
  if not ok.all():
    batch = batch.take(np.flatnonzero(ok))
  encoder = key_encoder or stock_key.StockKeyEncoder(layout.types)
  n = int(np.count_nonzero(ok))
  if layout.row_split_seed is not None and layout.split_key is None:
    lines = first_line + np.asarray(good, dtype=np.int64)[ok]
    keys = partition.row_ids(layout.file_base(path), lines)
  elif layout.split_key is None:
    keys = encoder.example_keys(batch.numeric, batch.strings, n)
  else:
    keys = encoder.feature_keys(layout.split_key, batch.numeric, batch.strings, n)
  batch = batch._replace(keys=keys)
  return batch, [(first_line + i, bad[i]) for i in sorted(bad)]


_NA_NUMBERS: Dict[FrozenSet[str], np.ndarray] = {}


def _na_numbers(na: FrozenSet[str]) -> np.ndarray:
  """The numbers among the tokens (na_values.numeric_tokens), kept per token set."""
  found = _NA_NUMBERS.get(na)
  if found is None:
    found = _NA_NUMBERS[na] = np.asarray(na_lib.numeric_tokens(na), dtype=np.float64)
  return found


def _parse_numeric(cells: Sequence[str], typ: str, na: FrozenSet[str] = na_lib.token_set()
                   ) -> Tuple[np.ndarray, List[Tuple[int, str]]]:
  """float64 values (NaN where missing: a cell in ``na``, or ``nan`` in a float column)
  and the (position, cell) of unparsable cells."""
  dtype = np.int64 if typ == "int" else np.float64
  try:
    values = np.array(cells, dtype=dtype)
    if typ != "int" or not np.any((values > MAX_EXACT_INT) | (values < -MAX_EXACT_INT)):
      return values.astype(np.float64, copy=False), []
  except (ValueError, OverflowError):
    pass
  values = _parse_with_empty_cells(cells, dtype, na)
  if values is not None:
    return values, []
  parse = _exact_int if typ == "int" else float
  values = np.empty(len(cells), dtype=np.float64)
  errors = []
  for k, cell in enumerate(cells):
    if cell in na:
      values[k] = np.nan
      continue
    try:
      values[k] = parse(cell)
    except (ValueError, OverflowError):
      values[k] = np.nan
      errors.append((k, cell))
  return values, errors


def _parse_with_empty_cells(cells: Sequence[str], dtype,
                            na: FrozenSet[str] = na_lib.token_set()) -> Optional[np.ndarray]:
  """float64 values, NaN at the missing cells (empty, or a token in ``na``), when every
  other cell parses in one numpy call as ``dtype`` (the same conversion as a column
  without missing cells) and ints are within +-2**53; else None (the caller then parses
  cell by cell and names the bad ones). Missing cells are the common case of a column
  with holes: without this, one empty cell or ``NA`` sent the whole column of the batch
  through ``float`` cell by cell."""
  if dtype == np.float64:  # "nan" is a missing value too: one call, no scatter.
    try:
      return np.array(["nan" if c in na else c for c in cells], dtype=dtype)
    except (ValueError, OverflowError):
      return None
  present = np.fromiter((c not in na for c in cells), dtype=bool, count=len(cells))
  try:
    parsed = np.array([c for c in cells if c not in na], dtype=dtype)
  except (ValueError, OverflowError):
    return None
  if dtype == np.int64 and np.any((parsed > MAX_EXACT_INT) | (parsed < -MAX_EXACT_INT)):
    return None
  values = np.full(len(cells), np.nan)
  values[present] = parsed
  return values


def _expected(typ: str, cell: str) -> str:
  """What a bad ``cell`` of a ``typ`` column should have been."""
  try:
    too_big = typ == "int" and abs(int(cell)) > MAX_EXACT_INT
  except ValueError:
    too_big = False
  return ("int within +-2**53 (declare the column 'string' in column_types for larger ids)"
          if too_big else typ)


def _exact_int(cell: str) -> int:
  """int(cell), refusing values beyond +-2**53 (a RowBatch holds ints as float64)."""
  value = int(cell)
  if abs(value) > MAX_EXACT_INT:
    raise ValueError(f"{cell!r} is beyond +-2**53")
  return value


def bad_row_message(bad: Sequence[Tuple[int, str]]) -> str:
  """The error of bad_row_policy "fail": the first bad row, how many more this batch
  has, and the setting that skips them (a truncated file's last row is one)."""
  more = f" (and {len(bad) - 1} more bad rows in this batch)" if len(bad) > 1 else ""
  return (f"{bad[0][1]}{more}. A truncated or hand-edited file has such rows (to skip "
          f"them and count them: set bad_row_policy=skip)")


class Skipped(NamedTuple):
  """How many bad rows one LineBatch had (bad_row_policy "skip")."""
  rows: int


class _ParseLines(beam.DoFn):
  """LineBatch -> RowBatch and, if it had bad rows, Skipped; bad rows raise (policy
  "fail") or are counted ("skip").

  One output, not a tagged one: Beam's DaskRunner puts every tagged output in the main
  output's bag (apache_beam/runners/dask/transform_evaluator.py, ParDo), which mixed
  the skipped-row counts into the rows (TypeError: unsupported operand type(s) for +:
  'int' and 'RowBatch').
  """

  def __init__(self, layout: CsvLayout, policy: str):
    self._layout = layout
    self._policy = policy
    self._keys = stock_key.StockKeyEncoder(layout.types)
    self._parsed = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_parsed")
    self._skipped = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_skipped")

  def process(self, line_batch: LineBatch):
    batch, bad = parse_csv_lines(self._layout, line_batch, self._keys)
    if bad:
      if self._policy == "fail":
        raise BadInputError(bad_row_message(bad))
      self._skipped.inc(len(bad))
      yield Skipped(len(bad))
    self._parsed.inc(batch.num_rows)
    if batch.num_rows:
      yield batch


class ParsedCsv(NamedTuple):
  rows: beam.PCollection     # RowBatch
  skipped: beam.PCollection  # int: bad rows skipped, per LineBatch that had some


class ParseCsv(beam.PTransform):
  """LineBatches -> ParsedCsv(RowBatches, skipped-row counts)."""

  def __init__(self, layout: CsvLayout, policy: str):
    super().__init__()
    self._layout = layout
    self._policy = policy

  def expand(self, line_batches):
    parsed = line_batches | "Parse" >> beam.ParDo(_ParseLines(self._layout, self._policy))
    rows = parsed | "Rows" >> beam.Filter(lambda e: isinstance(e, RowBatch))
    skipped = parsed | "Skipped" >> beam.FlatMap(
        lambda e: [e.rows] if isinstance(e, Skipped) else [])
    return ParsedCsv(rows, skipped)


def read_rows(pipeline, plan: SourcePlan, policy: str
              ) -> Tuple[beam.PCollection, Optional[beam.PCollection]]:
  """(RowBatches, skipped-row counts or None) for the planned source."""
  if isinstance(plan, SyntheticSpec):
    return pipeline | "Synthetic" >> GenerateSynthetic(plan), None
  parsed = (pipeline
            | "ReadCsv" >> ReadCsvLines(plan.files, plan.header)
            | "ParseCsv" >> ParseCsv(plan, policy))
  return parsed.rows, parsed.skipped
