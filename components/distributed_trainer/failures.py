"""Which training failures a rerun can fix: decided here, and only here.

A rerun resumes from the last checkpoint, and fixes only what depends on the moment: a
killed or preempted process, a peer that died, the network, a filesystem that did not
answer, memory. Those are the errors :func:`resumable` names (TensorFlow's errors of the
runtime, ``OSError`` other than a missing or forbidden path, ``MemoryError``; a process
killed by a signal raises nothing). Every other error inside the training process is
met again by a rerun of the same config, module and data: a config value, the user
module (import, contract, a shape its model cannot take), the optimizer on this layout,
a layout rule, a checkpoint that does not fit, and a bug in code. Its message must not
say "rerun to resume".

Some runtime errors are config errors in disguise (:func:`config_error`): any error
raised before the run's first step completes (the build, the restore, the first
evaluation, the first step's compile), a DTensor layout error (it arrives as
``tf.errors.UnknownError`` or ``InvalidArgumentError``, e.g. "does not support sharded
0th dimension for the resource tensor for ResourceGatherOp"), and memory exhausted by
the first step (the same state and batch exhaust it again). Each becomes a
``ConfigError`` naming the setting to change; the child exits with
:data:`CONFIG_ERROR_EXIT_CODE` and the launcher raises a ConfigError (the CLI's exit 2).

The training child (train.py) exits with :data:`NOT_RESUMABLE_EXIT_CODE` after printing
the error as one line (:func:`one_line`; the user-facing errors of
:func:`user_error_types` without a traceback, any other with it); the launcher turns
exit codes into the message of the error the component fails with
(:func:`process_failed`).
"""
import os
import re
import traceback
from typing import Optional, Tuple, Type

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.optimizers import OptimizerError
from tfx_parallel.components.distributed_trainer.sharding import ShardingError
from tfx_parallel.components.distributed_trainer.user_module import ModuleError


class CheckpointMismatchError(ValueError):
  """A checkpoint does not fit this run's model and optimizer (a rerun meets it again)."""

# Exit code of a training process that stopped on an error a rerun cannot fix.
NOT_RESUMABLE_EXIT_CODE = 4
# Exit code of a training process that stopped on a config error (:func:`config_error`);
# the CLI's own code for an invalid config.
CONFIG_ERROR_EXIT_CODE = 2
# Exit code of a worker that stopped because a peer was lost (train.py returns it; kube/ uses it).
# Under restartPolicy ExitCode, 128-255 restarts the pod and 1-127 fails the job
# (IsRetryableExitCode: exitCode >= 128, pkg/util/train/train_util.go:24), so a lost
# peer restarts the whole job from its checkpoint. 200 is no signal's 128+n.
PEER_LOST_EXIT_CODE = 200

# Exit code of a replica whose executor stopped proving it is alive: 1-127, so that the
# operator fails the job instead of restarting the pod (restartPolicy ExitCode).
ORPHANED_EXIT_CODE = 3

# tf.errors of the runtime, which a rerun may not meet again: a peer or the network went
# away, a deadline passed, memory ran out, the runtime itself failed.
RESUMABLE_TF_ERRORS = ("UnavailableError", "AbortedError", "CancelledError",
                       "DeadlineExceededError", "ResourceExhaustedError", "InternalError",
                       "UnknownError", "DataLossError")
# OSErrors that name a path: the same path is missing or forbidden on a rerun.
_PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def user_error_types() -> Tuple[Type[BaseException], ...]:
  """The errors that say in their message what to fix (printed as one line, no
  traceback): config, module contract, optimizer, layout rule and checkpoint errors."""
  return (ConfigError, ModuleError, OptimizerError, ShardingError, CheckpointMismatchError)


def resumable(error: BaseException) -> bool:
  """Whether a rerun may not meet ``error`` again (module docstring)."""
  if isinstance(error, _PATH_ERRORS):
    return False
  if isinstance(error, (OSError, MemoryError)):
    return True
  return any(cls.__name__ in RESUMABLE_TF_ERRORS and cls.__module__.startswith("tensorflow")
             for cls in type(error).__mro__)


