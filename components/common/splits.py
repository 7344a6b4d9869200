"""Reading an Examples artifact's split files (gzip TFRecords under Split-<name>/)."""
import os
from typing import List, Tuple

from tfx_parallel.components.common.config_util import ConfigError

import tensorflow as tf


def split_files(examples_uri: str, split: str) -> List[str]:
  """The split's TFRecord files, sorted; raises naming the directory if there are none."""
  pattern = os.path.join(examples_uri, f"Split-{split}", "*")
  files = sorted(tf.io.gfile.glob(pattern))
  if not files:
    raise FileNotFoundError(f"no TFRecord files for split {split!r} at {pattern}")
  return files


def artifact_split_files(examples, split: str, config_key: str) -> Tuple[str, ...]:
  """The files of ``split`` of any Examples artifact, listed with TFX's split helper
  (``examples_utils.get_split_file_patterns``). A split the artifact does not have is a
  ConfigError naming ``config_key``; a split without files is a FileNotFoundError."""
  from tfx.components.util import examples_utils  # pylint: disable=g-import-not-at-top
  from tfx.types import artifact_utils  # pylint: disable=g-import-not-at-top
  names = artifact_utils.decode_split_names(examples.split_names) if examples.split_names else []
  if names and split not in names:
    raise ConfigError(config_key, f"split {split!r} is not in the Examples artifact at "
                      f"{examples.uri}, whose splits are {names}. Received: {split!r}")
  patterns = examples_utils.get_split_file_patterns([examples], split)
  files = tuple(sorted(f for p in patterns for f in tf.io.gfile.glob(p)))
  if not files:
    raise FileNotFoundError(f"no files for split {split!r} (config {config_key}) at "
                            f"{patterns}")
  return files
