"""Output splits: stock ``example_gen_pb2.Output`` semantics, and the ratio shorthand.

Stock ExampleGen (``base_example_gen_executor._PartitionFn``) puts a record in split
``bisect(cumulative hash_buckets, sha256(key) mod total buckets)``, with the splits in the
order ``split_config`` lists them, where the key is the record's deterministic
serialization, or, with ``partition_feature_name``, that feature's. PartitionedExampleGen
does the same (partition.py, stock_key.py), so one config gives the same splits here and
in stock CsvExampleGen.

``ExampleGenConfig.split_ratios`` / ``split_key`` are a shorthand: ``{"train": 4,
"eval": 1}`` is ``split_config`` with the splits in sorted name order (``eval`` 1 bucket,
``train`` 4) and ``split_key`` is ``partition_feature_name``. Without a split_key the
shorthand splits a CSV by row position (partition.row_ids: each copy of a duplicate row
on its own), not by stock's whole-example hash; a stock output_config keeps stock's.
"""
from typing import Optional

from tfx.components.example_gen import utils
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2
from tfx.utils import proto_utils

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.common.config_util import require
from tfx_parallel.components.partitioned_example_gen import config as config_lib
from tfx_parallel.components.partitioned_example_gen.partition import OutputSplits
from tfx_parallel.components.partitioned_example_gen.partition import shorthand_splits

_DEFAULT_RATIOS = config_lib.ExampleGenConfig().split_ratios


def shorthand_output(config: config_lib.ExampleGenConfig) -> example_gen_pb2.Output:
  """The stock Output of the ratio shorthand's buckets and split_key (see the module
  docstring: without a split_key the shorthand's row split has no stock equivalent)."""
  split_config = example_gen_pb2.SplitConfig(splits=[
      example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=config.split_ratios[name])
      for name in sorted(config.split_ratios)])
  if config.split_key:
    split_config.partition_feature_name = config.split_key
  return example_gen_pb2.Output(split_config=split_config)


def from_output(output: example_gen_pb2.Output) -> OutputSplits:
  split_config = output.split_config
  return OutputSplits(names=tuple(s.name for s in split_config.splits),
                      buckets=tuple(int(s.hash_buckets) for s in split_config.splits),
                      partition_feature=split_config.partition_feature_name or None)


def resolve(config: config_lib.ExampleGenConfig,
            output_config_json: Optional[str] = None) -> OutputSplits:
  """The splits of one execution: ``output_config`` if given, else the shorthand."""
  if output_config_json:
    output = proto_utils.json_to_proto(output_config_json, example_gen_pb2.Output())
    if output.HasField("split_config"):
      return from_output(output)
  return shorthand_splits(config.split_ratios, config.split_key)


def _check_output(config: config_lib.ExampleGenConfig, output: example_gen_pb2.Output):
  key = "output_config"
  require(output.output_data_format in (example_gen_pb2.FORMAT_TF_EXAMPLE,
                                        example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE),
          f"{key}.output_data_format", "only FORMAT_TF_EXAMPLE is written. Received: "
          f"{example_gen_pb2.PayloadFormat.Name(output.output_data_format)}")
  require(output.output_file_format in (example_gen_pb2.FileFormat.FORMAT_TFRECORDS_GZIP,
                                        example_gen_pb2.FileFormat.FILE_FORMAT_UNSPECIFIED),
          f"{key}.output_file_format", "only gzip TFRecords are written. Received: "
          f"{example_gen_pb2.FileFormat.Name(output.output_file_format)}")
  if not output.HasField("split_config"):
    return
  splits = output.split_config.splits
  require(len(splits) > 0, f"{key}.split_config", "must name at least one split")
  names = [s.name for s in splits]
  require(len(set(names)) == len(names), f"{key}.split_config",
          f"split names must be unique. Received: {names}")
  for s in splits:
    require(bool(s.name) and s.name.replace("_", "").replace("-", "").isalnum(),
            f"{key}.split_config.splits", f"split names must be alphanumeric. "
            f"Received: {s.name!r}")
    require(s.hash_buckets > 0, f"{key}.split_config.splits.{s.name}.hash_buckets",
            f"must be positive. Received: {s.hash_buckets}")
  require(config.split_ratios == _DEFAULT_RATIOS, key,
          "gives the splits; leave config.split_ratios unset (it is the shorthand for "
          f"output_config). Received: split_ratios={config.split_ratios}")
  require(config.split_key is None, key,
          "gives the partition feature; leave config.split_key unset (it is the shorthand "
          f"for partition_feature_name). Received: split_key={config.split_key!r}")
  if output.split_config.partition_feature_name:
    require(not config.is_synthetic, f"{key}.split_config.partition_feature_name",
            "synthetic rows are split by row index. Received: "
            f"{output.split_config.partition_feature_name!r}")


def validate_protos(config: config_lib.ExampleGenConfig,
                    input_config: Optional[example_gen_pb2.Input],
                    output_config: Optional[example_gen_pb2.Output],
                    range_config: Optional[range_config_pb2.RangeConfig],
                    input_base_given: bool = False) -> None:
  """ConfigError naming the key for stock protos this component cannot honour."""
  if input_config is not None:
    require(not config.is_synthetic, "input_config",
            "needs input_base (or a CSV config.source); the synthetic source has no files")
    require(input_base_given or config.source != config_lib.TAXI, "input_config",
            "needs input_base, the directory its patterns are relative to")
    require(len(input_config.splits) == 1, "input_config.splits",
            "exactly one input split (its files are split by output_config); pre-split "
            "input is not supported. Received: "
            f"{[s.name for s in input_config.splits]}")
    patterns = input_config.splits
  else:
    patterns = [example_gen_pb2.Input.Split(name="single_split", pattern=config.source)]
  specs_present = False
  for split in patterns:
    try:
      span, date, _ = utils.verify_split_pattern_specs(split)
    except ValueError as e:
      raise ConfigError("input_config" if input_config is not None else "source",
                        f"{e}. Received: {split.pattern!r}") from None
    specs_present = specs_present or span or date
  if range_config is not None:
    require(not config.is_synthetic, "range_config", "the synthetic source has no spans")
    require(bool(specs_present), "range_config",
            "needs {SPAN} (or {YYYY}/{MM}/{DD}) in the input pattern")
    require(range_config.HasField("static_range") or range_config.HasField("rolling_range"),
            "range_config", "must be a static_range or a rolling_range")
  if output_config is not None:
    _check_output(config, output_config)
