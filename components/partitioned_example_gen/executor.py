"""PartitionedExampleGen executor: decode the config once, plan, run the ingest, record."""
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen import ingest
from tfx_parallel.components.partitioned_example_gen import properties
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig


class Executor(base_beam_executor.BaseBeamExecutor):
  """Writes the configured source as sharded, split gzip TFRecords of tf.train.Example.

  Beam args (``.with_beam_pipeline_args``) reach ``self._make_beam_pipeline()`` unchanged.
  """

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    self._log_startup(input_dict, output_dict, exec_properties)
    config = config_util.from_json(ExampleGenConfig,
                                   exec_properties[keys.CONFIG_KEY]).validate()
    examples = artifact_utils.get_single_instance(output_dict[keys.EXAMPLES_KEY])
    plan = sources.plan_source(config)
    logging.info("PartitionedExampleGen: ingesting %r into %s", plan.source, examples.uri)
    summary = ingest.run(self._make_beam_pipeline(), config, plan, examples.uri)
    synthetic = isinstance(plan, sources.SyntheticSpec)
    properties.record_output(
        examples, split_names=config.split_names, num_shards=config.num_shards,
        source=plan.source, feature_keys=plan.feature_keys, label_key=plan.label_key,
        summary=summary, true_weights=plan.weights if synthetic else None,
        true_bias=plan.bias if synthetic else None)
