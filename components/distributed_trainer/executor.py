"""DistributedTrainer executor: decodes config once, launches training, records the run."""
import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, List, Optional

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_parallel.components.common import config_util, keys, run_history, task_contract
from tfx_parallel.components.common import tfenv
from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env, layout_choice
from tfx_parallel.components.distributed_trainer.inputs import description, missing, stats
from tfx_parallel.components.distributed_trainer.run import checkpoint, launcher, tfjob
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.run.train import Job, builtin_hparams


def checkpoint_dir(model_uri: str, examples_uri: str, config_json: str,
                   module_digest: str = "") -> str:
  """Stable across reruns of the same inputs + config + module file, so a killed run
  resumes (and an edited module file does not resume another model's checkpoint).
  ``config_json``: checkpoint.run_identity, without the layout, so that a rerun on
  another layout resumes too.

  `<pipeline_root>/<component>/_checkpoints/<sha256(examples uri, config, module)[:16]>`.
  """
  component_root = os.path.dirname(os.path.dirname(model_uri.rstrip("/")))
  text = f"{examples_uri}\n{config_json}" + (f"\n{module_digest}" if module_digest else "")
  digest = hashlib.sha256(text.encode()).hexdigest()[:16]
  return os.path.join(component_root, "_checkpoints", digest)


def job_from_artifacts(config: TrainerConfig, examples: types.Artifact, model_uri: str,
                       model_run_uri: str, history_uri: str,
                       schema: Optional[types.Artifact] = None,
                       transform_graph: Optional[types.Artifact] = None) -> Job:
  """The Job of any Examples artifact (and optional Schema): description.describe decides the
  files, features, types and label; custom properties are hints (description.py)."""
  described = description.describe(
      examples, config.train_split, config.eval_split, config.label_key,
      schema.uri if schema is not None else None,
      transform_graph.uri if transform_graph is not None else None)
  config_json = config_util.to_json(config)
  digest = user_module.file_digest(config.module_file)
  rows = described.rows or {}
  return Job(config=json.loads(config_json), examples_uri=examples.uri,
             feature_keys=described.feature_keys, label_key=described.label_key,
             train_rows=int(rows.get(config.train_split, 0)),  # 0: counted by prepare().
             model_dir=path_utils.serving_model_path(model_uri),
             model_run_dir=model_run_uri, history_dir=history_uri,
             checkpoint_dir=checkpoint_dir(model_uri, examples.uri,
                                           checkpoint.run_identity(json.loads(config_json)),
                                           digest),
             num_shards=described.num_shards or 1,
             string_feature_keys=list(described.string_keys),
             train_files=list(described.files[config.train_split]),
             eval_files=list(described.files[config.eval_split]),
             feature_dtypes=described.dtypes,
             vocabularies={k: list(v) for k, v in described.vocabularies.items()},
             transform_graph_uri=transform_graph.uri if transform_graph is not None else None,
             required_features=list(described.required),
             na_values=_na_values(config, described))


def _na_values(config: TrainerConfig, described: description.InputDescription
               ) -> Optional[List[str]]:
  """Config ``na_values``, else the tokens the Examples' writer recorded, else None
  (pandas' set)."""
  tokens = config.na_values if config.na_values is not None else described.na_values
  return None if tokens is None else list(tokens)