# DTensor's layout errors (tensorflow/dtensor/mlir/expansions/*.cc): the layout rules or
# the mesh ask for a split an op cannot take; a rerun meets them again.
DTENSOR_LAYOUT_MESSAGE = re.compile(
    r"does not support sharded \d+\w* dimension|to be divisible by sharding|"
    r"ResourceGatherOp|[Ll]ayout propagation|incompatible [Ll]ayouts?")
_VARIABLE = re.compile(r"(?:resource|variable|tensor)\s+'?([\w./:-]+/(?:kernel|bias|embeddings)\w*)")
# An op of the model DTensor cannot run under any layout rule or mesh (TF 2.16): a loop
# over a sequence (TensorList ops: a tf_keras LSTM, GRU or RNN without ``unroll=True``,
# tf.map_fn, a TensorArray), and stateful random ops the model's own code calls
# (tf.random.uniform, tf.nn.dropout; tf_keras's random layers draw statelessly on the mesh,
# which builds them with tf_keras's tf.random.Generator on: mesh_runtime.tf_random_generator;
# not one made outside build_model()).
# Checked before the layout rules: DTensor says "does not implement layout propagation"
# for both kinds.
_DTENSOR_LOOP_OP = re.compile(r"'tf\.(TensorList\w*|TensorArray\w*)' op")
_DTENSOR_UNSUPPORTED_OP = re.compile(r"'tf\.(\w+)' op does not implement layout propagation")
# A split DTensor read whole on the host (tensorflow/dtensor/cc/dtensor_device.cc): what
# ``model.get_weights()``, ``layer.get_weights()``, ``variable.numpy()`` or
# ``model.save_weights("w.h5")`` raise on a variable the mesh splits, e.g. in a user
# callback (``save_weights`` in TensorFlow's format saves each device's block).
_DTENSOR_WHOLE_COPY = "Trying to copy a non-single-device and non-replicated DTensor"
_DTENSOR_STATEFUL_RANDOM = re.compile(
    r"(?:'tf\.(\w+)' op ComputeLayoutForward error: )?"
    r"Stateful random operations are not supported in DTensor")


def _first_line(error: BaseException) -> str:
  text = str(getattr(error, "message", None) or error).strip()
  return (text.splitlines() or [""])[0][:400]


def config_error(error: BaseException, *, first_step_done: bool, layout: str = "",
                 state_bytes: Optional[int] = None) -> Optional[ConfigError]:
  """The ConfigError ``error`` stands for (module docstring), or None when it is not a
  config error in disguise. Errors that already name what to fix (:func:`user_error_types`)
  and a lost peer are not converted. ``state_bytes`` is the model and optimizer state
  the planner counts per device (plan/memory.py ``measure``), quoted on memory errors."""
  if isinstance(error, user_error_types()) or _tf_error_named(
      error, ("UnavailableError", "AbortedError", "CancelledError", "DeadlineExceededError")):
    return None
  what = f"{type(error).__name__}: {_first_line(error)}"
  if _DTENSOR_WHOLE_COPY in str(error):
    # Its message goes on with every device's block of the variable: not repeated.
    return ConfigError("trainer.layout", _whole_copy_fix(error))
  unsupported = _dtensor_unsupported_op(str(error))
  if unsupported:
    return ConfigError("trainer.layout", f"{unsupported} ({what}). Or train on a layout "
                                         f"without DTensor: single, mirrored, multi_worker")
  if DTENSOR_LAYOUT_MESSAGE.search(str(error)):
    variable = _VARIABLE.search(str(error))
    named = f" (variable {variable.group(1)})" if variable else ""
    return ConfigError("trainer.layout_rules",
                       f"DTensor cannot run a layout the rules ask for{named}: {what}. "
                       f"Change the module's layout_rules (an embedding table splits on its "
                       f"output dimension, (None, 'model')) or trainer.mesh")
  if _tf_error_named(error, ("ResourceExhaustedError",)) or isinstance(error, MemoryError):
    if first_step_done:
      return None
    figure = (f"the planner counts {state_bytes / 2**20:.1f} MiB of model and optimizer "
              f"state per device before activations; " if state_bytes else "")
    lower = ("split the model over more devices (a larger model axis in trainer.mesh), "
             if layout == "mesh" else "use a mesh layout to split the model, ")
    return ConfigError("trainer.batch_size",
                       f"out of memory before the first step completed ({what}): {figure}"
                       f"lower trainer.batch_size, {lower}or set trainer.device_memory to "
                       f"what a device has so that the planner picks a layout that fits")
  if not first_step_done and resumable(error) and not isinstance(error, OSError):
    return ConfigError("trainer",
                       f"the run failed before its first step completed, so a rerun meets it "
                       f"again: {what}")
  return None


