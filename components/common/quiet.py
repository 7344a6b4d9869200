"""Keeps known, harmless library noise off the console of a pipeline the user builds.

``tfx-parallel run`` filters its console (pipeline/console.py). A pipeline of the user's
own (their script, our components, LocalDagRunner) has no such filter; calling
:func:`quiet` once at its top gives it the same quiet for the lines below, with no
other effect: only records and messages matching :data:`LOG_NOISE` /
:data:`TEARDOWN_NOISE` are dropped (from the ``tensorflow``, ``absl`` and Beam's
DoFnRunner loggers, and from ``sys.unraisablehook``), and Beam's copy of an exception
it raises next (:func:`is_reraised`); every other line is untouched, and the root logger's
level and handlers are not changed. The training process the trainer starts inherits
:data:`QUIET_ENV` and calls :func:`install_if_asked`.
"""
import logging
import os
import re
import sys

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
    (r"(Artifact|Context)Query\.property_predicate is not supported",
     "TFX 1.16's own input resolver logs it for every component with inputs "
     "(tfx/orchestration/portable/input_resolution/channel_resolver.py); the pipeline "
     "uses no property predicates"),
)
_LOG_NOISE_RE = re.compile("|".join(f"(?:{p})" for p, _ in LOG_NOISE))

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
  """Drops the known library noise of :data:`LOG_NOISE` and :data:`TEARDOWN_NOISE` in this
  process and in the training processes it starts. Idempotent."""
  os.environ[QUIET_ENV] = "1"
  for name in ("tensorflow", "absl", BEAM_RERAISE_LOGGER):
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
      logger.addFilter(_FILTER)
  if not getattr(sys.unraisablehook, "tfx_parallel_quiet", False):
    sys.unraisablehook = _teardown_hook(sys.unraisablehook)


def install_if_asked(environ=None) -> bool:
  """:func:`quiet` when :data:`QUIET_ENV` is set (a child of a quiet process)."""
  if (environ if environ is not None else os.environ).get(QUIET_ENV):
    quiet()
    return True
  return False
