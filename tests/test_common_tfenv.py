"""components/common/tfenv.py: AutoGraph leaves tf_keras's own code alone, and only it;
the environment is set by the entry points, never by importing a component (issue #25)."""
import ast
import json
import os
import subprocess
import sys

from tfx_parallel.components.common import tfenv

import tf_keras
from tensorflow.python.autograph.core import config
from tensorflow.python.autograph.impl import conversion


_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_function(x):
  return x


def test_autograph_skips_tf_keras_but_still_converts_user_code():
  assert tfenv.skip_tf_keras_autograph() is True
  assert tfenv.skip_tf_keras_autograph() is True  # idempotent: one rule, not two
  rules = [r for r in config.CONVERSION_RULES
           if isinstance(r, config.DoNotConvert) and r.matches("tf_keras")]
  assert len(rules) == 1
  assert conversion.is_allowlisted(tf_keras.layers.Dense.call)
  assert conversion.is_allowlisted(tf_keras.Model.train_step)
  assert not conversion.is_allowlisted(_user_function)


# --- Environment set-up at entry points only (issue #25). ---------------------------------

_CLEAN = ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL",
          "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION", "TFX_PARALLEL_LEGACY_KERAS_WARNED")


def _clean_env() -> dict:
  """This process's environment without what tfenv.prepare() would set (conftest.py set it
  here), so a child that calls prepare() changes its environment visibly."""
  return {k: v for k, v in os.environ.items() if k not in _CLEAN}


def _run_child(code: str, timeout: int = 300) -> dict:
  proc = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True,
                        text=True, timeout=timeout)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _package_modules(package: str) -> list:
  """Every module of ``package`` (a folder of this repo), as setup.py packages them."""
  root = os.path.join(_REPO, package)
  names = []
  for folder, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
    if "__init__.py" not in files:
      dirs[:] = []
      continue
    dotted = "tfx_parallel." + os.path.relpath(folder, _REPO).replace(os.sep, ".")
    names.append(dotted)
    names += [f"{dotted}.{f[:-3]}" for f in sorted(files)
              if f.endswith(".py") and f != "__init__.py"]
  return names


def _imports(module_file: str) -> set:
  """Every module name ``module_file`` imports, at its top or inside a function."""
  with open(module_file, encoding="utf-8") as f:
    tree = ast.parse(f.read(), module_file)
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      found.add(node.module)
      found.update(f"{node.module}.{a.name}" for a in node.names)
  return found


def _module_file(name: str) -> str:
  rel = name.split(".", 1)[1].replace(".", os.sep)
  package = os.path.join(_REPO, rel, "__init__.py")
  return package if os.path.exists(package) else os.path.join(_REPO, rel + ".py")


def test_no_component_module_imports_pipeline_or_kubeflow():
  """The arrows run pipeline -> components and kubeflow -> pipeline, never back: no module
  under components/ names tfx_parallel.pipeline or tfx_parallel.kubeflow, even lazily."""
  offenders = {name: sorted(i for i in _imports(_module_file(name))
                            if i.startswith(("tfx_parallel.pipeline", "tfx_parallel.kubeflow")))
               for name in _package_modules("components")}
  assert len(offenders) > 60, sorted(offenders)  # The walk found the package.
  assert not {k: v for k, v in offenders.items() if v}


# The child: import the third-party modules our components import (their own import-time
# writes are theirs: tensorflow/__init__.py:41 sets TF2_BEHAVIOR=1,
# tensorflow/python/tpu/__init__.py:19 TPU_ML_PLATFORM, tensorflow_transform/keras_lib.py:
# 20-22 TF_USE_LEGACY_KERAS=1, sklearn/__init__.py:53,57 KMP_DUPLICATE_LIB_OK and
# KMP_INIT_AT_FORK), then take a copy of os.environ, then import every module under
# components/. So `import ...component; assert os.environ == before` alone cannot hold
# in a fresh process: TFX imports TensorFlow, which writes two variables of its own.
_IMPORT_ALL_CHILD = """
import importlib, json, os, sys
third_party, ours = json.loads(sys.argv[1]) if len(sys.argv) > 1 else json.loads(%r)
missing = []
for name in third_party:
  try:
    importlib.import_module(name)
  except ImportError:
    missing.append(name)  # An optional extra, or an attribute imported by name.
before = dict(os.environ)
for name in ours:
  importlib.import_module(name)  # A broken import fails the test.
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
print(json.dumps({"changed": changed, "missing": missing,
                  "imported": sorted(m for m in sys.modules if m.startswith("tfx_parallel.")),
                  "ours": len(ours)}))
"""


