"""DistributedTrainer executor: decodes config once, launches training, records the run."""
import hashlib
import json
import os
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_parallel.components.common import config_util, keys
from tfx_parallel.components.distributed_trainer import launcher, tfjob
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.train import Job


def checkpoint_dir(model_uri: str, examples_uri: str, config_json: str) -> str:
  """Stable across reruns of the same inputs + config, so a killed run resumes.

  `<pipeline_root>/<component>/_checkpoints/<sha256(examples uri, config)[:16]>`.
  """
  component_root = os.path.dirname(os.path.dirname(model_uri.rstrip("/")))
  digest = hashlib.sha256(f"{examples_uri}\n{config_json}".encode()).hexdigest()[:16]
  return os.path.join(component_root, "_checkpoints", digest)


def job_from_artifacts(config: TrainerConfig, examples: types.Artifact, model_uri: str,
                       model_run_uri: str, history_uri: str) -> Job:
  def prop(name):
    if not examples.has_custom_property(name):
      raise ValueError(f"Examples artifact {examples.uri} lacks custom property "
                       f"'{name}'; produce it with PartitionedExampleGen")
    return examples.get_custom_property(name)

  row_counts = json.loads(prop(keys.ROW_COUNTS))
  config_json = config_util.to_json(config)
  return Job(config=json.loads(config_json), examples_uri=examples.uri,
             feature_keys=json.loads(prop(keys.FEATURE_KEYS)), label_key=prop(keys.LABEL_KEY),
             train_rows=int(row_counts["train"]),
             model_dir=path_utils.serving_model_path(model_uri),
             model_run_dir=model_run_uri, history_dir=history_uri,
             checkpoint_dir=checkpoint_dir(model_uri, examples.uri, config_json),
             num_shards=int(prop(keys.NUM_SHARDS)))


class Executor(base_executor.BaseExecutor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]):
    config = config_util.from_json(TrainerConfig, exec_properties[keys.CONFIG_KEY]).validate()
    examples = artifact_utils.get_single_instance(input_dict[keys.EXAMPLES_KEY])
    model = artifact_utils.get_single_instance(output_dict[keys.MODEL_KEY])
    model_run = artifact_utils.get_single_instance(output_dict[keys.MODEL_RUN_KEY])
    history = artifact_utils.get_single_instance(output_dict[keys.HISTORY_KEY])
    job = job_from_artifacts(config, examples, model.uri, model_run.uri, history.uri)
    settings = tfjob.settings_from_env(os.environ, config.layout, config.workers)
    if settings is not None:  # Opt-in multi-node: a Kubeflow TFJob (see tfjob.py).
      tfjob.run(job, settings)
    else:
      launcher.launch(job, config.layout, config.workers)
    with fileio.open(os.path.join(history.uri, keys.HISTORY_FILE)) as f:
      record = json.load(f)
    for name in ("layout", "model", "optimizer"):
      history.set_string_custom_property(name, str(record[name]))
    history.set_string_custom_property("mesh_shape", "x".join(map(str, record["mesh_shape"])))
    history.set_string_custom_property("devices", json.dumps(record["devices"]))
    history.set_int_custom_property("replicas", int(record["replicas"]))
    history.set_int_custom_property("steps_run", int(record["steps_run"]))
    history.set_int_custom_property("diverged", int(record["diverged"]))
    history.set_float_custom_property("examples_per_sec", float(record["examples_per_sec"]))
    if not fileio.exists(job.model_dir):
      raise RuntimeError(f"Training finished but wrote no model to {job.model_dir}")
    logging.info("Training complete. Model written to %s", job.model_dir)
