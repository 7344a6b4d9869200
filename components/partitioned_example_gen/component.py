"""PartitionedExampleGen: rows (synthetic, CSV glob or the taxi CSV) -> sharded Examples."""
from tfx import types
from tfx.dsl.components.base import base_beam_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen import executor
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig


class PartitionedExampleGenSpec(types.ComponentSpec):
  """One JSON config in, one standard Examples artifact out."""
  PARAMETERS = {keys.CONFIG_KEY: ExecutionParameter(type=str)}
  INPUTS = {}
  OUTPUTS = {keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples)}


class PartitionedExampleGen(base_beam_component.BaseBeamComponent):
  """Writes ``Split-<name>/data_tfrecord-*-of-<num_shards>.gz`` for every split.

  The artifact is a standard ``Examples`` (stock StatisticsGen, SchemaGen, Transform and
  Evaluator read it) with the custom properties listed in components/common/keys.py.
  Beam args are passed with ``.with_beam_pipeline_args([...])``.
  """
  SPEC_CLASS = PartitionedExampleGenSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self, config: ExampleGenConfig):
    """Validates ``config`` (ConfigError names the bad key) and stores it as JSON."""
    if not isinstance(config, ExampleGenConfig):
      raise TypeError(f"config must be an ExampleGenConfig. Received: {type(config).__name__}")
    config.validate()
    spec = PartitionedExampleGenSpec(
        **{keys.CONFIG_KEY: config_util.to_json(config),
           keys.EXAMPLES_KEY: types.Channel(type=standard_artifacts.Examples)})
    super().__init__(spec=spec)