def test_importing_every_component_module_changes_no_environment_variable():
  """One fresh process imports ``tfx_parallel.components`` and every module under it:
  os.environ is unchanged and nothing of tfx_parallel.pipeline or tfx_parallel.kubeflow
  is loaded. The entry points (next test) set the environment, not an import."""
  ours = _package_modules("components")
  third_party = sorted({i for name in ours for i in _imports(_module_file(name))
                        if i.split(".")[0] not in sys.stdlib_module_names
                        and not i.startswith("tfx_parallel")})
  got = _run_child(_IMPORT_ALL_CHILD % json.dumps([third_party, ours]))
  assert got["ours"] == len(ours) and "tensorflow" in third_party
  assert got["changed"] == [], got["changed"]
  leaked = [m for m in got["imported"]
            if m.startswith(("tfx_parallel.pipeline", "tfx_parallel.kubeflow"))]
  assert leaked == [], leaked
  assert set(ours) <= set(got["imported"])


# The child: importing an entry point's module leaves the environment alone and imports
# no TensorFlow; each entry point sets the environment before its work (the TFJob replica
# before it imports TensorFlow: a finder on sys.meta_path records the environment then).
_ENTRY_POINTS_CHILD = """
import json, os, sys
CLEAN = {clean!r}
out = {{}}
def env():
  return {{k: os.environ.get(k) for k in CLEAN}}
def reset():
  for k in CLEAN:
    os.environ.pop(k, None)

class AtTensorFlowImport:
  def find_spec(self, name, path=None, target=None):
    if name == "tensorflow" and "at_tensorflow_import" not in out:
      out["at_tensorflow_import"] = env()
    return None
sys.meta_path.insert(0, AtTensorFlowImport())

from tfx_parallel.components.distributed_trainer import replica
from tfx_parallel.components.distributed_trainer.run import train
from tfx_parallel.kubeflow import entrypoint
out["imported_tensorflow"] = "tensorflow" in sys.modules
out["after_import"] = env()

def seen(name):
  def record(*args, **kwargs):
    out[name] = env()
    reset()  # The next entry point starts clean again.
  return record

train.run = seen("replica.main")
replica.main(["--job", sys.argv[1]])  # Imports TensorFlow, copies the job, calls train.main.
train.run = seen("train.main")
train.main(["--job", sys.argv[1]])
import tfx_parallel.pipeline.cli  # The console script imports it, then calls main.
out["cli"] = env()
reset()
entrypoint.run = seen("kubeflow.entrypoint.main")
real_exit = os._exit
def report(status):
  print(json.dumps(out), flush=True)
  real_exit(status)
os._exit = report  # entrypoint.main ends the process with os._exit.
entrypoint.main([])
"""


def test_each_entry_point_prepares_the_environment(tmp_path):
  """The TFJob replica, the training process, the CLI and the Kubeflow container each set
  the environment (executors' Do: the stock-interop pipeline and the test below)."""
  job = {"config": {}, "examples_uri": "", "feature_keys": [], "label_key": "y",
         "train_rows": 0, "model_dir": "", "model_run_dir": "", "history_dir": "",
         "checkpoint_dir": ""}
  path = tmp_path / "job.json"
  path.write_text(json.dumps(job))
  code = _ENTRY_POINTS_CHILD.format(clean=list(_CLEAN[:3]))
  proc = subprocess.run([sys.executable, "-c", code, str(path)], env=_clean_env(),
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  got = json.loads(proc.stdout.strip().splitlines()[-1])
  unset = {"TF_USE_LEGACY_KERAS": None, "TF_CPP_MIN_LOG_LEVEL": None,
           "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION": None}
  # The last: DTensor's all-reduce combining off, whatever the user set (tfenv.ENV_REQUIRED).
  prepared = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
              "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION": "0"}
  assert got["imported_tensorflow"] is False and got["after_import"] == unset, got
  assert got["at_tensorflow_import"] == prepared, got
  for entry in ("replica.main", "train.main", "cli", "kubeflow.entrypoint.main"):
    assert got[entry] == prepared, (entry, got)
