"""The trainer's rooms have one-way doors (issue #39 item 8): its packages form layers,
and each module imports only from its own unit or from a lower layer. Checked on the
source with ``ast`` (no import runs), every import, module-level or inside a function.

The layers, bottom first, as the code is built:

0. vocabularies: ``model_spec`` (what a user's model receives), ``mesh_axes`` (the
   axes, VariableInfo, the divisibility check);
1. pure rules that import nothing of the trainer above them: ``optimizers`` (the
   optimizer names and factory) and ``sharding`` (the layout rules);
2. ``config``: the typed config and its validation;
3. ``models`` (the built-ins), ``inputs`` (data in), ``user_module`` (the user's code);
4. ``job`` and ``failures``: ``Job`` (as TFX keeps ``FnArgs`` in ``fn_args_utils``),
   the exit codes and the failure classes;
5. ``plan``: devices, the GPU environment, the layout planner, memory, length;
6. ``engines``: the step engines (tf.distribute and the DTensor mesh);
7. ``kube``: launching on Kubernetes (manifest, client, watch, settings, the replica's
   watchdog);
8. ``run``: the training process (train, launcher, checkpoint, export, records);
9. the processes' entry points: ``executor`` (TFX) and ``replica`` (a Kubernetes
   replica: kube's watchdog, then run's train.main), then 10. ``component``: the TFX
   boundary.

Units of one layer do not import each other.

The same layers are checked on what really loads: each module imported alone, in an
interpreter of its own (tests/import_probe.py), must leave no module of a higher layer
in ``sys.modules``; and each docstring or comment that says a module does not load a
package (``CLAIMS``) is checked by importing that module in a fresh interpreter.

A second test holds function-local imports to the ones an optional dependency or
start-up cost needs, each with its reason.
"""
import ast
import json
import pathlib
import re
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMPONENTS = ROOT / "components"
TRAINER = COMPONENTS / "distributed_trainer"
PKG = "tfx_parallel.components.distributed_trainer"

LAYERS: List[Tuple[str, ...]] = [
    ("model_spec", "mesh_axes", "hyperparameters", "warm_start"),
    ("optimizers", "sharding"),
    ("config",),
    ("models", "inputs", "user_module"),
    ("job", "failures"),
    ("plan",),
    ("engines",),
    ("kube",),
    ("run",),
    ("executor", "replica"),
    ("component",),
]

# Imports that still point up, each with why and who removes it. The test fails when
# one disappears, so this list only shrinks.
# None is left: the replica's entry point, which runs run.train's main, moved from kube/
# to the top (replica.py, beside the executor; issue #49 item 6).
UPWARD: Dict[Tuple[str, str], str] = {}


def unit_of(dotted: str) -> Optional[str]:
  """The layer entry a module (dotted, below PKG) belongs to: the longest that prefixes it."""
  names = [n for layer in LAYERS for n in layer]
  found = [n for n in names if dotted == n or dotted.startswith(n + ".")]
  return max(found, key=len) if found else None


def layer_of(unit: str) -> int:
  return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(TRAINER).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts = parts[:-1]
  return ".".join(parts)


def imported(node: ast.AST, path: pathlib.Path) -> List[str]:
  """Modules (or module.attribute) an import node names, absolute."""
  if isinstance(node, ast.Import):
    return [a.name for a in node.names]
  if isinstance(node, ast.ImportFrom):
    base = node.module or ""
    if node.level:
      package = list(path.relative_to(COMPONENTS.parent).parent.parts)
      package = package[:len(package) - node.level + 1]
      base = ".".join(["tfx_parallel"] + package[1:] + ([base] if base else []))
    return [f"{base}.{a.name}" for a in node.names]
  return []


def trainer_files() -> List[pathlib.Path]:
  return sorted(p for p in TRAINER.rglob("*.py"))


def edges() -> Iterator[Tuple[pathlib.Path, int, str, str, str]]:
  """(file, line, importer unit, imported module below PKG, imported unit)."""
  for path in trainer_files():
    me = module_name(path)
    if not me:
      continue  # distributed_trainer/__init__.py
    mine = unit_of(me)
    assert mine is not None, f"{path.relative_to(ROOT)} is in no layer: add it to LAYERS"
    for node in ast.walk(ast.parse(path.read_text())):
      for name in imported(node, path):
        if name.startswith(PKG + "."):
          target = name[len(PKG) + 1:]
          theirs = unit_of(target)
          assert theirs is not None, f"{path}:{node.lineno} imports {target}, in no layer"
          yield path, node.lineno, mine, target, theirs


def test_every_import_in_the_trainer_points_down_or_stays_in_its_unit():
  wrong, seen = [], set()
  for path, line, mine, target, theirs in edges():
    if mine == theirs or layer_of(theirs) < layer_of(mine):
      continue
    key = (str(path.relative_to(TRAINER)), ".".join(target.split(".")[:2]))
    if key in UPWARD:
      seen.add(key)
      continue
    wrong.append(f"{path.relative_to(ROOT)}:{line}: {mine} (layer {layer_of(mine)}) imports "
                 f"{target} ({theirs}, layer {layer_of(theirs)})")
  assert wrong == [], "\n".join(wrong)
  assert set(UPWARD) - seen == set(), "allowed upward imports that are gone: remove them"


