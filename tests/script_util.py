"""Loading a repository script (not an installed module) by its path, for tests."""
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(relpath: str):
  """The module at REPO/``relpath`` (e.g. "docs/gen_reference.py"), run once per call and
  named after its file."""
  name = os.path.splitext(os.path.basename(relpath))[0]
  spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relpath))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
