"""`benchmarks/run_all.py --smoke` still runs and produces a complete results file.

Runs the driver in a subprocess (as `make bench-smoke` does) and checks that the smoke
results name every benchmark module, that each benchmark ran without error and
produced rows, and that every comparison row has a finite, positive ratio. A module that
failed (reported MISSING) fails the test.
"""
import hashlib
import json
import math
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_ALL = os.path.join(REPO, "benchmarks", "run_all.py")
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import run_all  # noqa: E402  (the driver's own module list: one fact, one place)

MODULES = run_all.MODULES
# Per-module limit in the test: the modules run concurrently beside other tests on a
# 2-core CI machine (a quiet `make bench-smoke` takes under 3 minutes).
SMOKE_MODULE_TIMEOUT_S = 600


def _committed_benchmark_files():
  """{path: sha256} of benchmarks/'s committed files, as they are on disk now."""
  names = subprocess.run(["git", "ls-files", "benchmarks"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
  return {n: hashlib.sha256(open(os.path.join(REPO, n), "rb").read()).hexdigest()
          for n in names if os.path.isfile(os.path.join(REPO, n))}


@pytest.mark.slow
def test_run_all_smoke_writes_rows_with_finite_ratios(tmp_path):
  output = tmp_path / "RESULTS-smoke.md"
  before = _committed_benchmark_files()
  env = dict(os.environ, TFX_PARALLEL_SMOKE_TIMEOUT_S=str(SMOKE_MODULE_TIMEOUT_S))
  proc = subprocess.run([sys.executable, RUN_ALL, "--smoke", "--output", str(output)],
                        cwd=REPO, capture_output=True, text=True, env=env,
                        timeout=SMOKE_MODULE_TIMEOUT_S + 120)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  # A smoke run writes only under tmp_path and benchmarks/_work, never over a committed
  # plot or results file (it once rewrote benchmarks/ingest_scaling_smoke.png).
  after = _committed_benchmark_files()
  assert [n for n in before if after.get(n) != before[n]] == []
  text = output.read_text()
  with open(tmp_path / "RESULTS-smoke.json") as f:
    results = json.load(f)
  for module in MODULES:
    assert f"`benchmarks/{module}.py`" in text, module
    res = results[module]
    assert res["error"] is None, f"{module}: {res['error']}"
    assert res["rows"], f"{module} produced no rows"
    for row in res["rows"]:
      assert row["command"] and row["data"] and row["baseline"], row
      assert isinstance(row["ratio"], float) and math.isfinite(row["ratio"]) \
          and row["ratio"] > 0, f"{module} {row['case']}: ratio {row['ratio']}"
