"""Checkpoints in TensorFlow's own format (``tf.train.Checkpoint``), readable on any layout.

A checkpoint directory holds what ``tf.train.latest_checkpoint`` and
``tf.train.Checkpoint(model=..., optimizer=...).read(prefix)`` expect::

    checkpoint                          TF's CheckpointState: the committed checkpoints
    ckpt-8.index, ckpt-8.data-*         model and optimizer, keyed by object graph
    ckpt-8.json                         the run state and the layout that wrote it
    .lock                               (Lock)

Any layout resumes any other's: each tensor is saved with its global shape, keyed by the
model's and the optimizer's object graph, not by device. On a mesh the objects are the
mesh's own (engines.MeshEngine.checkpointed) and each variable is a DVariable, whose
``_DVariableSaveable`` hands SaveV2 a ``DSaveSpec`` with the global shape and the
variable's layout on the host mesh, so each device writes its block as a slice of the
global tensor (tensorflow/dtensor/python/d_variable.py, TF 2.16.2); functional_saver.py
``MultiDeviceSaver.restore`` runs a restore into a custom device (DTensor) inside a
``tf.function`` "because custom devices, such as DTensor, usually do a sharded save and
restore", so RestoreV2 reads each device's block in its target layout. No host copy and
no whole split variable on a device. A mirrored or single-device model reads the same
keys into its own variables.

Writes are atomic: the tensors and the ``.json`` are written first, then TensorFlow's
``checkpoint`` state file (a CheckpointState proto, in the text format that
checkpoint_management.py ``update_checkpoint_state_internal`` writes) is replaced in one
rename. A process killed mid-write leaves the state naming the previous checkpoint,
which ``latest`` returns; the torn files are removed by the next save.
"""
import json
import os
import re
import uuid
from typing import Dict, List, Optional

from tfx_parallel.components.distributed_trainer.failures import CheckpointMismatchError

_NAME = "ckpt"
_STATE = "checkpoint"  # The file tf.train.latest_checkpoint reads.
_KEEP = 2
_STEP = re.compile(rf"^{_NAME}-(\d+)(?:\.|_temp|$)")
# Config keys that say where a run trains, not what it computes: a rerun with any of
# them changed (mesh 2x2 -> mirrored x2, a TFJob restarted with fewer GPUs) resumes the
# same checkpoints (executor.checkpoint_dir hashes the rest: run_identity).
LAYOUT_KEYS = ("layout", "devices", "device_memory", "mesh", "workers", "device",
               "gpu_memory", "require_gpu", "logical_gpus", "tf32", "steps_per_execution")


def _prefix(directory: str, step: int) -> str:
  return os.path.join(directory, f"{_NAME}-{step}")


def save(directory: str, step: int, objects: Dict[str, object], meta: dict) -> str:
  """Writes ``tf.train.Checkpoint(**objects)`` as ``ckpt-<step>`` with ``meta`` (JSON),
  commits it, keeps the last two; returns its prefix."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.io.gfile.makedirs(directory)
  prefix = _prefix(directory, step)
  tf.train.Checkpoint(**objects).write(prefix)
  _write_atomic(prefix + ".json", json.dumps(dict(meta, step=step)))
  kept = [s for s in steps(directory) if s != step][-(_KEEP - 1):] + [step]
  # TensorFlow's CheckpointState (checkpoint_state.proto, text format), as
  # checkpoint_management.update_checkpoint_state_internal writes it, with relative paths.
  names = [os.path.basename(_prefix(directory, s)) for s in kept]
  _write_atomic(os.path.join(directory, _STATE),
                f'model_checkpoint_path: "{names[-1]}"\n'
                + "".join(f'all_model_checkpoint_paths: "{n}"\n' for n in names))
  _remove_all_but(directory, kept)
  return prefix


def steps(directory: str) -> List[int]:
  """The committed checkpoints' steps, oldest first (none: [])."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  state = tf.train.get_checkpoint_state(directory) if tf.io.gfile.isdir(directory) else None
  if state is None:
    return []
  found = [_STEP.match(os.path.basename(p)) for p in state.all_model_checkpoint_paths]
  return sorted(int(m.group(1)) for m in found if m)


