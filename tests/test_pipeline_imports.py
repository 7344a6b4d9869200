"""The pipeline process imports the narrow TFX modules, not ``tfx.v1`` (whose extensions
import the Google Cloud / AI Platform clients: benchmarks/results/e2e_overhead.md), nor the
``__init__`` of ``tfx.components`` (every stock component) or of TFMA (issue 42:
pipeline/deferred_imports.py), until something uses them."""
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


DEFERRED_PROBE = """
import json, sys
from tfx_parallel.components.common import tfenv
tfenv.prepare()
from tfx_parallel.pipeline import deferred_imports
deferred_imports.defer_all()
from tfx_parallel.pipeline import local_runner, pipeline
from tfx.orchestration.local.local_dag_runner import LocalDagRunner
from tfx_parallel.components.partitioned_example_gen import driver, executor
from tfx_parallel.components.distributed_trainer import executor
from tfx_parallel.components.convergence_evaluator import executor
heavy = ("tfx.components.infra_validator", "tfx.components.tuner", "tfx.components.transform",
         "tfx.components.bulk_inferrer", "kubernetes", "keras_tuner", "nltk",
         "tensorflow_model_analysis.api", "tensorflow_model_analysis.metrics")
loaded_by_the_run = sorted(m for m in heavy if m in sys.modules)
import tfx.components, tensorflow_model_analysis as tfma
from tfx.components import Evaluator                      # other uses: the real __init__
from tfx.components.evaluator.component import Evaluator as evaluator_class
from tensorflow_model_analysis import sdk
print(json.dumps([loaded_by_the_run, Evaluator is evaluator_class,
                  tfma.EvalConfig is sdk.EvalConfig, "tfx.components.tuner" in sys.modules,
                  callable(tfma.run_model_analysis)]))
"""


def test_the_local_run_imports_neither_every_stock_component_nor_tfma_until_used():
  out = subprocess.run([sys.executable, "-c", DEFERRED_PROBE], capture_output=True,
                       text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  assert json.loads(out.stdout.strip().splitlines()[-1]) == [[], True, True, True, True]
