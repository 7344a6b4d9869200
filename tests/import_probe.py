"""What importing each module loads, each in an interpreter of its own (for
tests/test_trainer_layers.py).

``python tests/import_probe.py [--fresh] MODULE...`` prints one ``RESULT{json}``: module ->
the modules ``sys.modules`` holds after importing it alone (or ``{"error": ...}``).

Without ``--fresh`` the third-party packages every layer may use (``PRELOAD``: TensorFlow,
tf_keras, TFX, Beam) are imported once, then each module is imported in a child forked
from that interpreter (``os.fork``: its ``sys.modules`` holds none of ours), a few at a
time: a fresh interpreter per module would import TensorFlow once per module, minutes
on this machine. With ``--fresh`` each module gets a new interpreter of its own
(``subprocess``), nothing preloaded: for the modules whose docstrings say they do not
load a third-party package.
"""
import importlib
import json
import os
import subprocess
import sys

PKG = "tfx_parallel"
PRELOAD = ("numpy", "tensorflow", "tf_keras", "tfx.types", "tfx.dsl.io.fileio",
           "tfx.dsl.components.base.base_executor", "apache_beam")
AT_ONCE = 4


def loaded(module: str) -> dict:
  try:
    importlib.import_module(module)
  except Exception as e:  # pylint: disable=broad-except
    return {"error": f"{type(e).__name__}: {e}"}
  return {"modules": sorted(sys.modules)}


def forked(modules):
  """Each module imported in a child forked from this interpreter, ``AT_ONCE`` at a time;
  each child writes its answer to a file of its own (a pipe would fill and block it)."""
  import tempfile  # pylint: disable=g-import-not-at-top
  out, running = {}, {}
  pending = list(modules)
  with tempfile.TemporaryDirectory() as tmp:
    while pending or running:
      while pending and len(running) < AT_ONCE:
        module = pending.pop(0)
        path = os.path.join(tmp, f"{len(pending)}.json")
        pid = os.fork()
        if pid == 0:  # The child: import, report, leave without cleanup.
          try:
            with open(path, "w") as f:
              f.write(json.dumps(loaded(module)))
          finally:
            os._exit(0)  # pylint: disable=protected-access
        running[pid] = (module, path)
      pid, _ = os.wait()
      module, path = running.pop(pid)
      try:
        with open(path) as f:
          out[module] = json.loads(f.read())
      except (OSError, ValueError):
        out[module] = {"error": "the child died before it answered"}
  return out


def fresh(modules):
  procs = {m: subprocess.Popen([sys.executable, "-c",
                                "import json, sys; sys.path.insert(0, sys.argv[2]); "
                                "import import_probe as p; "
                                "print(json.dumps(p.loaded(sys.argv[1])))",
                                m, os.path.dirname(os.path.abspath(__file__))],
                               stdout=subprocess.PIPE, text=True) for m in modules}
  out = {}
  for m, proc in procs.items():
    text, _ = proc.communicate()
    out[m] = json.loads(text.strip().splitlines()[-1]) if text.strip() else {
        "error": f"exit {proc.returncode}"}
  return out


def main(argv) -> dict:
  if argv and argv[0] == "--fresh":
    return fresh(argv[1:])
  for name in PRELOAD:
    try:
      importlib.import_module(name)
    except ImportError:
      pass
  assert not any(m.startswith(PKG + ".") or m == PKG for m in sys.modules), \
      "a preloaded package imported tfx_parallel"
  return forked(argv)


if __name__ == "__main__":
  print("RESULT" + json.dumps(main(sys.argv[1:])))
