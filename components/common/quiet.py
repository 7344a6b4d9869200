"""Keeps known, harmless library noise off the console: one list, three consoles.

:data:`NOISE` lists the console lines known to be harmless, each with its reason
(TensorFlow's C++ start-up notes, third-party deprecation warnings, ...), and
:data:`LOG_NOISE` the log records. ``tfx-parallel run`` and ``compile`` filter their
console with them (pipeline/console.py: the lines go to a log file). A pipeline of the
user's own (their script, our components, LocalDagRunner) calls :func:`quiet` once, at
its top: the log records of :data:`LOG_NOISE` are dropped (from the ``tensorflow``,
``absl`` and Beam's DoFnRunner loggers), and Beam's copy of an exception it raises next
(:func:`is_reraised`), teardown errors of :data:`TEARDOWN_NOISE` (``sys.unraisablehook``),
and the console lines of :data:`NOISE` (file descriptor 2 goes through a filter
process). Every other line is untouched, and the root logger's level and handlers are
not changed. The training process the trainer starts inherits :data:`QUIET_ENV` and
calls :func:`install_if_asked`.
"""
import logging
import os
import re
import signal
import subprocess
import sys
from typing import BinaryIO

# Set by quiet(); a child process (the trainer's training process) reads it.
QUIET_ENV = "TFX_PARALLEL_QUIET"

# (pattern, why it is harmless) for log records of the "tensorflow" and "absl" loggers.
LOG_NOISE = (
    (r"is not a valid node name\. Accepted names conform to Regex",
     "TF 2.16 names a tf.function's input placeholders after the keys of its input dict, "
     "here the feature names; a CSV header such as 'trip miles' is no valid op name, so "
     "TF logs this and makes an unnamed placeholder instead (tensorflow/python/framework/"
     "tensor.py, _graph_placeholder, TODO b/262413656). The feature is still fed by its "
     "dict key, in training and in the serving signature"),
    (r"calls to <function MeshTrainer\._steps_function\.<locals>\.<lambda> at 0x[0-9a-f]+> "
     r"triggered tf\.function retracing",
     "mesh layout: each execution length has its own step function, traced once and "
     "reused (engines/mesh_runtime.py _steps_function). Executions end at multiples of "
     "steps_per_execution and at each epoch's end (engines/epochs.py), so a run whose "
     "epoch is not a multiple of steps_per_execution traces up to steps_per_execution "
     "of them, and TF's frequent-tracing detector (tensorflow/python/eager/"
     "polymorphic_function/polymorphic_function.py:110-111, TF 2.16: 5 traces of one "
     "Python function within its last 10 calls) counts them together. The cost, one "
     "DTensor compile per length, is stated in docs/layouts.md; no function is traced "
     "twice"),
    (r"(Artifact|Context)Query\.property_predicate is not supported",
     "TFX 1.16's own input resolver logs it for every component with inputs "
     "(tfx/orchestration/portable/input_resolution/channel_resolver.py); the pipeline "
     "uses no property predicates"),
)
_LOG_NOISE_RE = re.compile("|".join(f"(?:{p})" for p, _ in LOG_NOISE))