def latest(directory: str) -> Optional[str]:
  """The prefix of the last committed checkpoint, else None."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not tf.io.gfile.isdir(directory):
    return None
  return tf.train.latest_checkpoint(directory)


def read_meta(prefix: str) -> dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(prefix + ".json") as f:
    return json.load(f)


def restore(prefix: str, objects: Dict[str, object]) -> dict:
  """Reads ``prefix`` into ``objects`` (built: every variable exists); returns its meta.

  Strict: every variable of ``objects`` (each model and optimizer variable) must have a
  value of its shape in the checkpoint; values the checkpoint holds for objects this
  run does not have (a compiled model's metrics) are left. Raises
  CheckpointMismatchError naming the checkpoint, the layout that wrote it, what does
  not fit, and the directory to remove to start afresh.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  meta = read_meta(prefix)
  status = None
  try:
    status = tf.train.Checkpoint(**objects).read(prefix)
    status.assert_existing_objects_matched()
  except (AssertionError, ValueError) as e:
    raise CheckpointMismatchError(
        f"checkpoint {prefix} (saved by layout {meta.get('layout', '?')}) does not fit "
        f"this run's {' and '.join(objects)}: {str(e)[:500]}. Remove "
        f"{os.path.dirname(prefix)} to train from step 0") from e
  finally:
    if status is not None:
      status.expect_partial()
  return meta


def legacy(directory: str) -> List[str]:
  """Checkpoints in the .npz format written before tf.train.Checkpoint (not resumed)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not tf.io.gfile.isdir(directory):
    return []
  return sorted(tf.io.gfile.glob(os.path.join(directory, f"{_NAME}-*.npz")))


def run_identity(config: dict) -> str:
  """The config as JSON without its LAYOUT_KEYS: what names a run's checkpoints."""
  return json.dumps({k: v for k, v in config.items() if k not in LAYOUT_KEYS},
                    sort_keys=True)


def clear(directory: str):
  """Deletes a finished run's checkpoints (the executor, once training succeeded): a
  later run of the same inputs and config, on any layout, trains from step 0."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if tf.io.gfile.isdir(directory):
    _remove_all_but(directory, [])
    try:
      tf.io.gfile.remove(os.path.join(directory, _STATE))
    except tf.errors.NotFoundError:
      pass


def _write_atomic(path: str, text: str):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
  with tf.io.gfile.GFile(tmp, "w") as f:
    f.write(text)
  tf.io.gfile.rename(tmp, path, overwrite=True)


def _remove_all_but(directory: str, kept: List[int]):
  """Deletes the files of every other checkpoint: pruned ones, and torn ones that a
  killed process left uncommitted (``ckpt-16.data-*``, ``ckpt-16_temp/``, a
  ``ckpt-16.json.tmp-*``)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for name in tf.io.gfile.listdir(directory):
    m = _STEP.match(name.rstrip("/"))
    if not m or (int(m.group(1)) in kept and ".tmp-" not in name):
      continue
    path = os.path.join(directory, name.rstrip("/"))
    try:
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)
    except tf.errors.NotFoundError:
      pass


class Lock:
  """Exclusive hold on a local checkpoint directory for one training job.

  Two runs of the same inputs + config (e.g. the same pipeline started twice) would
  otherwise resume from and prune each other's live checkpoints. The second fails
  fast, naming the directory. Remote filesystems (gs://, s3://) have no flock; there
  the orchestrator is trusted to run one job per directory.
  """

  def __init__(self, directory: str):
    self.directory = directory
    self._file = None

  def __enter__(self):
    if "://" in self.directory:
      return self
    import fcntl  # Optional: POSIX only; remote directories need no lock.  # pylint: disable=g-import-not-at-top
    os.makedirs(self.directory, exist_ok=True)
    self._file = open(os.path.join(self.directory, ".lock"), "w")
    try:
      fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      self._file.close()
      raise RuntimeError(
          f"Checkpoint directory {self.directory} is in use by another training run "
          f"of the same inputs and config; wait for it to finish (or cancel it) and rerun.")
    return self

  def __exit__(self, *exc):
    if self._file:
      self._file.close()
