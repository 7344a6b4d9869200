"""The three row sources: synthetic, CSV files, and the Chicago taxi CSV from the tfx wheel.

``plan_source(config)`` runs on the driver before Beam starts and does every check that
needs no full read: the glob matches files, the first file has a header naming the label,
``columns`` / ``column_types`` / ``split_key`` name real columns, and the column types
are known (explicit, or inferred from the first rows of the first file). It returns a
``SyntheticSpec`` or a ``CsvLayout``; ``read_rows(pipeline, plan, policy)`` turns either
into a PCollection of ``RowBatch``.

Synthetic rows: ``y = x . w + b + noise`` with ``x ~ N(0, 1)`` per feature and
``noise ~ N(0, config.noise^2)``. Rows are generated inside Beam in chunks of
``SYNTHETIC_CHUNK_ROWS``; chunk ``i`` uses ``numpy.random.default_rng([seed, i])``, so the
data depends only on the config and never has to fit in the driver's memory.

CSV rows: one record per line (quoted fields may contain commas, not newlines), a header
row in every file (all files must have the same header), UTF-8. Line numbers count from 1
with the header as line 1, so error messages match what an editor shows. Blank lines are
ignored. Numeric columns ("float", "int") are parsed with ``float``/``int``; an empty cell
(or the text ``nan``) is a missing value and the feature is absent from that Example.
"""
import csv
import dataclasses
import os
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystems import FileSystems

from tfx_parallel.components.partitioned_example_gen import config as config_lib
from tfx_parallel.components.partitioned_example_gen.rows import RowBatch

METRICS_NAMESPACE = "PartitionedExampleGen"
SKIPPED_TAG = "skipped"

SYNTHETIC_CHUNK_ROWS = 4096   # rows per generated element; part of the data's definition.
CSV_BATCH_LINES = 1000        # lines per element between reading and parsing.
TYPE_INFERENCE_ROWS = 1000    # data rows of the first file sampled to infer column types.
_READ_BLOCK_BYTES = 4 << 20

NUMERIC_TYPES = ("float", "int")

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


@dataclasses.dataclass(frozen=True)
class CsvLayout:
  """What parsing needs to know about the CSV files, fixed before Beam starts.

  Attributes:
    source: the config's source ("taxi" or the glob), recorded on the artifact.
    files: matched files, sorted.
    header: every column of the header, in file order.
    types: kept column -> "float" | "int" | "string", in header order.
    label_key: the label column (numeric).
    split_key: column whose cell is hashed into splits; None hashes the whole line.
  """
  source: str
  files: Tuple[str, ...]
  header: Tuple[str, ...]
  types: Dict[str, str]
  label_key: str
  split_key: Optional[str] = None

  @property
  def numeric_keys(self) -> Tuple[str, ...]:
    return tuple(c for c, t in self.types.items() if t in NUMERIC_TYPES)

  @property
  def string_keys(self) -> Tuple[str, ...]:
    return tuple(c for c, t in self.types.items() if t == "string")

  @property
  def feature_keys(self) -> Tuple[str, ...]:
    return tuple(c for c in self.numeric_keys if c != self.label_key)


SourcePlan = Union[SyntheticSpec, CsvLayout]


# ----------------------------------------------------------------------------- planning


