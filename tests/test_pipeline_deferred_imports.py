"""pipeline/deferred_imports.py: a deferred package loads its submodules alone on import
statements and runs its real ``__init__`` on any other use (issue 42, start-up)."""
import ast
import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from tfx_parallel.pipeline import deferred_imports

PROBE = """
import json, sys
sys.path.insert(0, {root!r})
from tfx_parallel.pipeline import deferred_imports
print(json.dumps(deferred_imports.defer("heavy")))
import heavy.light                                   # an import statement: the submodule
from heavy import other                              # alone, twice
after_submodules = "heavy.costly" in sys.modules
import heavy
same = heavy is sys.modules["heavy"] and heavy.light is sys.modules["heavy.light"]
value = heavy.VALUE                                   # any other name: the real __init__
print(json.dumps([after_submodules, same, value, "heavy.costly" in sys.modules,
                  heavy.costly.RAN, heavy.other is other, deferred_imports.defer("heavy")]))
try:
  heavy.MISSING
except AttributeError as e:
  print(json.dumps(str(e)))
"""


def test_a_deferred_package_loads_submodules_alone_and_its_init_on_other_use(tmp_path):
  pkg = tmp_path / "heavy"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("from heavy import costly\nfrom heavy import light\n"
                                   "VALUE = light.X + 1\n")
  (pkg / "costly.py").write_text("RAN = True\n")
  (pkg / "light.py").write_text("X = 41\n")
  (pkg / "other.py").write_text("")
  out = subprocess.run([sys.executable, "-c", PROBE.format(root=str(tmp_path))],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  lines = out.stdout.splitlines()
  assert lines[0] == "true"
  assert lines[1] == "[false, true, 42, true, true, true, false]"
  assert lines[2] == "\"module 'heavy' has no attribute 'MISSING'\""


def test_defer_refuses_a_module_that_is_not_a_package():
  with pytest.raises(ValueError, match="tfx_parallel_no_such_package is not an installed package"):
    deferred_imports.defer("tfx_parallel_no_such_package")


def _init_bindings(package: str):
  """(name, bound to) of the top-level bindings of ``package``'s __init__.py that do not
  import the submodule of the same name."""
  spec = importlib.util.find_spec(package)
  with open(spec.origin) as f:
    tree = ast.parse(f.read())
  submodules = {os.path.splitext(n)[0] for n in os.listdir(os.path.dirname(spec.origin))}
  clashes = []
  for node in tree.body:
    if isinstance(node, ast.ImportFrom):
      for alias in node.names:
        bound = alias.asname or alias.name
        whole = f"{node.module}.{alias.name}"
        if bound in submodules and whole != f"{package}.{bound}":
          clashes.append((bound, whole))
    elif isinstance(node, ast.Import):
      for alias in node.names:
        if alias.asname in submodules and alias.name != f"{package}.{alias.asname}":
          clashes.append((alias.asname, alias.name))
    elif isinstance(node, (ast.Assign, ast.FunctionDef, ast.ClassDef)):
      targets = ([t.id for t in node.targets if isinstance(t, ast.Name)]
                 if isinstance(node, ast.Assign) else [node.name])
      clashes += [(t, type(node).__name__) for t in targets if t in submodules]
  return clashes


@pytest.mark.parametrize("package", deferred_imports.PACKAGES)
def test_no_init_of_a_deferred_package_binds_a_submodule_name_to_something_else(package):
  """Then ``from PACKAGE import SUBMODULE`` gets what the real ``__init__`` would give."""
  assert _init_bindings(package) == []


def test_the_binding_check_sees_a_clash(tmp_path, monkeypatch):
  pkg = tmp_path / "clashy"
  pkg.mkdir()
  (pkg / "__init__.py").write_text(textwrap.dedent("""
      from clashy.impl import thing as tool
      from clashy import impl
      def other(): pass
  """))
  for name in ("impl", "tool", "other"):
    (pkg / f"{name}.py").write_text("thing = 1\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  assert _init_bindings("clashy") == [("tool", "clashy.impl.thing"), ("other", "FunctionDef")]
