"""What the trainer reads from its inputs: splits, files, features, their types and the label.

Any Examples artifact works, not only PartitionedExampleGen's. Its custom properties
(``feature_keys``, ``string_feature_keys``, ``label_key``, ``row_counts``, ``num_shards``)
are hints, used when present:

* **files**: listed with TFX's split helper (``examples_utils.get_split_file_patterns``)
  for the splits named in config ``train_split`` / ``eval_split``; the payload must be
  tf.Example and the file format gzip TFRecords (the artifact's ``payload_format`` /
  ``file_format`` properties, read as stock TFX reads them);
* **label**: config ``label_key``, else the ``label_key`` property; neither is an error
  naming the config key;
* **features and types**: with a ``schema`` input (SchemaGen / ImportSchemaGen) every
  schema feature but the label, FLOAT -> float32, INT -> int64, BYTES -> string, string
  domains as vocabularies; else the ``feature_keys`` hints; else the list kind of each
  feature in the first examples of the train split (float_list -> float32, int64_list
  -> int64, bytes_list -> string). The data's kinds are checked against the schema before
  training: a disagreement is a :class:`InputError` naming the feature. The schema is
  read, not just accepted (missing.py): a feature the schema promises in every example
  (``presence.min_fraction`` 1 and a ``shape``) is required (an example without it
  fails before training), any other is optional (filled); a feature the schema gives
  more than one value per example (``shape``, ``value_count``) is rejected here, naming
  it and the way out;
* **rows**: the ``row_counts`` hint, else counted by the trainer's one scan (stats.py);
* **missing-value tokens**: the ``na_values`` PartitionedExampleGen read as missing (its
  ``type_inference`` property), used for string features unless config ``na_values``
  is set; None (stock ExampleGens): pandas' default set (columns.py).

With a ``transform_graph`` input (TFX Transform) the Examples are the transformed ones
and the features are the graph's ``transformed_feature_spec()`` (dense scalars); a graph
whose outputs lack the label is an InputError naming it. The exported serving signature
then runs the graph's ``transform_features_layer()`` on raw serialized tf.Examples
(export.py), as TFX's own Keras examples do.
"""
import dataclasses
import json
import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from tfx_parallel.components.common import custom_properties
from tfx_parallel.components.common import keys
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.common.splits import artifact_split_files
from tfx_parallel.components.distributed_trainer.inputs import missing
from tfx_parallel.components.distributed_trainer import model_spec as ms

KIND_DTYPE = {"float_list": ms.FLOAT32, "int64_list": ms.INT64, "bytes_list": ms.STRING}
SCHEMA_FILE = "schema.pbtxt"
KIND_SAMPLE = 100  # Examples of the train split whose feature kinds are read.


class InputError(ValueError):
  """The inputs cannot be trained on; the message names the feature, split or file."""


@dataclasses.dataclass(frozen=True)
class InputDescription:
  """The trainer's view of its inputs (see the module docstring)."""
  files: Mapping[str, Tuple[str, ...]]           # split -> files, sorted
  train_split: str
  eval_split: str
  label_key: str
  numeric: Tuple[Tuple[str, str], ...]           # (name, "float32" | "int64")
  string_keys: Tuple[str, ...]
  rows: Optional[Mapping[str, int]] = None       # from the row_counts hint
  num_shards: int = 0                            # files per split hint (0: unknown)
  vocabularies: Mapping[str, Tuple[str, ...]] = dataclasses.field(default_factory=dict)
  source: str = "data"  # "transform graph" | "schema" | "custom properties" | "data"
  required: Tuple[str, ...] = ()  # the schema requires them (presence 1 + shape); else none
  na_values: Optional[Tuple[str, ...]] = None  # PartitionedExampleGen's; None: not recorded

  @property
  def feature_keys(self) -> List[str]:
    return [name for name, _ in self.numeric]

  @property
  def dtypes(self) -> Dict[str, str]:
    return dict(self.numeric)


# ------------------------------------------------------------------------- files


def split_files(examples, split: str, config_key: str) -> Tuple[str, ...]:
  """The files of ``split`` of an Examples artifact, via TFX's split helpers."""
  try:
    return artifact_split_files(examples, split, config_key)
  except FileNotFoundError as e:
    raise InputError(str(e)) from None


def check_format(examples) -> None:
  """Raises InputError unless the payload is tf.Example in gzip TFRecords."""
  from tfx.components.util import examples_utils  # pylint: disable=g-import-not-at-top
  from tfx.proto import example_gen_pb2  # pylint: disable=g-import-not-at-top
  payload = examples_utils.get_payload_format(examples)
  if payload != example_gen_pb2.FORMAT_TF_EXAMPLE:
    raise InputError(f"Examples artifact at {examples.uri} holds "
                     f"{examples_utils.get_payload_format_string(examples)}; the trainer "
                     f"reads FORMAT_TF_EXAMPLE")
  file_format = examples_utils.get_file_format(examples)
  if file_format != "tfrecords_gzip":
    raise InputError(f"Examples artifact at {examples.uri} has file_format "
                     f"{file_format!r}; the trainer reads 'tfrecords_gzip'")


