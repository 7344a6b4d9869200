"""Reading an Examples artifact's split files (gzip TFRecords under Split-<name>/)."""
import os
from typing import List

import tensorflow as tf


def split_files(examples_uri: str, split: str) -> List[str]:
  """The split's TFRecord files, sorted; raises naming the directory if there are none."""
  pattern = os.path.join(examples_uri, f"Split-{split}", "*")
  files = sorted(tf.io.gfile.glob(pattern))
  if not files:
    raise FileNotFoundError(f"no TFRecord files for split {split!r} at {pattern}")
  return files
