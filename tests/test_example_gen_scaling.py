"""Ingest memory does not grow with the data, and its output bytes do not change.

* Byte identity: seeded CSVs (floats, ints, strings with unicode, quotes and long values,
  empty cells, CRLF, blank lines, two files) are ingested with small read ranges and part
  buffers; the sha256 of every written file must equal the digests recorded from the
  code before issue 30 (commit c3f740f), so the bounded-memory read and the vectorised
  string path write exactly the same bytes.
* Memory cap: a child process ingests a CSV of about 160 MB with its address space capped
  (resource.setrlimit(RLIMIT_AS)) at what it uses after a warm-up ingest plus 100 MB, and
  every row is read back. The new code grows by about 7 MB there; the code before issue 30
  held every line of the input in the Beam Reshuffle and aborted (std::bad_alloc).
"""
import hashlib
import os
import subprocess
import sys
import textwrap

import pytest

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
  # The stock split keys (whole-row hash), as before issue 47 made row positions the
  # default: the bytes pin the encoding and the sharding, which did not change.
  plan = sources.plan_source(config, row_split=False)
  summary = ingest.run(beam.Pipeline(), config, plan, root)
  assert summary.total_rows == n
  assert _output_digest(root) == GOLDEN[seed]


# ----------------------------------------------------------------------------- memory cap

CAP_ROWS = 80_000
PAD_BYTES = 2_000  # An unkept column: ~160 MB of input for little parse and encode work.
CAP_HEADROOM_MB = 100

_CAPPED_CHILD = textwrap.dedent("""
    import os, resource, sys
    import apache_beam as beam
    from tfx_parallel.components.partitioned_example_gen import ingest, sources
    from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig

    def run(source, out):
      config = ExampleGenConfig(source=source, label="y", columns=["id", "x"],
                                verify_output=True).validate()
      os.makedirs(out)
      return ingest.run(beam.Pipeline(), config, sources.plan_source(config), out)

    warm, big, out, headroom_mb = sys.argv[1:5]
    run(warm, out + "-warm")  # Imports, runner threads and caches, before the cap.
    with open("/proc/self/status") as f:
      vm = [int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")][0]
    cap = vm + int(headroom_mb) * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    summary = run(big, out)
    with open("/proc/self/status") as f:
      peak = [int(line.split()[1]) * 1024 for line in f if line.startswith("VmPeak:")][0]
    print("ROWS", summary.total_rows, "CAP_MB", cap >> 20, "GREW_MB", (peak - vm) >> 20,
          flush=True)
""")


def _padded_csv(path: str, rows: int) -> None:
  pad = "p" * PAD_BYTES
  with open(path, "w") as f:
    f.write("id,x,pad,y\n")
    for start in range(0, rows, 10_000):
      f.write("".join(f"{i},{i * 0.5},{pad},{i % 97}\n"
                      for i in range(start, min(start + 10_000, rows))))


def test_ingest_of_160_mb_fits_under_an_address_space_cap_of_100_mb_over_warm_up(tmp_path):
  """The child ingests a tiny CSV, caps its address space at its size then plus
  CAP_HEADROOM_MB, and ingests CAP_ROWS rows (~160 MB) under the cap; the old code's
  Reshuffle of the lines needed more and aborted (std::bad_alloc)."""
  warm, big = str(tmp_path / "warm.csv"), str(tmp_path / "big.csv")
  _padded_csv(warm, 100)
  _padded_csv(big, CAP_ROWS)
  assert os.path.getsize(big) > 1.4 * CAP_HEADROOM_MB * 2**20
  out = str(tmp_path / "out")
  env = dict(os.environ, MALLOC_ARENA_MAX="2")  # Thread arenas would reserve 64 MB each.
  proc = subprocess.run([sys.executable, "-c", _CAPPED_CHILD, warm, big, out,
                         str(CAP_HEADROOM_MB)], capture_output=True, text=True, env=env,
                        timeout=300, check=False)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
  assert f"ROWS {CAP_ROWS} " in proc.stdout
  ids = set()
  for split in ("train", "eval"):
    for path in verify.split_files(out, split):
      for row in verify.read_rows(path):
        i = row["id"][0]
        assert row["x"] == (i * 0.5,) and row["y"] == (float(i % 97),) and "pad" not in row
        ids.add(i)
  assert ids == set(range(CAP_ROWS))
