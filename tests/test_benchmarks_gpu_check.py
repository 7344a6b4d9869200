"""benchmarks/gpu_check.py's CPU path: logical CPU devices stand in for GPUs, tiny sizes."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "benchmarks", "gpu_check.py")


@pytest.mark.slow
def test_gpu_check_cpu_path_reports_environment_and_emulated_parity(tmp_path):
  out, raw = tmp_path / "gpu_check.md", tmp_path / "gpu_check.json"
  proc = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--small",
                         "--sections", "environment,emulated", "--work", str(tmp_path / "w"),
                         "--output", str(out), "--json", str(raw)],
                        cwd=REPO, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  result = json.loads(raw.read_text())
  env = result["environment"]
  assert env["build_info"]["version"].startswith("2.16")
  assert env["first_kernel"]["cold"]["first_kernel_s"] > 0
  assert "nvidia-smi" in env["nvidia_smi"] or "GPU" in env["nvidia_smi"]
  rows = {r["case"]: r for r in result["emulated"]}
  assert set(rows) == {"single, tf32 off", "mirrored x2, tf32 off", "mesh 1x2, tf32 off"}
  mirrored, mesh = rows["mirrored x2, tf32 off"], rows["mesh 1x2, tf32 off"]
  assert (mirrored["devices"], mirrored["collective"]) == (2, "reduce_to_cpu")
  assert (mesh["ran"], mesh["collective"]) == ("mesh 1x2 replicas 1", "dtensor_cpu")
  for row in (mirrored, mesh):
    assert row["parity"] == "ok" and row["max_weight_gap_vs_single"] <= 1e-4, row
    assert row["examples_per_sec"] > 0 and row["state_bytes_per_device"] > 0
  report = out.read_text()
  assert report.startswith("# GPU check (CPU, 0 GPU(s); 6 steps of batch 32)")
  assert "| mesh 1x2, tf32 off | mesh 1x2 replicas 1 | 2 CPU | dtensor_cpu |" in report
