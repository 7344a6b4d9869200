"""Loaded by the replica processes of tests/test_replica_exit_codes.py (PYTHONPATH): when
``TFX_PARALLEL_TEST_RAISE`` names an error (``module:Class``), the replica raises it inside
the real replica entry point, so that the replica's exit path (train.main,
object_store.run_and_exit) meets it as it would meet a GPU OOM or a store that stopped
answering. ``TFX_PARALLEL_TEST_RAISE_AT_STEP`` says when: ``0`` (default) as the training
loop (run/train.py ``run``) starts, before the first step; ``n >= 1`` once step ``n`` has
completed (engines/callbacks.py ``Recorder.on_train_batch_end``, after it recorded the
step in the run state), which is when a resumable error keeps its class's exit code
(issue #49 item 2: before the first step completes it is a config error, exit 2).
Nothing else is changed; each module is patched when the replica imports it (after
tfenv.prepare())."""
import importlib
import importlib.abc
import os
import sys

_TRAIN = "tfx_parallel.components.distributed_trainer.run.train"
_CALLBACKS = "tfx_parallel.components.distributed_trainer.engines.callbacks"
_WHAT = os.environ.get("TFX_PARALLEL_TEST_RAISE")
_AT_STEP = int(os.environ.get("TFX_PARALLEL_TEST_RAISE_AT_STEP", "0"))


def _error():
  module, name = _WHAT.split(":")
  cls = getattr(importlib.import_module(module), name)
  message = f"raised by tests/replica_fault_site ({name})"
  if module.startswith("tensorflow"):  # tf.errors.OpError(node_def, op, message)
    return cls(None, None, message)
  return cls(message)


def _patch_train(module):
  def run(job, progress=None):  # pylint: disable=unused-argument
    raise _error()
  module.run = run


def _patch_callbacks(module):
  real = module.Recorder.on_train_batch_end

  def on_train_batch_end(self, batch, logs=None):
    real(self, batch, logs)
    if self.state.step >= _AT_STEP:
      raise _error()
  module.Recorder.on_train_batch_end = on_train_batch_end


class _Patch(importlib.abc.MetaPathFinder):
  """Patches module ``target`` with ``patch`` once the replica imports it."""

  def __init__(self, target, patch):
    self.target, self.patch = target, patch

  def find_spec(self, fullname, path, target=None):  # pylint: disable=unused-argument
    if fullname != self.target:
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(fullname)
    execute = spec.loader.exec_module

    def exec_module(module):
      execute(module)
      self.patch(module)
    spec.loader.exec_module = exec_module
    return spec


if _WHAT:
  import importlib.util  # pylint: disable=g-import-not-at-top
  if _AT_STEP <= 0:
    sys.meta_path.insert(0, _Patch(_TRAIN, _patch_train))
  else:
    sys.meta_path.insert(0, _Patch(_CALLBACKS, _patch_callbacks))