def test_the_layers_are_the_actual_structure():
  """Every folder and top-level module of the trainer is in a layer (kube may not exist
  yet on this branch), and the lower layers are really used from above."""
  for path in trainer_files():
    assert module_name(path) == "" or unit_of(module_name(path)) is not None, path
  used = {theirs for *_, theirs in edges()}
  assert {"model_spec", "config", "user_module", "plan", "engines", "run"} <= used, used


def test_components_import_neither_the_pipeline_nor_kubeflow():
  wrong = []
  for path in sorted(COMPONENTS.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      for name in imported(node, path):
        if name.startswith(("tfx_parallel.pipeline", "tfx_parallel.kubeflow")):
          wrong.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
  assert wrong == []


@pytest.mark.parametrize("source,bad", [
    ("from tfx_parallel.components.distributed_trainer.run import train\n", True),
    ("from tfx_parallel.components.distributed_trainer import model_spec\n", False),
    ("def f():\n  from tfx_parallel.components.distributed_trainer.engines import x\n", True),
])
def test_the_layer_check_sees_an_upward_import(tmp_path, source, bad):
  """The check itself can fail: config (layer 1) importing run/ or engines/ is caught."""
  path = TRAINER / "config.py"
  node_names = [n for node in ast.walk(ast.parse(source)) for n in imported(node, path)]
  targets = [unit_of(n[len(PKG) + 1:]) for n in node_names]
  assert any(layer_of(t) > layer_of("config") for t in targets) == bad, targets


# --- What really loads ------------------------------------------------------------------

# What a module's docstring or comment says it does not load: module (below PKG) ->
# (the words in its source, the package it must not load). Each is checked by importing
# the module in a fresh interpreter; CLAIM_WORDS finds claims not listed here.
CLAIMS: Dict[str, Tuple[str, str]] = {
    "mesh_axes": ("Pure: no TensorFlow.", "tensorflow"),
    "plan.devices": ("Nothing here imports TensorFlow.", "tensorflow"),
    "job": ("splits imports TensorFlow, which importing job does not", "tensorflow"),
    "optimizers": ("a leaf module that imports nothing of ours", PKG),
    "engines": ("importing this package imports none of them", PKG + ".engines."),
    "kube.replica": ("this package imports nothing above it", PKG + ".run"),
}
# Where the claim about optimizers is written (config.py names the leaf it imports).
CLAIM_FILES = {"optimizers": "config.py"}
CLAIM_WORDS = re.compile(r"(imports? (nothing|none|no)\b|Nothing here imports|Pure: no |"
                         r"importing \w+ does not|avoids? (TensorFlow|importing))", re.I)


def dotted(path: pathlib.Path) -> str:
  name = module_name(path)
  return PKG + ("." + name if name else "")


def _probe(*args: str) -> Dict[str, dict]:
  out = subprocess.run([sys.executable, str(ROOT / "tests" / "import_probe.py"), *args],
                       capture_output=True, text=True, timeout=900, check=True)
  return json.loads(out.stdout.split("RESULT", 1)[1])


@pytest.fixture(scope="module")
def loaded() -> Dict[str, List[str]]:
  """Module (below PKG) -> the trainer modules (below PKG) in ``sys.modules`` after
  importing it alone."""
  found = _probe(*[dotted(p) for p in trainer_files() if module_name(p)])
  out = {}
  for name, result in found.items():
    assert "error" not in result, (name, result)
    out[name[len(PKG) + 1:]] = [m[len(PKG) + 1:] for m in result["modules"]
                                if m.startswith(PKG + ".")]
  return out


def upward_loads(loaded: Dict[str, List[str]]) -> List[str]:
  wrong = []
  for me, modules in sorted(loaded.items()):
    mine = unit_of(me)
    for other in modules:
      theirs = unit_of(other)
      if theirs is None or theirs == mine or layer_of(theirs) <= layer_of(mine):
        continue
      if layer_of(theirs) == layer_of(mine):
        wrong.append(f"{me} loads {other}: units of one layer ({mine}, {theirs})")
        continue
      wrong.append(f"{me} (layer {layer_of(mine)}) loads {other} ({theirs}, layer "
                   f"{layer_of(theirs)})")
  return wrong


def test_importing_a_module_alone_loads_no_higher_layer(loaded):
  assert set(loaded) == {module_name(p) for p in trainer_files() if module_name(p)}
  assert upward_loads(loaded) == []


def test_the_load_check_sees_a_higher_layer_loaded(loaded):
  """The check itself can fail: config loading engines.factory is caught."""
  assert upward_loads({"config": ["config", "engines.factory"]}) == [
      "config (layer 2) loads engines.factory (engines, layer 6)"]
  assert upward_loads({"config": loaded["config"]}) == []


def test_what_a_docstring_says_a_module_does_not_load_is_true():
  found = _probe("--fresh", *[f"{PKG}.{m}" for m in CLAIMS])
  wrong = []
  for module, (words, package) in CLAIMS.items():
    source = TRAINER / CLAIM_FILES.get(module, module.replace(".", "/") + ".py")
    if not source.exists():
      source = TRAINER / module.replace(".", "/") / "__init__.py"
    assert words in source.read_text(), f"{source}: the claim {words!r} is gone"
    result = found[f"{PKG}.{module}"]
    assert "error" not in result, (module, result)
    me = f"{PKG}.{module}"
    hits = [m for m in result["modules"]
            if (m == package or m.startswith(package if package.endswith(".") else package + "."))
            and not (me == m or me.startswith(m + "."))]  # Not itself, nor its packages.
    if hits:
      wrong.append(f"{module} says {words!r} and loads {hits[:3]}")
  assert wrong == []


def test_every_claim_of_what_a_module_does_not_load_is_checked():
  listed = [words for words, _ in CLAIMS.values()]
  unlisted = []
  for path in trainer_files():
    for number, line in enumerate(path.read_text().splitlines(), 1):
      if CLAIM_WORDS.search(line) and not any(w in line for w in listed):
        unlisted.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
  assert unlisted == [], "claims of what a module does not load, not in CLAIMS:\n" + \
      "\n".join(unlisted)


# --- Function-local imports -------------------------------------------------------------

# Third-party modules deferred into functions for start-up cost or because they are
# optional; the reason is stated once here.
DEFERRED = {
    "tensorflow": "start-up: importing TensorFlow costs seconds; the CLI, the pipeline "
                  "process and config validation must not pay it (see "
                  "pipeline/deferred_imports.py and tests/test_pipeline_imports.py)",
    "tf_keras": "start-up: imports TensorFlow",
    "tensorflow_transform": "start-up: imports TensorFlow and Beam",
    "tensorflow_metadata": "start-up: protobuf modules only the schema path needs",
    "tfx": "start-up: TFX's imports are the largest part of the pipeline's start-up",
    "tfx_bsl": "start-up: imports TensorFlow and Arrow",
    "kubernetes": "optional: only a TFJob / TrainJob run needs the Kubernetes client",
    "urllib3": "optional: comes with the Kubernetes client",
    "matplotlib": "optional and slow: only the plots need it",
    "numpy": "start-up: only the data paths need it",
}

# Files (or folders, ending in /) another engineer restructures this session: their
# function-local imports are theirs to sort (the test still covers every other file).
OWNED_ELSEWHERE = {
}

_REASON = re.compile(r"#\s*(?!pylint:)(\S.*)$")


def _reason(lines: List[str], line: int) -> Optional[str]:
  """The comment giving why: on the import's line (before any pylint directive), or on
  the line above the block of imports it starts or belongs to."""
  candidates = [lines[line - 1]]
  above = line - 2
  while above >= 0 and re.match(r"\s*(from \S+ )?import ", lines[above]):
    above -= 1  # One comment serves a block of imports.
  if above >= 0:
    candidates.append(lines[above])
  for text in candidates:
    comment = text.split("# pylint:")[0]
    found = _REASON.search(comment)
    if found and len(found.group(1).strip()) >= 8:
      return found.group(1).strip()
  return None


def local_imports() -> Iterator[Tuple[pathlib.Path, int, str]]:
  for path in sorted(COMPONENTS.rglob("*.py")):
    tree = ast.parse(path.read_text())
    seen = set()
    for func in ast.walk(tree):
      if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for node in ast.walk(func):
          if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in seen:
            seen.add(id(node))
            name = (node.names[0].name if isinstance(node, ast.Import)
                    else "." * node.level + (node.module or ""))
            yield path, node.lineno, name


def unexplained(path: pathlib.Path, line: int, name: str, lines: List[str]) -> bool:
  if name.split(".")[0] in DEFERRED:
    return False
  where = str(path.relative_to(COMPONENTS))
  if any(where == owned or (owned.endswith("/") and where.startswith(owned))
         for owned in OWNED_ELSEWHERE):
    return False
  return _reason(lines, line) is None


def test_every_function_local_import_says_why():
  """An optional dependency or start-up cost, in a comment at the import (or above it),
  or the module is in DEFERRED."""
  wrong = []
  for path, line, name in local_imports():
    lines = path.read_text().splitlines()
    if unexplained(path, line, name, lines):
      wrong.append(f"{path.relative_to(ROOT)}:{line}: {name}")
  assert wrong == [], "function-local imports without a reason:\n" + "\n".join(wrong)


def test_a_pylint_directive_alone_is_no_reason():
  lines = ["def f():",
           "  import json  # pylint: disable=g-import-not-at-top"]
  assert _reason(lines, 2) is None
  lines[1] = "  import json  # Start-up: only the report needs it.  # pylint: disable=x"
  assert _reason(lines, 2) == "Start-up: only the report needs it."
  block = ["def f():", "  # Start-up: these import TensorFlow.", "  import a", "  import b", "  x = 1",
           "  import c"]
  assert _reason(block, 4) == "Start-up: these import TensorFlow." and _reason(block, 6) is None
  assert unexplained(TRAINER / "config.py", 2, "tensorflow", ["", "  import tensorflow"]) is False
