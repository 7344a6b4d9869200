"""Checkpoints in TensorFlow's own format (``tf.train.Checkpoint``), readable on any layout.

A checkpoint directory holds what ``tf.train.latest_checkpoint`` and
``tf.train.Checkpoint(model=..., optimizer=...).read(prefix)`` expect::

    checkpoint                          TF's CheckpointState: the committed checkpoints
    ckpt-8.index, ckpt-8.data-*         model and optimizer, keyed by object graph
    ckpt-8.json                         the run state and the layout that wrote it
    .lock                               (Lock)

Any layout resumes any other's: each tensor is saved with its global shape, keyed by the
model's and the optimizer's object graph, not by device. On a mesh the objects are the
mesh's own (mesh_engine.MeshEngine.checkpointed) and each variable is a DVariable, whose
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
from typing import Callable, Dict, List, Optional, Sequence, Tuple

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


def save(directory: str, step: int, objects: Dict[str, object], meta: dict,
         host_blocks: Optional[Callable] = None) -> str:
  """Writes ``tf.train.Checkpoint(**objects)`` as ``ckpt-<step>`` with ``meta`` (JSON),
  commits it, keeps the last two; returns its prefix.

  With ``host_blocks`` (a variable -> [(SaveV2 slice spec, block on the host)]: the
  mesh's ``MeshTrainer.host_blocks``), a save after the directory's first streams the
  blocks a few at a time through host memory (:func:`_write_streamed`); the first is
  TensorFlow's own, and names the keys."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.io.gfile.makedirs(directory)
  prefix = _prefix(directory, step)
  entries = None
  if host_blocks is not None:
    previous = latest(directory)
    entries = _streamable(previous, objects) if previous else None
  if entries is None:
    tf.train.Checkpoint(**objects).write(prefix)
  else:
    _write_streamed(prefix, *entries, host_blocks)
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


_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"  # tensorflow/python/checkpoint/save_util.py
_VALUE = "VARIABLE_VALUE"  # A variable's attribute name (trackable/base.py VARIABLE_VALUE_KEY).
# Small variables go to SaveV2 together, up to this many bytes in host memory at once.
GROUP_BYTES = 16 << 20


def _streamable(previous: str, objects: Dict[str, object]
                ) -> Optional[Tuple[bytes, List[Tuple[str, object]]]]:
  """(the object graph, [(checkpoint key, live variable)]) for writing ``objects`` as
  ``previous`` was written, or None when the live objects differ from it.

  The object graph TensorFlow wrote with ``previous`` (a TrackableObjectGraph proto,
  trackable_object_graph.proto) is walked beside the live objects through the public
  ``tf.train.TrackableView``: each node's children by local name, each node's
  ``VARIABLE_VALUE`` attribute to the variable that holds it. The graph fits when every
  attribute is a variable's value with the saved shape and dtype, no node has slot
  variables (legacy optimizers), and every live variable is reached."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(previous)
  graph_bytes = reader.get_tensor(_GRAPH_KEY)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(graph_bytes)
  shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
  root = tf.train.Checkpoint(**objects)
  view = tf.train.TrackableView(root)
  entries, stack, seen = [], [(0, root)], set()
  while stack:
    node_id, obj = stack.pop()
    if node_id in seen:
      continue
    seen.add(node_id)
    node = graph.nodes[node_id]
    if node.slot_variables:
      return None
    children = view.children(obj)
    for child in node.children:
      if child.local_name not in children:
        return None
      stack.append((child.node_id, children[child.local_name]))
    for attribute in node.attributes:
      key = attribute.checkpoint_key
      if (attribute.name != _VALUE or not isinstance(obj, tf.Variable) or key not in shapes
          or list(shapes[key]) != obj.shape.as_list() or dtypes[key] != obj.dtype):
        return None
      entries.append((key, obj))
  live = {id(obj) for obj in view.descendants() if isinstance(obj, tf.Variable)}
  if {id(v) for _, v in entries} != live or len(entries) != len(live):
    return None
  return graph_bytes, entries


def _write_streamed(prefix: str, graph_bytes: bytes, entries: Sequence[Tuple[str, object]],
                    host_blocks: Callable):
  """Writes a checkpoint TensorFlow's reader cannot tell from ``tf.train.Checkpoint.write``
  of the same objects (same keys, same object graph), a few blocks at a time through
  host memory.

  Each variable's blocks (``host_blocks``) are saved as slices of its global tensor,
  the way DTensor's own save writes a sharded variable, so a later restore onto a mesh
  reads each device's block and a restore on one device reads the whole tensor. As
  functional_saver.py ``MultiDeviceSaver.save`` does: each group (small blocks up to
  GROUP_BYTES, or one bigger block) is a SaveV2 shard under ``<prefix>_temp/part-NNNNN``
  (``<prefix>.part-NNNNN`` on s3://, where TF uses no temporary directory), the object
  graph rides in the last, and MergeV2Checkpoints joins them into ``<prefix>.index`` and
  ``<prefix>.data-*`` and removes the temporary directory. A group is written and dropped
  as soon as the next block would take it over GROUP_BYTES, so the host holds at most
  one group and that next block."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  base = prefix + (".part" if prefix.startswith("s3://") else "_temp/part")
  written = []

  def flush(group):
    shard = f"{base}-{len(written):05d}"
    tf.raw_ops.SaveV2(prefix=shard, tensor_names=[k for k, _, _ in group],
                      shape_and_slices=[spec for _, spec, _ in group],
                      tensors=[block for _, _, block in group])
    written.append(shard)

  with tf.device("/CPU:0"):
    group, size = [], 0
    for key, variable in entries:
      for spec, block in host_blocks(variable):
        nbytes = block.shape.num_elements() * block.dtype.size
        if group and size + nbytes > GROUP_BYTES:
          flush(group)
          group, size = [], 0
        group.append((key, spec, block))
        size += nbytes
    group.append((_GRAPH_KEY, "", tf.constant(graph_bytes)))
    flush(group)
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=written, destination_prefix=prefix,
                                  delete_old_dirs=True)


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
