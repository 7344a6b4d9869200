"""The training process's memory at each boundary of its run, for
tests/test_trainer_planned_vs_measured.py. Test code only: production code has no such
hook (issue #39 item 9); this patches it from outside.

``TFXP_TEST_RSS_LOG=<path>``: the training child (run/train.py) appends to ``path`` one
JSON line per phase of its run, when the phase ends:

* ``build`` (``engine.build``: the model, loss and optimizer on the layout's devices),
* ``eval`` (each evaluation: the function ``engine.evaluator`` returns),
* ``train`` (``engine.train``: the steps; the checkpoints and evaluations its callbacks
  make are phases of their own, nested in it),
* ``checkpoint`` (run/checkpoint.py ``save``: the engine's live model and optimizer
  written), ``restore`` (run/checkpoint.py ``restore``: read back),
* ``export`` (from the end of ``memory.measure``, after training, to the end of
  run/export.py ``export``: the host's plain model, the trained weights copied into it,
  and the SavedModel written),

with ``rss_before`` and ``rss_after`` (the process's VmRSS, bytes), ``peak`` (its VmHWM
over the phase, its nested phases included) and ``own_peak`` (the same outside its nested
phases). The peak is reset at each boundary by writing 5 to /proc/self/clear_refs
(proc(5): "Reset the peak resident set size ("high water mark") to the process's current
resident set size value", Linux >= 4.0), and read from /proc/self/status.
"""
import json
import os

from tfx_parallel.components.distributed_trainer.engines import factory as engines
from tfx_parallel.components.distributed_trainer.plan import memory
from tfx_parallel.components.distributed_trainer.run import checkpoint

RSS_LOG_ENV = "TFXP_TEST_RSS_LOG"
SITE = os.path.dirname(os.path.abspath(__file__))


def status() -> dict:
  """VmRSS and VmHWM of this process, in bytes (/proc/self/status gives kB)."""
  out = {}
  with open("/proc/self/status") as f:
    for line in f:
      name, _, value = line.partition(":")
      if name in ("VmRSS", "VmHWM"):
        out[name] = int(value.split()[0]) * 1024
  return out


def reset_peak() -> None:
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")


class Recorder:
  """The phases open now (a stack), each with the peaks of its parts so far."""

  def __init__(self, path: str):
    self.path = path
    self.open = []  # [name, rss_before, peak, own_peak]
    reset_peak()

  def _segment(self) -> int:
    """The peak since the last boundary, folded into the open phases; then reset."""
    peak = status()["VmHWM"]
    for phase in self.open:
      phase[2] = max(phase[2], peak)
    if self.open:
      self.open[-1][3] = max(self.open[-1][3], peak)
    reset_peak()
    return peak

  def enter(self, name: str) -> None:
    self._segment()
    self.open.append([name, status()["VmRSS"], 0, 0])

  def exit(self, name: str) -> None:
    self._segment()
    phase, before, peak, own = self.open.pop()
    if phase != name:
      raise RuntimeError(f"rss hook: phase {name} ended inside {phase}")
    with open(self.path, "a") as f:
      f.write(json.dumps({"phase": name, "rss_before": before, "peak": peak, "own_peak": own,
                          "rss_after": status()["VmRSS"]}) + "\n")

  def wrap(self, name: str, fn):
    def wrapped(*args, **kwargs):
      self.enter(name)
      try:
        return fn(*args, **kwargs)
      finally:
        self.exit(name)
    return wrapped


def install(setattr_=setattr, environ=None) -> None:
  """Patches the engines, run/checkpoint.py ``save`` and ``restore``, ``memory.measure``
  and, once TensorFlow is loaded (when the run creates its engine), run/export.py
  ``export``."""
  environ = os.environ if environ is None else environ
  rec = Recorder(environ[RSS_LOG_ENV])
  for cls in (engines.FitEngine, engines.MeshEngine):
    setattr_(cls, "build", rec.wrap("build", cls.build))
    setattr_(cls, "train", rec.wrap("train", cls.train))
    evaluator = cls.evaluator

    def make_evaluator(self, *args, _evaluator=evaluator, **kwargs):
      return rec.wrap("eval", _evaluator(self, *args, **kwargs))

    setattr_(cls, "evaluator", make_evaluator)
  setattr_(checkpoint, "save", rec.wrap("checkpoint", checkpoint.save))
  setattr_(checkpoint, "restore", rec.wrap("restore", checkpoint.restore))

  measure, create = memory.measure, engines.create

  def measure_then_export(*args, **kwargs):
    out = measure(*args, **kwargs)
    rec.enter("export")
    return out

  def create_and_patch_export(*args, **kwargs):
    # Imports TensorFlow: run/train.py has configured the devices and loaded it by now.
    from tfx_parallel.components.distributed_trainer.run import export  # pylint: disable=g-import-not-at-top
    real = export.export

    def export_then_end(*a, **k):
      try:
        return real(*a, **k)
      finally:
        rec.exit("export")
    setattr_(export, "export", export_then_end)
    return create(*args, **kwargs)

  setattr_(memory, "measure", measure_then_export)
  setattr_(engines, "create", create_and_patch_export)


def env(path: str, environ=None) -> dict:
  """The environment for a child process that logs its phases' memory to ``path``."""
  environ = os.environ if environ is None else environ
  site = os.pathsep.join(p for p in (SITE, environ.get("PYTHONPATH", "")) if p)
  return {RSS_LOG_ENV: path, "PYTHONPATH": site}
