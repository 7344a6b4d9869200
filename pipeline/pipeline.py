"""`create_pipeline`: a pure factory (no I/O) returning the tfx-parallel pipeline.

    PartitionedExampleGen ──Examples──▶ DistributedTrainer ──Model, TrainingHistory──▶
    ConvergenceEvaluator ──ConvergenceMetrics, ModelBlessing──▶ (ML Metadata)
    [--with-tfma: stock Evaluator on the same Model + Examples; with evaluator.baseline,
     against the latest blessed Model, found by TFX's LatestBlessedModelStrategy resolver]

The same factory is used by the local runner and the Kubeflow compiler.
"""
from typing import List, Optional

from tfx.dsl.components.base import base_node
# The narrow module, not `tfx.v1` (whose extensions import Google Cloud clients: 8-12 s of
# a cold start here, benchmarks/results/e2e_overhead.md). tfx.dsl.Pipeline is this class.
from tfx.orchestration import pipeline as tfx_pipeline

from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator
from tfx_parallel.components.distributed_trainer.component import DistributedTrainer
from tfx_parallel.components.partitioned_example_gen.component import PartitionedExampleGen
from tfx_parallel.pipeline.config import PipelineConfig


def create_components(config: PipelineConfig, metadata_connection_config=None
                      ) -> List[base_node.BaseNode]:
  """The pipeline's components, wired, in topological order. ``metadata_connection_config``
  is where ``evaluator.baseline: latest_blessed`` looks (None on Kubeflow: the step
  reaches KFP's own ML Metadata)."""
  example_gen = PartitionedExampleGen(config=config.example_gen)
  if config.beam_pipeline_args:
    example_gen = example_gen.with_beam_pipeline_args(list(config.beam_pipeline_args))
  trainer = DistributedTrainer(examples=example_gen.outputs["examples"],
                               config=config.trainer)
  evaluator = ConvergenceEvaluator(model=trainer.outputs["model"],
                                   examples=example_gen.outputs["examples"],
                                   history=trainer.outputs["history"],
                                   config=config.evaluator,
                                   metadata_connection_config=(
                                       metadata_connection_config
                                       if config.evaluator.baseline else None))
  components = [example_gen, trainer, evaluator]
  if config.with_tfma:
    from tfx_parallel.components.convergence_evaluator import tfma_stage  # pylint: disable=g-import-not-at-top
    baseline_model = change_thresholds = None
    if config.evaluator.baseline:
      # TFMA judges the same two models: the latest blessed one, as TFX finds it
      # (a Resolver; runs locally, open-source KFP's Argo compiler has no resolver nodes,
      # and kubeflow/package.py refuses one by name).
      resolver = tfma_stage.latest_blessed_resolver()
      components.append(resolver)
      baseline_model = resolver.outputs["model"]
      change_thresholds = config.evaluator.change_thresholds
    components.append(tfma_stage.stock_evaluator(trainer.outputs["model"],
                                                 example_gen.outputs["examples"],
                                                 config.example_gen.label_key,
                                                 task=config.trainer.task or "regression",
                                                 baseline_model=baseline_model,
                                                 change_thresholds=change_thresholds))
  return components


def create_pipeline(config: PipelineConfig,
                    pipeline_root: str,
                    metadata_connection_config=None,
                    beam_pipeline_args: Optional[List[str]] = None) -> tfx_pipeline.Pipeline:
  """Validates `config` and returns the pipeline; raises ConfigError naming the key."""
  config.validate()
  return tfx_pipeline.Pipeline(
      pipeline_name=config.pipeline_name,
      pipeline_root=pipeline_root,
      components=create_components(config, metadata_connection_config),
      enable_cache=config.enable_cache,
      metadata_connection_config=metadata_connection_config,
      beam_pipeline_args=beam_pipeline_args,
  )
