"""The pipeline process imports the narrow TFX modules, not ``tfx.v1`` (whose extensions
import the Google Cloud / AI Platform clients: benchmarks/results/e2e_overhead.md)."""
import json
import subprocess
import sys

PROBE = """
import json, sys
from tfx_parallel.pipeline import local_runner, pipeline
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
print(json.dumps(sorted(m for m in sys.modules
                        if m == "tfx.v1" or m.startswith(("tfx.v1.", "google.cloud.aiplatform")))))
"""


def test_the_runner_and_pipeline_modules_do_not_import_tfx_v1():
  out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                       timeout=600, check=True)
  assert json.loads(out.stdout.strip().splitlines()[-1]) == []