def _whole_copy_fix(error: BaseException) -> str:
  """What to change when code of the run (a user callback, the module) read a variable
  the mesh splits as one host array, naming the line that did (the innermost frame
  outside TensorFlow, tf_keras and this package)."""
  ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # components/
  where = ""
  for frame in reversed(traceback.extract_tb(error.__traceback__)):
    path = os.path.abspath(frame.filename)
    if not (path.startswith(ours + os.sep) or "site-packages" in path
            or "dist-packages" in path or frame.filename.startswith("<")):
      where = f" at {frame.filename}:{frame.lineno} ({frame.name}: {(frame.line or '').strip()})"
      break
  return (f"code of the run{where} read a variable the mesh splits over its devices as one "
          f"array ({type(error).__name__}: {_DTENSOR_WHOLE_COPY} is not supported): on the "
          f"mesh layout model.get_weights(), layer.get_weights(), variable.numpy() and "
          f"model.save_weights() to an .h5 file cannot read a split variable, in a callback of "
          f"callbacks(spec) too (the trainer checkpoints, keeps the best evaluation's "
          f"weights and exports the model itself). Remove that read, or train on a layout "
          f"without DTensor: single, mirrored, multi_worker")


def _dtensor_unsupported_op(message: str) -> Optional[str]:
  """What to change when DTensor cannot run an op of the model whatever the layout rules
  and the mesh (:data:`_DTENSOR_LOOP_OP`), or None."""
  stateful = _DTENSOR_STATEFUL_RANDOM.search(message)
  if stateful:
    op = f" (op {stateful.group(1)})" if stateful.group(1) else ""
    return (f"the model draws random numbers with a stateful op{op}, which DTensor cannot "
            f"run (tf.random.uniform, tf.random.normal, tf.nn.dropout or "
            f"tf_keras.backend.dropout in the model's own code, or a tf_keras random layer "
            f"made outside build_model(), e.g. at module level or in call(); the random "
            f"layers build_model() makes draw statelessly on the mesh): use a "
            f"tf_keras.layers.Dropout made in build_model(), a tf.random.Generator or a "
            f"stateless op (tf.random.stateless_uniform) instead")
  loop = _DTENSOR_LOOP_OP.search(message)
  if loop:
    return (f"the model runs a loop over a sequence (op {loop.group(1)}), which DTensor "
            f"cannot run: a tf_keras LSTM, GRU or RNN needs unroll=True on the mesh; "
            f"tf.map_fn and TensorArrays cannot run there")
  op = _DTENSOR_UNSUPPORTED_OP.search(message)
  if op:
    return f"the model uses op {op.group(1)}, which DTensor cannot run"
  return None


def _tf_error_named(error: BaseException, names) -> bool:
  return any(cls.__name__ in names and cls.__module__.startswith("tensorflow")
             for cls in type(error).__mro__)


def one_line(error: BaseException) -> str:
  """The console line of a not-resumable error in the training process."""
  return f"[trainer] ERROR: {type(error).__name__}: {error}"


class NotResumableError(RuntimeError):
  """A training process stopped on an error a rerun cannot fix (its line is above)."""


