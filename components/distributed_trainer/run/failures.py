"""Which training failures a rerun can fix: decided here, and only here.

A training process that stops on a config or model-module error (a layout rule that
matches nothing, a module that breaks the contract, a bad config value found late) fails
the same way on every rerun, so its message must not say "rerun to resume". Anything
else (a killed process, a peer that died, out of memory, a crash) may pass on a rerun,
which resumes from the last checkpoint.

The training child (train.py) exits with :data:`NOT_RESUMABLE_EXIT_CODE` after printing
the error as one line (:func:`one_line`); the launcher turns exit codes into the
message of the error the component fails with (:func:`process_failed`).
"""
from typing import Tuple, Type

# Exit code of a training process that stopped on an error a rerun cannot fix.
NOT_RESUMABLE_EXIT_CODE = 4


def not_resumable_types() -> Tuple[Type[BaseException], ...]:
  """Exception types a rerun cannot fix: config, module contract and layout rule errors."""
  from tfx_parallel.components.common.config_util import ConfigError  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines.sharding import ShardingError  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.user_module import ModuleError  # pylint: disable=g-import-not-at-top
  return (ConfigError, ModuleError, ShardingError)


def resumable(error: BaseException) -> bool:
  return not isinstance(error, not_resumable_types())


def one_line(error: BaseException) -> str:
  """The console line of a not-resumable error in the training process."""
  return f"[trainer] ERROR: {type(error).__name__}: {error}"


class NotResumableError(RuntimeError):
  """A training process stopped on an error a rerun cannot fix (its line is above)."""


def process_failed(name: str, code: int) -> RuntimeError:
  """The error for training process ``name`` that exited with ``code``."""
  if code == NOT_RESUMABLE_EXIT_CODE:
    return NotResumableError(
        f"Training process {name} stopped on a config or model module error (the line "
        f"'[trainer] ERROR: ...' above); fix it and run again: a rerun as is fails the same way.")
  return RuntimeError(
      f"Training process {name} failed with exit code {code}; the other "
      f"process(es) were stopped. Rerun to resume from the last checkpoint.")
