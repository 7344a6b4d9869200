"""PartitionedExampleGen: rows (synthetic, CSV glob or the taxi CSV) -> sharded Examples."""
import dataclasses
from typing import Optional

from tfx import types
from tfx.components.example_gen import utils
from tfx.dsl.components.base import base_beam_component
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen import driver
from tfx_parallel.components.partitioned_example_gen import executor
from tfx_parallel.components.partitioned_example_gen import output_splits
from tfx_parallel.components.partitioned_example_gen import rows
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.components.partitioned_example_gen.config import SYNTHETIC


class PartitionedExampleGenSpec(types.ComponentSpec):
  """One JSON config, optional stock ExampleGen protos; one standard Examples artifact."""
  PARAMETERS = {
      keys.CONFIG_KEY: ExecutionParameter(type=str),
      keys.ENCODING_VERSION_KEY: ExecutionParameter(type=int),
      specs.INPUT_BASE_KEY: ExecutionParameter(type=str, optional=True),
      specs.INPUT_CONFIG_KEY: ExecutionParameter(type=example_gen_pb2.Input, optional=True),
      specs.OUTPUT_CONFIG_KEY: ExecutionParameter(type=example_gen_pb2.Output, optional=True),
      specs.RANGE_CONFIG_KEY: ExecutionParameter(type=range_config_pb2.RangeConfig,
                                                 optional=True),
  }
  INPUTS = {}
  OUTPUTS = {keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples)}


class PartitionedExampleGen(base_beam_component.BaseBeamComponent):
  """Writes ``Split-<name>/data_tfrecord-*-of-<num_shards>.gz`` for every split.

  The artifact is a standard ``Examples`` (stock StatisticsGen, SchemaGen, Transform and
  Evaluator read it) with the custom properties listed in components/common/keys.py.
  Beam args are passed with ``.with_beam_pipeline_args([...])``.

  Its driver is stock FileBasedExampleGen's (see driver.py): before the cache lookup it
  resolves ``{SPAN}`` / ``{VERSION}`` and fingerprints the matched files, so changed
  input is a new execution, and it records ``span``, ``version`` and
  ``input_fingerprint`` on the artifact. The ``encoding_version`` execution property
  (rows.ENCODING_VERSION) keeps a cache from serving an artifact an older encoding wrote.
  """
  SPEC_CLASS = PartitionedExampleGenSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)
  DRIVER_CLASS = driver.Driver

  def __init__(self, config: Optional[ExampleGenConfig] = None, *,
               input_base: Optional[str] = None,
               input_config: Optional[example_gen_pb2.Input] = None,
               output_config: Optional[example_gen_pb2.Output] = None,
               range_config: Optional[range_config_pb2.RangeConfig] = None):
    """Validates everything (ConfigError names the bad key) before the pipeline exists.

    Args:
      config: where the rows come from and how they are sharded (default: synthetic).
      input_base: as stock ExampleGen's: the directory ``input_config`` patterns are
        relative to. Sets ``config.source`` (which must then be left unset or equal).
      input_config: stock ``example_gen_pb2.Input`` with one split; its pattern may hold
        ``{SPAN}`` / ``{VERSION}``. Without it, ``config.source`` is the glob (it may
        hold them too).
      output_config: stock ``example_gen_pb2.Output``: ``split_config`` with
        ``hash_buckets`` per split and optionally ``partition_feature_name``. Splits
        then match stock CsvExampleGen's on the same file (whole-example hash, or the
        feature's). Without it, ``config.split_ratios`` and ``config.split_key`` are
        the shorthand; with no split_key a CSV is split by row position, seeded
        (partition.row_ids), which stock ExampleGen does not have.
      range_config: stock ``RangeConfig`` (a static span, or the latest span).
    """
    config = config if config is not None else ExampleGenConfig()
    if not isinstance(config, ExampleGenConfig):
      raise TypeError(f"config must be an ExampleGenConfig. Received: {type(config).__name__}")
    if input_base is not None:
      config_util.require(config.source in (SYNTHETIC, input_base), "input_base",
                          f"sets the source; config.source must be unset or the same. "
                          f"Received: input_base={input_base!r}, "
                          f"config.source={config.source!r}")
      config = dataclasses.replace(config, source=input_base)
      if input_config is None:  # Stock ExampleGen's default: every file under input_base.
        input_config = utils.make_default_input_config()
    config.validate()
    output_splits.validate_protos(config, input_config, output_config, range_config,
                                  input_base_given=input_base is not None)
    spec = PartitionedExampleGenSpec(
        **{keys.CONFIG_KEY: config_util.to_json(config),
           keys.ENCODING_VERSION_KEY: rows.ENCODING_VERSION,
           specs.INPUT_BASE_KEY: input_base,
           specs.INPUT_CONFIG_KEY: input_config,
           specs.OUTPUT_CONFIG_KEY: output_config,
           specs.RANGE_CONFIG_KEY: range_config,
           keys.EXAMPLES_KEY: types.Channel(type=standard_artifacts.Examples)})
    super().__init__(spec=spec)