# ------------------------------------------------------------------------- data kinds


def example_kinds(files: Sequence[str], limit: int = KIND_SAMPLE) -> Dict[str, str]:
  """{feature: "float32" | "int64" | "string"} over the first ``limit`` examples.

  A feature whose list kind changes between examples is an InputError naming it. A
  feature that is present but empty everywhere (all values missing) is left out.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  kinds: Dict[str, str] = {}
  seen = 0
  for path in files:
    for record in tf.data.TFRecordDataset(path, compression_type="GZIP").take(limit - seen):
      seen += 1
      for name, feature in tf.train.Example.FromString(record.numpy()).features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind is None:
          continue
        dtype = KIND_DTYPE[kind]
        if kinds.setdefault(name, dtype) != dtype:
          raise InputError(f"feature {name!r} is {kinds[name]} in one example and {dtype} "
                           f"in another of {path}")
    if seen >= limit:
      break
  if not seen:
    raise InputError(f"no examples in {list(files)[:3]}")
  return kinds


# ------------------------------------------------------------------------- schema


@dataclasses.dataclass(frozen=True)
class SchemaFeature:
  name: str
  dtype: str                                   # "float32" | "int64" | "string"
  vocabulary: Optional[Tuple[str, ...]] = None  # a string domain's values
  required: bool = False      # presence.min_fraction 1 and a shape: in every example
  multi_valued: bool = False  # shape or value_count allow more than one value


def _presence_and_values(f) -> Tuple[bool, bool]:
  """(required, multi_valued) of a tensorflow_metadata Feature.

  Required: the schema promises a value in every example -- ``presence.min_fraction``
  1 and a ``shape`` (or ``value_count.min`` >= 1). This is how TF Transform's
  ``schema_as_feature_spec`` reads it (a FixedLenFeature without default only for shape
  + min_fraction 1: tensorflow_transform/tf_metadata/schema_utils_test_cases.py cases
  'fixed_len_vector', 'var_len', 'feature_has_shape_but_not_always_present'). Stock
  SchemaGen writes presence 1 without a shape for a CSV column with empty cells (an
  empty list counts as present): optional. Multi-valued: a shape of more than one
  element, a ``value_count`` whose max is unset (unbounded) or above 1, or
  ``value_counts`` (nested lists)."""
  always = f.HasField("presence") and f.presence.min_fraction >= 1.0
  multi = False
  one_or_more = False
  if f.HasField("shape"):
    size = 1
    for d in f.shape.dim:
      size *= d.size
    multi = size != 1
    one_or_more = True
  elif f.HasField("value_count"):
    count = f.value_count
    multi = not count.HasField("max") or count.max > 1 or count.min > 1
    one_or_more = count.min >= 1
  elif f.HasField("value_counts"):
    multi = True
  return always and one_or_more and not multi, multi


def read_schema(schema_uri: str) -> Dict[str, SchemaFeature]:
  """The features of ``<schema_uri>/schema.pbtxt`` (tensorflow_metadata Schema)."""
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  from tfx.utils import io_utils  # pylint: disable=g-import-not-at-top
  path = os.path.join(schema_uri, SCHEMA_FILE)
  schema = io_utils.SchemaReader().read(path)
  types = {schema_pb2.FLOAT: ms.FLOAT32, schema_pb2.INT: ms.INT64, schema_pb2.BYTES: ms.STRING}
  domains = {d.name: tuple(d.value) for d in schema.string_domain}
  out = {}
  for f in schema.feature:
    if f.type not in types:
      raise InputError(f"schema {path}: feature {f.name!r} has type "
                       f"{schema_pb2.FeatureType.Name(f.type)}; the trainer reads FLOAT, "
                       f"INT and BYTES")
    vocab = None
    if f.HasField("string_domain"):
      vocab = tuple(f.string_domain.value)
    elif f.HasField("domain") and f.domain in domains:
      vocab = domains[f.domain]
    required, multi = _presence_and_values(f)
    out[f.name] = SchemaFeature(f.name, types[f.type], vocab, required, multi)
  return out


def check_against_schema(schema: Mapping[str, SchemaFeature], kinds: Mapping[str, str],
                         label_key: str, where: str) -> None:
  """Raises InputError naming the feature: the label missing from the schema, or a
  feature whose kind in the data (``kinds``) disagrees with its schema type."""
  if label_key not in schema:
    raise InputError(f"the schema lacks the label {label_key!r} (config label_key); its "
                     f"features are {sorted(schema)}")
  for name, feature in schema.items():
    if name in kinds and kinds[name] != feature.dtype:
      raise InputError(f"feature {name!r} is {feature.dtype} in the schema but "
                       f"{kinds[name]} in the data ({where})")


# ------------------------------------------------------------------------- transform graph


def transform_features(transform_graph_uri: str, label_key: str) -> Dict[str, str]:
  """{transformed feature: dtype} of a TFX Transform graph; the label must be one of
  them (the preprocessing_fn passes it through), and every feature a dense scalar."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_transform as tft  # pylint: disable=g-import-not-at-top
  spec = tft.TFTransformOutput(transform_graph_uri).transformed_feature_spec()
  if label_key not in spec:
    raise InputError(f"the transform graph at {transform_graph_uri} is missing the label "
                     f"{label_key!r} (config label_key): its preprocessing_fn must output it; "
                     f"it outputs {sorted(spec)}")
  dtypes = {tf.float32: ms.FLOAT32, tf.int64: ms.INT64, tf.string: ms.STRING}
  out = {}
  for name, feature in sorted(spec.items()):
    shape = list(getattr(feature, "shape", [None]))
    if (not isinstance(feature, tf.io.FixedLenFeature) or shape not in ([], [1])
        or feature.dtype not in dtypes):
      raise InputError(f"transformed feature {name!r} of {transform_graph_uri} is "
                       f"{feature!r}; the trainer reads dense scalars (FixedLenFeature of "
                       f"shape [] or [1], float32, int64 or string)")
    out[name] = dtypes[feature.dtype]
  return out


