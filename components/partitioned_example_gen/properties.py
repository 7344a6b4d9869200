"""The Examples artifact's properties: split names, payload format, custom properties."""
import json
from typing import List, Optional, Sequence

from absl import logging
from tfx import types
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen import split_stats
from tfx_parallel.components.partitioned_example_gen.write import IngestSummary

FILE_FORMAT = "tfrecords_gzip"


def every_feature(numeric_keys: Sequence[str], string_keys: Sequence[str],
                  column_types: Optional[str] = None) -> List[str]:
  """The FEATURE_KEYS property: every feature the trainer uses, numeric and string, in
  header order (``column_types`` is JSON in header order), label excluded."""
  order = list(json.loads(column_types)) if column_types else []
  rank = {name: i for i, name in enumerate(order)}
  return sorted(dict.fromkeys([*numeric_keys, *string_keys]),
                key=lambda name: rank.get(name, len(order)))


def record_output(examples: types.Artifact, *, split_names: Sequence[str], num_shards: int,
                  source: str, feature_keys: Sequence[str], label_key: str,
                  summary: IngestSummary, true_weights: Optional[Sequence[float]] = None,
                  true_bias: Optional[float] = None,
                  string_feature_keys: Sequence[str] = (),
                  column_types: Optional[str] = None,
                  type_inference: Optional[str] = None,
                  input_columns: Optional[dict] = None,
                  eval_split_warnings: Sequence[str] = ()) -> None:
  """Sets split_names, payload and file format, and the custom properties of keys.py.

  ``column_types`` and ``type_inference`` are the JSON of inference.to_property and
  inference.inference_property (CSV sources only); ``input_columns``:
  column_choice.Choice.record(); ``eval_split_warnings``: split_stats.assess.
  """
  examples.split_names = artifact_utils.encode_split_names(list(split_names))
  examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
  examples_utils.set_file_format(examples, FILE_FORMAT)
  examples.set_int_custom_property(keys.NUM_SHARDS, num_shards)
  examples.set_string_custom_property(keys.ROW_COUNTS,
                                      json.dumps(summary.row_counts, sort_keys=True))
  for split in split_names:
    examples.set_int_custom_property(keys.ROW_COUNT_PREFIX + split, summary.row_counts[split])
  examples.set_int_custom_property(keys.SKIPPED_ROWS, summary.skipped_rows)
  examples.set_string_custom_property(
      keys.FEATURE_KEYS, json.dumps(every_feature(feature_keys, string_feature_keys,
                                                  column_types)))
  examples.set_string_custom_property(keys.STRING_FEATURE_KEYS,
                                      json.dumps(list(string_feature_keys)))
  examples.set_string_custom_property(keys.LABEL_KEY, label_key)
  examples.set_string_custom_property(keys.SOURCE, source)
  if true_weights is not None:
    examples.set_string_custom_property(keys.TRUE_WEIGHTS,
                                        json.dumps([float(w) for w in true_weights]))
  if true_bias is not None:
    # As text: ML Metadata keeps 6 decimals of a double (a bias of 3e-7 would read 0).
    examples.set_string_custom_property(keys.TRUE_BIAS, repr(float(true_bias)))
  if column_types is not None:
    examples.set_string_custom_property(keys.COLUMN_TYPES, column_types)
  if type_inference is not None:
    examples.set_string_custom_property(keys.TYPE_INFERENCE, type_inference)
  if input_columns is not None:
    examples.set_string_custom_property(keys.INPUT_COLUMNS,
                                        json.dumps(input_columns, sort_keys=True))
  stats = summary.split_stats or {}
  examples.set_float_custom_property(keys.DUPLICATE_SHARE, split_stats.duplicate_share(stats))
  examples.set_string_custom_property(keys.DISTINCT_ROWS, json.dumps(
      {"all": stats.get("distinct_rows", 0),
       **{n: s["distinct_rows"] for n, s in sorted(stats.get("splits", {}).items())}}))
  examples.set_string_custom_property(keys.EVAL_SPLIT_WARNINGS,
                                      json.dumps(list(eval_split_warnings)))
  logging.info("PartitionedExampleGen: wrote %d rows %s (%d bad rows skipped), %d shards "
               "per split, to %s", summary.total_rows, summary.row_counts,
               summary.skipped_rows, num_shards, examples.uri)