def plan_source(config: config_lib.ExampleGenConfig) -> SourcePlan:
  """Checks the source and fixes its layout; raises BadInputError before any Beam work."""
  if config.is_synthetic:
    return SyntheticSpec(rows=config.rows, weights=config.true_weights(), bias=config.bias,
                         noise=config.noise, seed=config.seed, label_key=config.label_key)
  if config.source == config_lib.TAXI:
    pattern = taxi_csv_path()
    columns = tuple(config.columns or TAXI_FEATURE_COLUMNS)
    column_types = {c: "float" for c in columns + (config.label_key,)}
    column_types.update(config.column_types or {})
  else:
    pattern = config.source
    columns = tuple(config.columns) if config.columns else None
    column_types = dict(config.column_types or {})
  files = match_files(pattern)
  if not files:
    raise BadInputError(f"source: no files match {pattern!r}")
  first = files[0]
  header, sample = read_header_and_sample(first, TYPE_INFERENCE_ROWS)
  label = config.label_key
  if label not in header:
    raise BadInputError(f"{first}:1: label column {label!r} not in header {list(header)}")
  for key, names in (("columns", columns or ()), ("column_types", column_types),
                     ("split_key", [config.split_key] if config.split_key else [])):
    for name in names:
      if name not in header:
        raise BadInputError(f"{first}:1: {key} names column {name!r}, which is not in "
                            f"the header {list(header)}")
  kept = set(columns or header) | {label}
  inferred = infer_column_types(header, sample)
  types = {c: column_types.get(c, inferred[c]) for c in header if c in kept}
  if len(files) == 1 and not sample:
    raise BadInputError(f"{first}: no data rows after the header")
  if types[label] not in NUMERIC_TYPES:
    raise BadInputError(
        f"{first}: label column {label!r} is not numeric (type {types[label]!r}, inferred "
        f"from the first {TYPE_INFERENCE_ROWS} rows); set column_types.{label}")
  return CsvLayout(source=config.source, files=files, header=header, types=types,
                   label_key=label, split_key=config.split_key)


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
  if not header or not all(header):
    raise BadInputError(f"{path}:1: header has an empty column name: {list(header)}")
  if len(set(header)) != len(header):
    raise BadInputError(f"{path}:1: header has duplicate column names: {list(header)}")
  return header


def read_header_and_sample(path: str, max_rows: int) -> Tuple[Tuple[str, ...], List[List[str]]]:
  """The header of ``path`` and up to ``max_rows`` well-formed data rows after it."""
  with open_file(path) as f:
    first = f.readline().decode("utf-8", errors="replace")
    if not first.strip():
      raise BadInputError(f"{path}:1: empty file, expected a header row")
    header = parse_header(first, path)
    sample = []
    while len(sample) < max_rows:
      raw = f.readline()
      if not raw:
        break
      line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
      if not line:
        continue
      try:
        row = next(csv.reader([line], strict=True))
      except csv.Error:
        continue  # Reported with its line number when the file is parsed.
      if len(row) == len(header):
        sample.append(row)
  return header, sample


def _is_type(values: Sequence[str], parse) -> bool:
  try:
    for v in values:
      parse(v)
  except (ValueError, OverflowError):
    return False
  return True


def infer_column_types(header: Sequence[str], sample: Sequence[Sequence[str]]) -> Dict[str, str]:
  """Per column: "int" if every non-empty sampled cell parses as int, else "float" if
  every one parses as float, else "string" (also when the sample has no non-empty cell)."""
  types = {}
  for i, name in enumerate(header):
    values = [row[i] for row in sample if row[i] != ""]
    if values and _is_type(values, int):
      types[name] = "int"
    elif values and _is_type(values, float):
      types[name] = "float"
    else:
      types[name] = "string"
  return types


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


class _ReadLines(beam.DoFn):
  """A CSV file -> LineBatches of its data lines; checks the header against the first file's."""

  def __init__(self, header: Sequence[str], first_file: str, batch_lines: int):
    self._header = tuple(header)
    self._first_file = first_file
    self._batch_lines = batch_lines
    self._lines = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "lines_read")

  def process(self, path: str) -> Iterator[LineBatch]:
    with open_file(path) as f:
      header = f.readline()
      if not header.strip():
        raise BadInputError(f"{path}:1: empty file, expected a header row")
      self._check_header(path, header)
      for line_no, lines in iter_line_batches(f, self._batch_lines, first_line_no=2):
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
                 batch_lines: int = CSV_BATCH_LINES) -> beam.PCollection:
  """Files -> LineBatches, redistributed (Reshuffle) so parsing runs in parallel."""
  return (pipeline
          | "Files" >> beam.Create(list(files))
          | "Read" >> beam.ParDo(_ReadLines(header, files[0], batch_lines))
          | "Redistribute" >> beam.Reshuffle())


