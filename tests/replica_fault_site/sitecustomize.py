"""Loaded by the replica processes of tests/test_replica_exit_codes.py (PYTHONPATH): when
``TFX_PARALLEL_TEST_RAISE`` names an error (``module:Class``), the training loop
(run/train.py ``run``) raises it as it starts, inside the real replica entry point, so
that the replica's exit path (train.main, object_store.run_and_exit) meets it as it
would meet a GPU OOM or a store that stopped answering. Nothing else is changed; the
module is patched when the replica imports it (after tfenv.prepare())."""
import importlib
import importlib.abc
import os
import sys

_TARGET = "tfx_parallel.components.distributed_trainer.run.train"
_WHAT = os.environ.get("TFX_PARALLEL_TEST_RAISE")


def _error():
  module, name = _WHAT.split(":")
  cls = getattr(importlib.import_module(module), name)
  message = f"raised by tests/replica_fault_site ({name})"
  if module.startswith("tensorflow"):  # tf.errors.OpError(node_def, op, message)
    return cls(None, None, message)
  return cls(message)


class _Patch(importlib.abc.MetaPathFinder):
  """Patches run/train.py's ``run`` once the replica imports the module."""

  def find_spec(self, fullname, path, target=None):  # pylint: disable=unused-argument
    if fullname != _TARGET:
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(fullname)
    execute = spec.loader.exec_module

    def exec_module(module):
      execute(module)

      def run(job):
        raise _error()
      module.run = run
    spec.loader.exec_module = exec_module
    return spec


if _WHAT:
  import importlib.util  # pylint: disable=g-import-not-at-top
  sys.meta_path.insert(0, _Patch())