def prepare(job: Job, config: TrainerConfig) -> Job:
  """Scans the data once for the model spec (and the row count when no hint gave it),
  then loads the model module and builds it on a tiny batch: a bad module or bad labels
  fail here, before training starts."""
  prepared = stats.prepare_all(
      job.examples_uri, job.feature_keys, job.string_feature_keys, job.label_key,
      task=config.task, max_vocabulary=config.max_vocabulary, hash_buckets=config.hash_buckets,
      hparams=builtin_hparams(config), skip_missing_labels=config.skip_missing_labels,
      normalize=config.normalize, normalize_clip=config.normalize_clip,
      dtypes=job.feature_dtypes, vocabularies=job.vocabularies,
      files={config.train_split: job.files("train"), config.eval_split: job.files("eval")},
      splits=(config.train_split, config.eval_split), required=job.required_features,
      na_values=job.na_values, id_like_ratio=config.id_like_ratio,
      keep_as_category=config.keep_as_category)
  spec, norm, skipped = prepared.spec, prepared.normalization, prepared.skipped
  inferred = "" if config.task else " (inferred from the label; set trainer task to override)"
  logging.info("DistributedTrainer: %s%s", spec.describe(), inferred)
  print(f"[trainer] task {spec.task}{inferred}", flush=True)
  for line in prepared.columns.messages:
    print(f"[trainer] {line}", flush=True)
  for line in prepared.columns.warnings:  # One each: the console shows absl WARNINGs.
    logging.warning("DistributedTrainer: %s", line)
  print(f"[trainer] {missing.summary(prepared.missing_values, prepared.rows)}", flush=True)
  if skipped:
    logging.warning("DistributedTrainer: skipping %d examples without a label", skipped)
  module = user_module.load(config.module_file, config.module_path, config.model)
  # A mesh (or auto, which may choose one) also resolves the module's layout rules here.
  axis = {"mesh": config.mesh_model, "auto": 1}.get(config.layout, 0)
  user_module.check(module, spec, model_axis=axis, widths_key="trainer.hparams" if
                    "hidden_units" in config.hparams else "trainer.hidden_units")
  train_rows = job.train_rows or prepared.rows[config.train_split]
  return dataclasses.replace(job, model_spec=spec.to_dict(), normalization=norm,
                             skipped_examples=skipped, train_rows=train_rows,
                             missing_values=prepared.missing_values,
                             input_columns=prepared.columns.record())


def _optional(input_dict: Dict[str, List[types.Artifact]], key: str
              ) -> Optional[types.Artifact]:
  found = input_dict.get(key) or []
  return artifact_utils.get_single_instance(found) if found else None


class Executor(base_executor.BaseExecutor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]):
    tfenv.prepare()  # An entry point: the training process inherits the environment.
    config = config_util.from_json(TrainerConfig, exec_properties[keys.CONFIG_KEY]).validate()
    devices.keep_off_gpus()  # Scans, model checks and planner on the CPU: no CUDA here.
    remote = config.layout == "multi_worker" and bool(os.environ.get(tfjob.ENV_IMAGE))
    if (config.require_gpu or config.device == "gpu") and not remote \
        and not layout_choice.gpu_names():  # A TFJob's replicas check their own GPUs.
      raise gpu_env.NoGpuError(gpu_env.no_gpu_message("DistributedTrainer executor"))
    if not remote:  # More logical devices than cores: one line with both numbers.
      layout_choice.warn_if_oversubscribed(config, [] if config.device == "cpu" else layout_choice.gpu_names())
    examples = artifact_utils.get_single_instance(input_dict[keys.EXAMPLES_KEY])
    schema = _optional(input_dict, keys.SCHEMA_KEY)
    transform_graph = _optional(input_dict, keys.TRANSFORM_GRAPH_KEY)
    model = artifact_utils.get_single_instance(output_dict[keys.MODEL_KEY])
    model_run = artifact_utils.get_single_instance(output_dict[keys.MODEL_RUN_KEY])
    history = artifact_utils.get_single_instance(output_dict[keys.HISTORY_KEY])
    job = prepare(job_from_artifacts(config, examples, model.uri, model_run.uri, history.uri,
                                     schema, transform_graph), config)
    job, config, planned = layout_choice.plan_job(job, config)  # layout: auto -> concrete
    settings = tfjob.settings_from_env(os.environ, config.layout, config.workers)
    if settings is not None:  # Opt-in multi-node: a Kubeflow TFJob (see tfjob.py).
      tfjob.run(job, settings)
    else:
      launcher.launch(job, config.layout, config.workers)
    checkpoint.clear(job.checkpoint_dir)  # Finished: a rerun (any layout) starts afresh.
    path = os.path.join(history.uri, keys.HISTORY_FILE)
    with fileio.open(path) as f:
      record = run_history.RunHistory.from_json(f.read(), path)
    record.missing_values = job.missing_values  # Counts and fills, per feature.
    record.input_columns = job.input_columns  # Left out, dates, tokens (columns.py).
    if planned:  # The choice goes into history.json too (the evaluator reads it).
      record = dataclasses.replace(record, **planned)
    with fileio.open(path, "w") as f:
      f.write(record.to_json())
    record.write_properties(history)  # Every TrainingHistory property (run_history.py).
    for artifact in (model, history):
      task_contract.write_properties(artifact, record.task, record.num_classes,
                                     record.label_vocabulary)
    if not fileio.exists(job.model_dir):
      raise RuntimeError(f"Training finished but wrote no model to {job.model_dir}")
    logging.info("Training complete. Model written to %s", job.model_dir)