# (pattern, why it is harmless) for whole console lines: Python logging, warnings, and
# what TensorFlow's C++ code writes to file descriptor 2. Matched with re.search.
NOISE = (
    (r"Unable to register cu(FFT|DNN|BLAS) factory",
     "TensorFlow's C++ CUDA plugins register twice at import (TF 2.16); logged at ERROR "
     "level on every machine, GPU or not, and it changes nothing"),
    (r"TF-TRT Warning: Could not find TensorRT",
     "TensorRT is optional; TensorFlow runs without it"),
    (r"This TensorFlow binary is optimized to use available CPU instructions",
     "a build note about CPU instruction sets"),
    (r"oneDNN custom operations are on",
     "a note that oneDNN may change float rounding slightly"),
    (r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
     "a note from C++ absl in gRPC / TensorFlow"),
    (r"site-packages/.*: (FutureWarning|DeprecationWarning|PendingDeprecationWarning): ",
     "a third-party library's deprecation notice (e.g. google.api_core on Python 3.10); "
     "nothing the user can act on"),
    (r"Compiled the loaded model, but the compiled metrics have yet to be built",
     "tf_keras note when a SavedModel is loaded for evaluation only"),
    (r"No training configuration found in save file, so the model was \*not\* compiled",
     "tf_keras note (tf_keras/src/saving/legacy/saved_model/load.py:181) when TFMA, the "
     "Pusher or the evaluator loads the exported serving model, which has no optimizer "
     "and is never trained again"),
    (r"local_rendezvous\.cc:\d+\] Local rendezvous is aborting with status: OUT_OF_RANGE: "
     r"End of sequence",
     "TF 2.16 logs it (W) each time a tf.data iterator reaches the end of its data, the "
     "normal end of an evaluation pass (tensorflow/core/framework/local_rendezvous.cc)"),
    (r"DEFAULT_IMAGE_PATH_KEY is not found in default_image",
     "`tfx-parallel compile`: TFX 1.16 logs it when the default image *is* given (the "
     "test in tfx/orchestration/kubeflow/v2/pipeline_builder.py _check_default_image is "
     "inverted); every component gets its image from the config"),
    (r"coordination_service_agent\.cc:\d+\] Coordination agent has successfully connected",
     "multi_worker: TensorFlow's C++ coordination service says each worker joined the "
     "cluster (INFO, logged through absl before TF_CPP_MIN_LOG_LEVEL applies)"),
    (r"Tensor RefCount not reliable if buf_ points to a SubBuffer",
     "multi_worker: logged at ERROR level by Tensor::RefCount() "
     "(tensorflow/core/framework/tensor.cc) for a tensor that is a slice of another "
     "buffer, as the collective all-reduce's are; it returns -1 and training goes on "
     "(the recorded losses match the single layout's)"),
    (r"op_level_cost_estimator\.cc:\d+\] Incompatible Matrix dimensions$",
     "mesh layout: Grappler's cost estimate of a MatMul in a DTensor function "
     "(tensorflow/core/grappler/costs/op_level_cost_estimator.cc, CountMatMulOperations, "
     "TF 2.16) sees inner dimensions that differ (a DTensor function's global shapes "
     "where the devices hold blocks); it logs at ERROR level and counts no operations "
     "for that MatMul. The estimate only guides Grappler: the devices multiply their "
     "blocks (the mesh's losses match the single layout's, tests/test_trainer_mesh.py). "
     "Routed here, not fixed: none of Grappler's switchable optimizers "
     "(tf.config.optimizer.set_experimental_options: layout, constant folding, "
     "remapping, arithmetic, dependency, loop, shape, function, pin to host) stops "
     "it; only turning Grappler off does, which would slow every step"),
    (r"^(ERROR:absl:)?Execution \d+ failed\.$",
     "TFX's launcher logs it when a component fails; the CLI's own line names the "
     "component and its error, and the log file has both"),
) + LOG_NOISE  # TF's invalid node names, TFX's property predicates.
_NOISE_RE = re.compile("|".join(f"(?:{pattern})" for pattern, _ in NOISE))
# A warnings.warn line is followed by the source line that raised it, indented.
_WARNING_RE = re.compile(r": \w*Warning: ")


def is_noise(line: str) -> bool:
  """True if ``line`` is one of the known harmless lines of :data:`NOISE`."""
  return bool(_NOISE_RE.search(line))


class LineFilter:
  """Decides, line by line, what reaches the console.

  A dropped Python warning line (``path:line: FooWarning: message``) takes the
  indented source line that follows it along. Every other line is kept.
  """

  def __init__(self):
    self._drop_echo = False

  def keep(self, line: str) -> bool:
    if self._drop_echo and line[:1] in (" ", "\t"):
      self._drop_echo = False
      return False
    self._drop_echo = False
    if is_noise(line):
      self._drop_echo = bool(_WARNING_RE.search(line))
      return False
    return True


def filter_lines(source: BinaryIO, console: BinaryIO, log: BinaryIO) -> None:
  """Copies every line of ``source`` to ``log`` and the kept ones to ``console``,
  until end of file. Bytes that are not UTF-8 are passed through unchanged."""
  keep = LineFilter().keep
  for raw in iter(source.readline, b""):
    log.write(raw)
    log.flush()
    if keep(raw.decode("utf-8", errors="replace")):
      console.write(raw)
      console.flush()



# (object repr pattern, exception type name, why) for exceptions raised in __del__.
TEARDOWN_NOISE = (
    ("AtomicFunction.__del__", "TypeError",
     "at interpreter exit TF 2.16's AtomicFunction.__del__ runs after its module's "
     "globals are cleared (RUNTIME_FUNCTION_REFS is None): 'NoneType' object is not "
     "subscriptable. The process is ending; nothing is lost"),
)


