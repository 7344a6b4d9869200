"""DistributedTrainer: data- and model-parallel training as a typed TFX component."""
import dataclasses
import os
from typing import Optional

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ExecutionParameter

from tfx_parallel.components.common import artifacts, config_util, keys
from tfx_parallel.components.distributed_trainer import executor
from tfx_parallel.components.distributed_trainer.config import TrainerConfig


class DistributedTrainerSpec(types.ComponentSpec):
  PARAMETERS = {keys.CONFIG_KEY: ExecutionParameter(type=str)}
  INPUTS = {
      keys.EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
      keys.SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema, optional=True),
      keys.TRANSFORM_GRAPH_KEY: ChannelParameter(type=standard_artifacts.TransformGraph,
                                                 optional=True),
      # As the stock Trainer's (tfx 1.16.0 tfx/types/standard_component_specs.py
      # TrainerSpec, HYPERPARAMETERS_KEY): a stock Tuner's best_hyperparameters.
      keys.HYPERPARAMETERS_KEY: ChannelParameter(type=standard_artifacts.HyperParameters,
                                                 optional=True),
      # A Model (ours, or a stock Trainer's Keras SavedModel): warm start (warm_start.py).
      keys.BASE_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model, optional=True),
  }
  OUTPUTS = {
      keys.MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
      keys.MODEL_RUN_KEY: ChannelParameter(type=standard_artifacts.ModelRun),
      keys.HISTORY_KEY: ChannelParameter(type=artifacts.TrainingHistory),
  }


class DistributedTrainer(base_component.BaseComponent):
  """Trains a tf_keras model from a user module (or the built-in ``linear``/``mlp``) with
  layout `single`, `mirrored`, `multi_worker` or a DTensor `mesh`.

  The layout is part of the typed `TrainerConfig`, validated here (errors name the
  field) before any component runs.
  """
  SPEC_CLASS = DistributedTrainerSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self, examples: types.BaseChannel, config: TrainerConfig = TrainerConfig(),
               schema: types.BaseChannel = None, module_file: Optional[str] = None,
               module_path: Optional[str] = None,
               transform_graph: Optional[types.BaseChannel] = None,
               hyperparameters: Optional[types.BaseChannel] = None,
               base_model: Optional[types.BaseChannel] = None):
    """``module_file`` / ``module_path`` (exactly one, or neither for the built-in
    ``config.model``) name the user module; they may also be set in ``config``.

    Any Examples work (a stock ExampleGen's too; see inputs/description.py): ``schema`` (SchemaGen /
    ImportSchemaGen) types the features; with ``transform_graph`` (TFX Transform),
    ``examples`` are Transform's ``transformed_examples`` and the exported model serves
    raw tf.Examples through the graph.

    ``hyperparameters`` (e.g. a stock ``Tuner``'s ``outputs["best_hyperparameters"]``):
    its KerasTuner values join config ``trainer.hparams`` in ``spec.hparams``
    (hyperparameters.py ``merge``: a name set in both with different values fails,
    naming the name, both values and ``trainer.hparams``); the merged values are
    recorded in history.json and the TrainingHistory property ``hparams``.

    ``base_model`` (a Model: ours, or a stock Trainer's ``outputs["model"]``) warm
    starts the run: its variables, matched by path and shape, initialise the model on
    any layout before the first step (warm_start.py). One that does not match fails,
    naming the variables, unless ``config.warm_start_partial``; a checkpoint of the same
    run wins on a resume. Recorded as the TrainingHistory property ``warm_start``."""
    for key, value in (("module_file", module_file), ("module_path", module_path)):
      if value is not None:
        current = getattr(config, key)
        config_util.require(current in (None, value), key,
                            f"given both as an argument ({value!r}) and in config "
                            f"({current!r})")
        config = dataclasses.replace(config, **{key: value})
    config.validate()
    config_util.require(not config.module_file or os.path.isfile(config.module_file),
                        "module_file", f"no such file. Received: {config.module_file!r}")
    super().__init__(spec=DistributedTrainerSpec(
        examples=examples, schema=schema, transform_graph=transform_graph,
        hyperparameters=hyperparameters, base_model=base_model,
        config=config_util.to_json(config),
        model=types.Channel(type=standard_artifacts.Model),
        model_run=types.Channel(type=standard_artifacts.ModelRun),
        history=types.Channel(type=artifacts.TrainingHistory)))
