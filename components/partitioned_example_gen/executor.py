"""PartitionedExampleGen executor: decode the config once, plan, run the ingest, record."""
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.components.example_gen import driver as example_gen_driver
from tfx.components.example_gen import utils
from tfx.dsl.components.base import base_beam_executor
from tfx.types import artifact_utils
from tfx.types import standard_component_specs as specs

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.common import tfenv
from tfx_parallel.components.partitioned_example_gen import driver
from tfx_parallel.components.partitioned_example_gen import inference
from tfx_parallel.components.partitioned_example_gen import ingest
from tfx_parallel.components.partitioned_example_gen import output_splits
from tfx_parallel.components.partitioned_example_gen import properties
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen import split_stats
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig


class Executor(base_beam_executor.BaseBeamExecutor):
  """Writes the configured source as sharded, split gzip TFRecords of tf.train.Example.

  Beam args (``.with_beam_pipeline_args``) reach ``self._make_beam_pipeline()`` unchanged.
  The files are the ones the driver fingerprinted (its resolved ``input_base`` and
  ``input_config``); without a driver, ``Do`` resolves them itself, the same way.
  """

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    tfenv.prepare()  # An entry point: Beam's worker processes inherit the environment.
    self._log_startup(input_dict, output_dict, exec_properties)
    config = config_util.from_json(ExampleGenConfig,
                                   exec_properties[keys.CONFIG_KEY]).validate()
    examples = artifact_utils.get_single_instance(output_dict[keys.EXAMPLES_KEY])
    if driver.resolved_from_properties(exec_properties) is None:
      exec_properties = driver.resolve_exec_properties(exec_properties)
    resolved = driver.resolved_from_properties(exec_properties)  # None for synthetic.
    splits = output_splits.resolve(config, exec_properties.get(specs.OUTPUT_CONFIG_KEY))
    plan = sources.plan_source(config, pattern=resolved.pattern if resolved else None,
                               partition_feature=splits.partition_feature,
                               row_split=splits.by_row)
    logging.info("PartitionedExampleGen: ingesting %r into %s", plan.source, examples.uri)
    synthetic = isinstance(plan, sources.SyntheticSpec)
    if not synthetic:
      logging.info("PartitionedExampleGen: span %s, version %s, files %s (fingerprint %s)",
                   resolved.span, resolved.version, list(plan.files), resolved.fingerprint)
      _log_column_types(plan)
      for line in plan.choice.lines():
        print(f"[example_gen] {line}", flush=True)
    summary = ingest.run(self._make_beam_pipeline(), config, plan, examples.uri, splits)
    warnings = _announce_splits(summary, splits.names, print_share=not synthetic)
    reports = {} if synthetic else {r.name: r for r in plan.reports}
    example_gen_driver.update_output_artifact(
        {utils.VERSION_PROPERTY_NAME: None, **exec_properties}, examples.mlmd_artifact)
    examples.span = int(exec_properties.get(utils.SPAN_PROPERTY_NAME) or 0)
    if exec_properties.get(utils.VERSION_PROPERTY_NAME) is not None:
      examples.version = int(exec_properties[utils.VERSION_PROPERTY_NAME])
    properties.record_output(
        examples, split_names=splits.names, num_shards=config.num_shards,
        source=plan.source, feature_keys=plan.feature_keys, label_key=plan.label_key,
        summary=summary, true_weights=plan.weights if synthetic else None,
        true_bias=plan.bias if synthetic else None,
        string_feature_keys=[k for k in plan.string_keys if k != plan.label_key],
        column_types=None if synthetic else inference.to_property(reports),
        type_inference=(None if synthetic else
                        inference.inference_property(reports, plan.sampled_rows,
                                                     plan.na_values)),
        input_columns=None if synthetic else plan.choice.record(),
        eval_split_warnings=warnings)


def _announce_splits(summary, split_names, print_share: bool) -> list:
  """Prints the duplicate share (``print_share``: CSV sources; generated rows have none
  to speak of); warns (one line each) and returns the eval split's warnings
  (split_stats.assess; none unless both 'train' and 'eval' are written)."""
  if print_share:
    print(f"[example_gen] {split_stats.summary_line(summary.split_stats)}", flush=True)
  if not {"train", "eval"} <= set(split_names):
    return []
  warnings = split_stats.assess(summary.split_stats)
  for warning in warnings:
    logging.warning("PartitionedExampleGen: unrepresentative eval split: %s", warning)
  return warnings


def _log_column_types(plan: sources.CsvLayout) -> None:
  """Every column's type at INFO; odd sampled cells at WARNING; the string columns in
  one console line."""
  info, warnings = inference.describe({r.name: r for r in plan.reports}, plan.sampled_rows,
                                      plan.label_key)
  logging.info("%s", info)
  for warning in warnings:
    logging.warning("PartitionedExampleGen: %s", warning)
  line = inference.categorical_line({r.name: r for r in plan.reports}, plan.label_key)
  if line:
    print(f"[example_gen] {line}", flush=True)