def _split_line(line: str) -> List[str]:
  return next(csv.reader([line], strict=True), [])


def parse_csv_lines(layout: CsvLayout, line_batch: LineBatch
                    ) -> Tuple[RowBatch, List[Tuple[int, str]]]:
  """Parses one LineBatch into a RowBatch of its good rows and the bad rows' messages.

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
  for name, typ in layout.types.items():
    cells = columns[index[name]]
    if typ == "string":
      strings[name] = [c.encode("utf-8") if c else None for c in cells]
      continue
    values, errors = _parse_numeric(cells, typ)
    numeric[name] = values
    for k, cell in errors:
      ok[k] = False
      fail(good[k], f"column {name!r}: expected {typ}, got {cell!r}")

  if layout.split_key is None:
    keys = [raw[i] for i in good]
  else:
    keys = [c.encode("utf-8") for c in columns[index[layout.split_key]]]
  batch = RowBatch(sort_key=(path, first_line), numeric=numeric, strings=strings, keys=keys)
  if not ok.all():
    batch = batch.take(np.flatnonzero(ok))
  return batch, [(first_line + i, bad[i]) for i in sorted(bad)]


def _parse_numeric(cells: Sequence[str], typ: str) -> Tuple[np.ndarray, List[Tuple[int, str]]]:
  """float64 values (NaN where empty) and the (position, cell) of unparsable cells."""
  dtype = np.int64 if typ == "int" else np.float64
  try:
    return np.array(cells, dtype=dtype).astype(np.float64, copy=False), []
  except (ValueError, OverflowError):
    pass
  parse = int if typ == "int" else float
  values = np.empty(len(cells), dtype=np.float64)
  errors = []
  for k, cell in enumerate(cells):
    if cell == "":
      values[k] = np.nan
      continue
    try:
      values[k] = parse(cell)
    except (ValueError, OverflowError):
      values[k] = np.nan
      errors.append((k, cell))
  return values, errors


class _ParseLines(beam.DoFn):
  """LineBatch -> RowBatch; bad rows raise (policy "fail") or are counted ("skip")."""

  def __init__(self, layout: CsvLayout, policy: str):
    self._layout = layout
    self._policy = policy
    self._parsed = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_parsed")
    self._skipped = beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rows_skipped")

  def process(self, line_batch: LineBatch):
    batch, bad = parse_csv_lines(self._layout, line_batch)
    if bad:
      if self._policy == "fail":
        raise BadInputError(bad[0][1] + (f" (and {len(bad) - 1} more bad rows in this "
                                          f"batch)" if len(bad) > 1 else ""))
      self._skipped.inc(len(bad))
      yield beam.pvalue.TaggedOutput(SKIPPED_TAG, len(bad))
    self._parsed.inc(batch.num_rows)
    if batch.num_rows:
      yield batch


@beam.ptransform_fn
def ParseCsv(line_batches, layout: CsvLayout, policy: str):
  """LineBatches -> DoOutputsTuple: main RowBatches, and ``skipped`` counts (ints)."""
  return line_batches | "Parse" >> beam.ParDo(_ParseLines(layout, policy)).with_outputs(
      SKIPPED_TAG, main="rows")


def read_rows(pipeline, plan: SourcePlan, policy: str
              ) -> Tuple[beam.PCollection, Optional[beam.PCollection]]:
  """(RowBatches, skipped-row counts or None) for the planned source."""
  if isinstance(plan, SyntheticSpec):
    return pipeline | "Synthetic" >> GenerateSynthetic(plan), None
  parsed = (pipeline
            | "ReadCsv" >> ReadCsvLines(plan.files, plan.header)
            | "ParseCsv" >> ParseCsv(plan, policy))
  return parsed.rows, parsed[SKIPPED_TAG]
