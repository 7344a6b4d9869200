"""Layout-independent checkpoints: gathered numpy parameters + optimizer slots.

Saved as one .npz (no pickle: `allow_pickle=False` on load) written to a temporary
name and renamed, so a process killed mid-write never leaves a torn checkpoint. Any
layout can resume from any other layout's checkpoint.
"""
import io
import json
import os
import uuid
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

_PREFIX = "ckpt-"
_KEEP = 2


def _path(directory: str, step: int) -> str:
  return os.path.join(directory, f"{_PREFIX}{step:010d}.npz")


def save(directory: str, step: int, values: Dict[str, np.ndarray],
         slots: Dict[str, Dict[str, np.ndarray]], meta: dict) -> str:
  tf.io.gfile.makedirs(directory)
  arrays = {f"param/{k}": v for k, v in values.items()}
  for slot, per_param in slots.items():
    arrays.update({f"slot/{slot}/{k}": v for k, v in per_param.items()})
  arrays["meta"] = np.frombuffer(json.dumps(dict(meta, step=step)).encode(), np.uint8)
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  final = _path(directory, step)
  tmp = f"{final}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
  with tf.io.gfile.GFile(tmp, "wb") as f:
    f.write(buf.getvalue())
  tf.io.gfile.rename(tmp, final, overwrite=True)
  for old in sorted(tf.io.gfile.glob(os.path.join(directory, _PREFIX + "*.npz")))[:-_KEEP]:
    try:
      tf.io.gfile.remove(old)
    except tf.errors.NotFoundError:
      pass
  return final


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
    import fcntl  # pylint: disable=g-import-not-at-top
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


def latest(directory: str) -> Optional[str]:
  if not tf.io.gfile.exists(directory):
    return None
  found = sorted(tf.io.gfile.glob(os.path.join(directory, _PREFIX + "*.npz")))
  return found[-1] if found else None


def load(path: str) -> Tuple[int, Dict[str, np.ndarray], Dict[str, Dict[str, np.ndarray]], dict]:
  with tf.io.gfile.GFile(path, "rb") as f:
    data = np.load(io.BytesIO(f.read()), allow_pickle=False)
    meta = json.loads(bytes(data["meta"]).decode())
    values, slots = {}, {}
    for key in data.files:
      parts = key.split("/")
      if parts[0] == "param":
        values[parts[1]] = data[key]
      elif parts[0] == "slot":
        slots.setdefault(parts[1], {})[parts[2]] = data[key]
  return int(meta["step"]), values, slots, meta
