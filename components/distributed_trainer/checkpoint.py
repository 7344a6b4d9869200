"""Layout-independent checkpoints: gathered numpy parameters + optimizer slots.

Saved as one .npz (no pickle: `allow_pickle=False` on load) written to a temporary
name and renamed, so a process killed mid-write never leaves a torn checkpoint. Any
layout can resume from any other layout's checkpoint.
"""
import io
import json
import os
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
  tmp = final + ".tmp"
  with tf.io.gfile.GFile(tmp, "wb") as f:
    f.write(buf.getvalue())
  tf.io.gfile.rename(tmp, final, overwrite=True)
  for old in sorted(tf.io.gfile.glob(os.path.join(directory, _PREFIX + "*.npz")))[:-_KEEP]:
    tf.io.gfile.remove(old)
  return final


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