# ------------------------------------------------------------------------- all together


def _hint(examples, name: str):
  """The Examples' custom property as set (0 and "" too, on Kubeflow as locally)."""
  return custom_properties.value(examples, name)


def describe(examples, train_split: str = "train", eval_split: str = "eval",
             label_key: Optional[str] = None, schema_uri: Optional[str] = None,
             transform_graph_uri: Optional[str] = None) -> InputDescription:
  """The trainer's InputDescription of ``examples`` (and the schema at ``schema_uri``).

  With ``transform_graph_uri`` the examples are Transform's transformed examples and the
  features are the graph's transformed features (the schema describes the raw data and
  is not used for them)."""
  check_format(examples)
  files = {split: split_files(examples, split, key)
           for split, key in ((train_split, "train_split"), (eval_split, "eval_split"))}
  label = label_key or _hint(examples, keys.LABEL_KEY)
  if not label:
    raise ConfigError("label_key", f"not set, and the Examples artifact at {examples.uri} "
                      f"has no {keys.LABEL_KEY!r} property to take it from. Received: "
                      f"{label_key!r}")
  row_counts = _hint(examples, keys.ROW_COUNTS)
  rows = None
  if row_counts:
    counts = json.loads(row_counts)
    if train_split in counts:
      rows = {k: int(v) for k, v in counts.items()}
  num_shards = int(_hint(examples, keys.NUM_SHARDS) or 0)
  kinds = example_kinds(files[train_split])
  inference = json.loads(_hint(examples, keys.TYPE_INFERENCE) or "{}")
  na_values = inference.get("na_values") if isinstance(inference, dict) else None
  common = dict(files=files, train_split=train_split, eval_split=eval_split, label_key=label,
                rows=rows, num_shards=num_shards,
                na_values=None if na_values is None else tuple(na_values))
  if transform_graph_uri is not None:
    transformed = transform_features(transform_graph_uri, label)
    numeric = tuple((n, d) for n, d in transformed.items() if n != label and d != ms.STRING)
    strings = tuple(n for n, d in transformed.items() if n != label and d == ms.STRING)
    return InputDescription(numeric=numeric, string_keys=strings, source="transform graph",
                            **common)
  if schema_uri is not None:
    schema = read_schema(schema_uri)
    check_against_schema(schema, kinds, label, f"split {train_split!r}, "
                         f"{files[train_split][0]}")
    multi = [f.name for f in schema.values() if f.multi_valued and f.name != label]
    if multi:
      raise missing.MultiValuedError(missing.multi_valued_message(
          multi, f"schema {os.path.join(schema_uri, SCHEMA_FILE)}"))
    numeric = tuple((f.name, f.dtype) for f in schema.values()
                    if f.name != label and f.dtype != ms.STRING)
    strings = tuple(f.name for f in schema.values() if f.name != label and f.dtype == ms.STRING)
    vocabularies = {f.name: f.vocabulary for f in schema.values()
                    if f.name in strings and f.vocabulary is not None}
    return InputDescription(numeric=numeric, string_keys=strings, vocabularies=vocabularies,
                            source="schema", required=tuple(
                                f.name for f in schema.values()
                                if f.required and f.name != label), **common)
  hinted = _hint(examples, keys.FEATURE_KEYS)
  if hinted is not None:
    names = json.loads(hinted)
    strings = tuple(json.loads(_hint(examples, keys.STRING_FEATURE_KEYS) or "[]"))
    numeric = tuple((n, kinds[n] if kinds.get(n) in (ms.FLOAT32, ms.INT64) else ms.FLOAT32)
                    for n in names if n not in strings)  # feature_keys lists both kinds.
    return InputDescription(numeric=numeric, string_keys=strings,
                            source="custom properties", **common)
  if label not in kinds:
    raise InputError(f"label {label!r} (config label_key) is not a feature of the first "
                     f"examples of split {train_split!r} ({files[train_split][0]}); "
                     f"features: {sorted(kinds)}")
  numeric = tuple((n, d) for n, d in sorted(kinds.items()) if n != label and d != ms.STRING)
  strings = tuple(n for n, d in sorted(kinds.items()) if n != label and d == ms.STRING)
  return InputDescription(numeric=numeric, string_keys=strings, source="data", **common)
