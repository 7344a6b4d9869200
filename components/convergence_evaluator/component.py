"""ConvergenceEvaluator: eval-split quality + training convergence -> ML Metadata.

Inputs (contract with PartitionedExampleGen and DistributedTrainer, keys.py):

* ``model`` (Model): SavedModel at ``<uri>/Format-Serving`` whose ``serving_default``
  signature takes serialized tf.Examples (1-D tf.string ``examples``) and returns, by
  task, ``{'predictions': float32 [N, 1]}`` (regression) or ``{'probabilities',
  'class_ids', 'logits'}`` (binary: [N, 1]; multiclass: [N, K]); custom properties
  ``task``, ``num_classes``, ``label_vocabulary`` (a model without them is a regression
  model unless the history or the config's ``task`` says otherwise);
* ``examples`` (Examples): gzip TFRecords in ``Split-<split>/``; custom properties
  ``label_key`` and, for synthetic data, ``true_weights`` / ``true_bias``;
* ``history`` (TrainingHistory, optional): ``history.json`` at its URI; the same task
  properties as the model, if any. Without it the convergence part is left out;
* ``baseline_model`` (Model, optional), as the stock Evaluator's: evaluated on the same
  split; the candidate is blessed only if the change thresholds against it hold too
  (config ``change_thresholds``; baseline.py). Without it, config ``baseline:
  latest_blessed`` finds the latest blessed model of the same pipeline in ML Metadata
  (lookup.py); the first run, with none, is judged as without a baseline.

Any Examples and Model work (stock ExampleGen, stock Trainer): the label comes from
config ``label_key``, else the Examples' ``label_key``, else the history; the task and
the outputs to read from the serving signature (signature.py).

Outputs:

* ``metrics`` (ConvergenceMetrics): every scalar as a custom property (names, meanings
  and which task has which: properties.py), every float also at full precision in the
  struct property ``precise_values``, plus ``metrics.json``, ``curves.json`` and
  ``loss.png`` at its URI; with a baseline, also ``baseline_comparison.json`` and the
  ``baseline_*`` / ``change_*`` properties (baseline.py);
* ``blessing`` (ModelBlessing): ``blessed`` 1/0 and a BLESSED / NOT_BLESSED file, as the
  stock Evaluator writes them, so a stock Pusher can consume it.
"""
from typing import Optional

from google.protobuf import json_format
from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator import executor
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig


class ConvergenceEvaluatorSpec(types.ComponentSpec):
  """Channels and the JSON config property of ConvergenceEvaluator."""
  PARAMETERS = {keys.CONFIG_KEY: ExecutionParameter(type=str),
                keys.METADATA_CONNECTION_KEY: ExecutionParameter(type=str, optional=True)}
  INPUTS = {
      keys.MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
      keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
      keys.HISTORY_KEY: ChannelParameter(type=artifacts.TrainingHistory, optional=True),
      keys.BASELINE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model,
                                                optional=True),
  }
  OUTPUTS = {
      keys.METRICS_KEY: ChannelParameter(type=artifacts.ConvergenceMetrics),
      keys.BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing),
  }


class ConvergenceEvaluator(base_component.BaseComponent):
  """Evaluates a trained model and its training run; see the module docstring."""
  SPEC_CLASS = ConvergenceEvaluatorSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self, model: types.BaseChannel, examples: types.BaseChannel,
               history: Optional[types.BaseChannel] = None,
               config: EvaluatorConfig = EvaluatorConfig(),
               baseline_model: Optional[types.BaseChannel] = None,
               metadata_connection_config=None):
    """Args:
      model: Model channel (the trainer's ``model`` output).
      examples: Examples channel (PartitionedExampleGen's ``examples``).
      history: TrainingHistory channel (the trainer's ``history`` output); optional:
        without it (e.g. a model from the stock Trainer) the convergence part is left
        out and ``convergence_state`` says so ("unknown (no TrainingHistory)").
      config: targets and per-task blessing thresholds; validated here, so a bad value fails
        when the pipeline is built, naming the key.
      baseline_model: Model channel of the baseline (as the stock Evaluator's), e.g. a
        ``tfx.dsl.Importer`` of a pushed model; optional. Not with config
        ``baseline: latest_blessed``, which finds it in ML Metadata instead.
      metadata_connection_config: the pipeline's ML Metadata ConnectionConfig, where
        ``baseline: latest_blessed`` looks (pipeline.create_pipeline passes it); not
        needed on Kubeflow, where the step reaches KFP's metadata-grpc-service.
    """
    if not isinstance(config, EvaluatorConfig):
      raise TypeError(f"config must be an EvaluatorConfig. Received: {type(config).__name__}")
    config.validate()
    if baseline_model is not None and config.baseline is not None:
      raise config_util.ConfigError(
          "baseline", f"is {config.baseline!r} but a baseline_model channel is given too: "
          "pass one of them (set evaluator.baseline=null to use the channel). "
          f"Received: {config.baseline!r}")
    connection = None
    if metadata_connection_config is not None:
      connection = json_format.MessageToJson(metadata_connection_config, indent=None,
                                             sort_keys=True)
    super().__init__(spec=ConvergenceEvaluatorSpec(**{
        keys.MODEL_KEY: model,
        keys.EXAMPLES_KEY: examples,
        keys.HISTORY_KEY: history,
        keys.CONFIG_KEY: config_util.to_json(config),
        keys.BASELINE_MODEL_KEY: baseline_model,
        keys.METADATA_CONNECTION_KEY: connection,
        keys.METRICS_KEY: types.Channel(type=artifacts.ConvergenceMetrics),
        keys.BLESSING_KEY: types.Channel(type=standard_artifacts.ModelBlessing),
    }))