def process_failed(name: str, code: int) -> RuntimeError:
  """The error for training process ``name`` that exited with ``code``."""
  if code == CONFIG_ERROR_EXIT_CODE:
    return ConfigError("trainer", f"training process {name} stopped on a config error (the "
                                  f"line '[trainer] ERROR: ...' above); fix the setting it "
                                  f"names and run again.")
  if code == NOT_RESUMABLE_EXIT_CODE:
    return NotResumableError(
        f"Training process {name} stopped on a config, model module or code error (the "
        f"line '[trainer] ERROR: ...' above); fix it and run again: a rerun as is fails "
        f"the same way.")
  return RuntimeError(
      f"Training process {name} failed with exit code {code}; the other "
      f"process(es) were stopped. Rerun to resume from the last checkpoint.")


# --- Exit codes of the resumable classes (each replica's and training process's status) ---
# A TFJob under restartPolicy ExitCode restarts a pod whose container exited >= 128 and
# fails the job on 1-127 (kubeflow/training-operator v1.9.0 pkg/util/train/train_util.go:
# 24-26 IsRetryableExitCode, applied in pkg/controller.v1/common/pod.go:352-372). The
# TrainJob runtime this project ships (kube/trainjob.py runtime_manifest) has the same
# boundary: its Job podFailurePolicy fails on 1-127 (FailJob, then FailJobSet), anything
# else is BackoffLimitExceeded, which JobSet restarts. So every resumable class exits
# >= 128, each with its own code, none a signal's 128+n but SIGTERM's own.
# A replica stopped by SIGTERM (node drain, spot/preemptible reclaim, a JobSet restart):
# 128 + SIGTERM, as the kubelet reports a container the signal ended.
PREEMPTED_EXIT_CODE = 143
OOM_EXIT_CODE = 201  # ResourceExhaustedError ("OOM when allocating"), MemoryError.
STORE_EXIT_CODE = 202  # An OSError other than a missing or forbidden path (S3, NFS, GCS).
DATA_LOSS_EXIT_CODE = 203  # DataLossError: a torn read of a record or checkpoint.
RESUMABLE_EXIT_CODE = 204  # Any other resumable runtime error (InternalError, UnknownError).

# {exit code: what it means}, for the step's message about a replica that exited with it.
EXIT_CODE_MEANINGS = {
    NOT_RESUMABLE_EXIT_CODE: "a config, model module or code error; not retried",
    CONFIG_ERROR_EXIT_CODE: "an invalid config (a layout the devices cannot run, memory exhausted by the first step); not retried",
    ORPHANED_EXIT_CODE: "the executor's heartbeat went stale; not retried",
    PEER_LOST_EXIT_CODE: "lost a peer; retryable",
    PREEMPTED_EXIT_CODE: "SIGTERM, e.g. preempted or drained; retryable",
    OOM_EXIT_CODE: "out of memory; retryable",
    STORE_EXIT_CODE: "a store or filesystem error; retryable",
    DATA_LOSS_EXIT_CODE: "DataLossError; retryable",
    RESUMABLE_EXIT_CODE: "a runtime error; retryable",
}


def exit_code(error: BaseException) -> int:
  """The exit status of a process that stopped on `error`: >= 128 when a rerun may not
  meet it again (:func:`resumable`), by kind; else :data:`NOT_RESUMABLE_EXIT_CODE`."""
  if not resumable(error):
    return NOT_RESUMABLE_EXIT_CODE
  names = {cls.__name__ for cls in type(error).__mro__
           if cls.__module__.startswith("tensorflow")}
  if isinstance(error, MemoryError) or "ResourceExhaustedError" in names:
    return OOM_EXIT_CODE
  if "DataLossError" in names:
    return DATA_LOSS_EXIT_CODE
  if names & {"UnavailableError", "AbortedError", "CancelledError", "DeadlineExceededError"}:
    return PEER_LOST_EXIT_CODE
  if isinstance(error, OSError):
    return STORE_EXIT_CODE
  return RESUMABLE_EXIT_CODE
