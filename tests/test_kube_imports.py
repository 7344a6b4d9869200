"""The Kubernetes package's doors point one way (issue #39 item 8): read from the source
with `ast`, every import in components/distributed_trainer/kube/ and every import of it.

kube/ may import the standard library, third-party packages, itself, and below it: the
run-independent trainer modules (failures, plan.devices). It has no door up: the
replica's entry point, which runs run/train.py's main, is distributed_trainer/replica.py,
beside the executor. Nothing below the executor (run/, plan/, engines/, inputs/, models/)
imports kube/.
"""
import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINER = os.path.join(ROOT, "components", "distributed_trainer")
PACKAGE = "tfx_parallel.components.distributed_trainer"
KUBE = PACKAGE + ".kube"
# What kube/ may import from this project outside itself, per importing module.
ALLOWED = {
    PACKAGE + ".failures": None,  # Exit codes: any module.
    PACKAGE + ".plan.devices": {"launch.py"},  # The multi-worker batch check.
}


def _imports(path):
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom) and node.module:
      for alias in node.names:  # `from pkg import module` names a module too.
        yield node.lineno, f"{node.module}.{alias.name}"


def _python_files(folder):
  for root, _, files in os.walk(folder):
    for name in sorted(files):
      if name.endswith(".py"):
        yield os.path.join(root, name)


def test_kube_imports_only_itself_and_the_modules_below_it():
  wrong = []
  for path in _python_files(os.path.join(TRAINER, "kube")):
    for line, name in _imports(path):
      if not name.startswith("tfx_parallel.") or name.startswith(KUBE):
        continue
      allowed = next((files for module, files in ALLOWED.items()
                      if name == module or name.startswith(module + ".")), False)
      if allowed is False or (allowed is not None and os.path.basename(path) not in allowed):
        wrong.append(f"{os.path.relpath(path, ROOT)}:{line} imports {name}")
  assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("folder", ["run", "plan", "engines", "inputs", "models"])
def test_nothing_below_the_executor_imports_kube(folder):
  found = [f"{os.path.relpath(path, ROOT)}:{line} imports {name}"
           for path in _python_files(os.path.join(TRAINER, folder))
           for line, name in _imports(path) if name.startswith(KUBE)]
  assert not found, "\n".join(found)