# Beam's DoFnRunner logs an exception raised in a DoFn, with its traceback, and then
# raises it again (apache_beam/runners/common.py, DoFnRunner._reraise_augmented:
# ``_LOGGER.exception(new_exn); raise new_exn``): the record is a copy of the error the
# run stops with, which the caller reports (the CLI: one line naming file and line).
BEAM_RERAISE_LOGGER = "apache_beam.runners.common"


def is_log_noise(message: str) -> bool:
  return bool(_LOG_NOISE_RE.search(message))


def is_reraised(record: logging.LogRecord) -> bool:
  """True for Beam's copy of a DoFn's exception (:data:`BEAM_RERAISE_LOGGER`)."""
  return (record.name == BEAM_RERAISE_LOGGER and record.levelno >= logging.ERROR
          and bool(record.exc_info))


class LogNoiseFilter(logging.Filter):
  """Drops records whose message is :data:`LOG_NOISE`, and Beam's copy of a DoFn's
  exception (:func:`is_reraised`)."""

  def filter(self, record: logging.LogRecord) -> bool:
    if is_reraised(record):
      return False
    try:
      return not is_log_noise(record.getMessage())
    except Exception:  # pylint: disable=broad-except  # a bad format: let it through.
      return True


def _teardown_hook(previous):
  noise = tuple((where, exc) for where, exc, _ in TEARDOWN_NOISE)

  def hook(unraisable):
    where = repr(getattr(unraisable, "object", ""))
    exc = getattr(getattr(unraisable, "exc_type", None), "__name__", "")
    for fragment, name in noise:
      if fragment in where and exc == name:
        return
    previous(unraisable)
  hook.tfx_parallel_quiet = True
  return hook


_FILTER = LogNoiseFilter()


def quiet() -> None:
  """Drops the known library noise in this process and in the training processes it
  starts: log records of :data:`LOG_NOISE`, teardown errors of :data:`TEARDOWN_NOISE`,
  and every console line of :data:`NOISE` (TensorFlow's C++ start-up notes, third-party
  deprecation warnings: file descriptor 2 goes through a small filter process, as on
  ``tfx-parallel run``'s console). Sets ``TF_CPP_MIN_LOG_LEVEL=2`` unless set, as each
  of the executors does: call it first, before TensorFlow is imported, and TF's C++ INFO
  and WARNING notes stay off too. Every other line reaches the console. Idempotent."""
  os.environ[QUIET_ENV] = "1"
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  for name in ("tensorflow", "absl", BEAM_RERAISE_LOGGER):
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
      logger.addFilter(_FILTER)
  if not getattr(sys.unraisablehook, "tfx_parallel_quiet", False):
    sys.unraisablehook = _teardown_hook(sys.unraisablehook)
  _filter_stderr()


# Set in a process whose file descriptor 2 already goes through a line filter (and
# inherited by the processes it starts): no second filter.
STDERR_FILTERED_ENV = "TFX_PARALLEL_STDERR_FILTERED"


# The filter process (not ``-m``: the package imports this module first).
_FILTER_COMMAND = ("import sys; from tfx_parallel.components.common import quiet; "
                   "sys.exit(quiet.filter_main())")


def _filter_stderr() -> None:
  """Sends file descriptor 2 through a filter process (:func:`filter_main`). The filter ends when the last process
  holding the pipe exits, after copying the lines it has, so none is lost."""
  if os.environ.get(STDERR_FILTERED_ENV):
    return
  os.environ[STDERR_FILTERED_ENV] = "1"
  env = {k: v for k, v in os.environ.items() if k != QUIET_ENV}
  sys.stderr.flush()
  read_end, write_end = os.pipe()
  saved = os.dup(2)
  subprocess.Popen([sys.executable, "-c", _FILTER_COMMAND], stdin=read_end, stdout=saved, stderr=saved, close_fds=True, env=env)
  os.close(read_end)
  os.close(saved)
  os.dup2(write_end, 2)
  os.close(write_end)


def install_if_asked(environ=None) -> bool:
  """:func:`quiet` when :data:`QUIET_ENV` is set (a child of a quiet process)."""
  if (environ if environ is not None else os.environ).get(QUIET_ENV):
    quiet()
    return True
  return False


def filter_main() -> int:
  """The filter process of :func:`quiet`: stdin's kept lines to stdout, the others
  dropped."""
  # Ctrl-C reaches the whole process group: the last words of the process it filters
  # (a traceback) must still get through, so the filter ends only at end of input.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  with open(os.devnull, "wb") as dropped:
    filter_lines(sys.stdin.buffer, sys.stdout.buffer, dropped)
  return 0

