"""DistributedTrainer executor: decodes config once, launches training, records the run."""
import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import path_utils

from tfx_parallel.components.common import config_util, keys, readable, run_history, task_contract
from tfx_parallel.components.common import custom_properties
from tfx_parallel.components.common import tfenv
from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env, layout_choice
from tfx_parallel.components.distributed_trainer.inputs import description, missing, stats
from tfx_parallel.components.distributed_trainer.kube import launch as kube_launch
from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings
from tfx_parallel.components.distributed_trainer.run import checkpoint, launcher
from tfx_parallel.components.distributed_trainer import hyperparameters as hp_lib
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.job import Job
from tfx_parallel.components.distributed_trainer.run.train import builtin_hparams


# A directory that outlives this process's machine, keyed by run and task, for the
# checkpoints: set by the Kubeflow container's entry point (kubeflow/entrypoint.py
# checkpoint_root), where the model's own directory is on the pod's disk.
CHECKPOINT_ROOT_ENV = "TFX_PARALLEL_CHECKPOINT_ROOT"


def checkpoint_root(environ: Dict[str, str]) -> Optional[str]:
  """The durable checkpoint root the environment names; None: beside the model."""
  return environ.get(CHECKPOINT_ROOT_ENV) or None


def checkpoint_dir(model_uri: str, examples_uri: str, config_json: str,
                   root: Optional[str] = None) -> str:
  """Stable across reruns of the same inputs + config, so a killed run resumes.
  ``config_json``: checkpoint.run_identity, without the layout, so that a rerun on
  another layout resumes too. The module's source is not part of the name: each
  checkpoint records its digest, and the training process refuses to resume one
  written by other source, saying so (run/train.py restore_checkpoint).

  `<root>/_checkpoints/<sha256(examples uri, config)[:16]>`; `root` defaults to the
  model's `<pipeline_root>/<component>` (LocalDagRunner: durable, and a rerun of the
  pipeline resumes a killed one).
  """
  component_root = root or os.path.dirname(os.path.dirname(model_uri.rstrip("/")))
  text = f"{examples_uri}\n{config_json}"
  digest = hashlib.sha256(text.encode()).hexdigest()[:16]
  return os.path.join(component_root, "_checkpoints", digest)


def job_from_artifacts(config: TrainerConfig, examples: types.Artifact, model_uri: str,
                       model_run_uri: str, history_uri: str,
                       schema: Optional[types.Artifact] = None,
                       transform_graph: Optional[types.Artifact] = None,
                       checkpoint_root: Optional[str] = None) -> Job:
  """The Job of any Examples artifact (and optional Schema): description.describe decides the
  files, features, types and label; custom properties are hints (description.py)."""
  described = description.describe(
      examples, config.train_split, config.eval_split, config.label_key,
      schema.uri if schema is not None else None,
      transform_graph.uri if transform_graph is not None else None)
  config_json = config_util.to_json(config)
  rows = described.rows or {}
  return Job(config=json.loads(config_json), examples_uri=examples.uri,
             feature_keys=described.feature_keys, label_key=described.label_key,
             train_rows=int(rows.get(config.train_split, 0)),  # 0: counted by prepare().
             model_dir=path_utils.serving_model_path(model_uri),
             model_run_dir=model_run_uri, history_dir=history_uri,
             checkpoint_dir=checkpoint_dir(model_uri, examples.uri,
                                           checkpoint.run_identity(json.loads(config_json)),
                                           checkpoint_root),
             num_shards=described.num_shards or 1,
             string_feature_keys=list(described.string_keys),
             train_files=list(described.files[config.train_split]),
             eval_files=list(described.files[config.eval_split]),
             feature_dtypes=described.dtypes,
             vocabularies={k: list(v) for k, v in described.vocabularies.items()},
             transform_graph_uri=transform_graph.uri if transform_graph is not None else None,
             required_features=list(described.required),
             na_values=_na_values(config, described),
             input_columns=_example_gen_columns(examples))


def _example_gen_columns(examples: types.Artifact) -> Dict[str, Any]:
  """PartitionedExampleGen's column choices (its ``input_columns``: columns left out,
  not selected, kept by a setting) under "example_gen", for history.json's
  ``input_columns``; {} when it recorded none (other Examples, or nothing decided)."""
  recorded = custom_properties.value(examples, keys.INPUT_COLUMNS)
  decided = json.loads(recorded) if isinstance(recorded, str) and recorded else {}
  return {"example_gen": decided} if decided else {}


def _na_values(config: TrainerConfig, described: description.InputDescription
               ) -> Optional[List[str]]:
  """Config ``na_values``, else the tokens the Examples' writer recorded, else None
  (pandas' set)."""
  tokens = config.na_values if config.na_values is not None else described.na_values
  return None if tokens is None else list(tokens)


def _prepare_all(job: Job, config: TrainerConfig) -> stats.Prepared:
  """The one scan and the spec (stats.prepare_all) with the job's inputs and config."""
  return stats.prepare_all(
      job.examples_uri, job.feature_keys, job.string_feature_keys, job.label_key,
      task=config.task, max_vocabulary=config.max_vocabulary, hash_buckets=config.hash_buckets,
      hparams=builtin_hparams(config), skip_missing_labels=config.skip_missing_labels,
      max_missing_label_share=config.max_missing_label_share,
      normalize=config.normalize, normalize_clip=config.normalize_clip,
      dtypes=job.feature_dtypes, vocabularies=job.vocabularies,
      files={config.train_split: job.files("train"), config.eval_split: job.files("eval")},
      splits=(config.train_split, config.eval_split), required=job.required_features,
      na_values=job.na_values, id_like_ratio=config.id_like_ratio,
      keep_as_category=config.keep_as_category)


def prepare(job: Job, config: TrainerConfig, module=None, source: Optional[str] = None
            ) -> Job:
  """Scans the data once for the model spec (and the row count when no hint gave it),
  then loads the model module and builds it on a tiny batch: a bad module or bad labels
  fail here, before training starts. A classifier's label with one class is a
  ConfigError naming ``source`` (the data's file; default: the Examples' URI) on the
  label setting, or on ``example_gen.seed`` (the row split) when only the train split
  has one class."""
  try:
    prepared = _prepare_all(job, config)
  except ms.SingleClassError as e:  # One class in the train split only: its row split.
    key = ("example_gen.seed" if e.split else
           "trainer.label_key" if config.label_key else "example_gen.label")
    raise config_util.ConfigError(key, f"{source or job.examples_uri}: {e}") from None
  spec, norm, skipped = prepared.spec, prepared.normalization, prepared.skipped
  inferred = "" if config.task else (
      f" (inferred from the label; to override: --task "
      f"{'|'.join(t for t in keys.TASKS if t != spec.task)}, or --set trainer.task=...)")
  logging.info("DistributedTrainer: %s%s", spec.describe(), inferred)
  print(f"[trainer] task {spec.task}{inferred}", flush=True)
  for line in prepared.columns.messages:
    print(f"[trainer] {line}", flush=True)
  for line in prepared.columns.warnings:  # One each: the console shows absl WARNINGs.
    logging.warning("DistributedTrainer: %s", line)
  print(f"[trainer] {missing.summary(prepared.missing_values, prepared.rows)}", flush=True)
  if skipped:
    print(f"[trainer] {stats.missing_label_line(prepared.missing_labels, spec.label_key)}",
          flush=True)
  if prepared.label_counts:
    print(f"[trainer] {label_summary(prepared.label_counts, config.train_split)}", flush=True)
  if prepared.unseen_classes:
    shown = ", ".join(f"{name!r} ({', '.join(f'{s} {n}' for s, n in where.items())})"
                      for name, where in prepared.unseen_classes.items())
    logging.warning("DistributedTrainer: label class(es) %s have examples in eval but none "
                    "in the train split %r: the model has an output for each but never "
                    "learned it, so those eval examples are almost surely misclassified "
                    "(recorded as %s)",
                    shown, config.train_split, keys.LABEL_CLASSES_NOT_IN_TRAIN)
  if module is None:  # Do loads it once for prepare, the planner and check_on_layout.
    module = load_module(config)
  # A mesh (or auto, which may choose one) also resolves the module's layout rules here.
  axis = {"mesh": config.mesh_model, "auto": 1}.get(config.layout, 0)
  user_module.check(module, spec, model_axis=axis, widths_key="trainer.hparams" if
                    "hidden_units" in config.hparams else "trainer.hidden_units")
  train_rows = job.train_rows or prepared.rows[config.train_split]
  return dataclasses.replace(job, model_spec=spec.to_dict(), normalization=norm,
                             skipped_examples=skipped, train_rows=train_rows,
                             missing_values=prepared.missing_values,
                             missing_labels=prepared.missing_labels,
                             label_counts=prepared.label_counts,
                             label_classes_not_in_train=prepared.unseen_classes,
                             input_columns=dict(job.input_columns,
                                                **prepared.columns.record()))


def label_summary(counts: Dict[str, Dict[str, int]], train_split: str,
                  most: int = 10) -> str:
  """One console line: the classes of the train split with their counts and shares."""
  train = counts.get(train_split) or {}
  total = sum(train.values()) or 1
  ranked = sorted(train.items(), key=lambda kv: (-kv[1], kv[0]))
  shown = ", ".join(f"{readable.name(name)} {n} ({100 * n / total:.0f}%)"
                    for name, n in ranked[:most])
  more = f", ... {len(ranked) - most} more" if len(ranked) > most else ""
  return f"label classes in {train_split!r}: {shown}{more}"


def fit_mesh(config: TrainerConfig, gpu_names: List[str]) -> TrainerConfig:
  """A ``mesh`` fitted to the GPUs present, once, here (devices.plan; the training
  process is started on this machine's devices and gets the fitted mesh as it is, so
  its own plan changes nothing): the module's rules and the built-in split are checked
  against the mesh that trains. Says so when it shrinks the mesh."""
  if config.layout != "mesh":
    return config
  plan = devices.plan(config.layout, config.devices, config.mesh, config.device,
                      len(gpu_names), config.batch_size, config.logical_gpus)
  if tuple(plan.mesh) == tuple(config.mesh):
    return config
  print(f"[trainer] devices: {plan.reason}", flush=True)
  return dataclasses.replace(config, mesh=tuple(plan.mesh)).validate()


def load_module(config: TrainerConfig) -> user_module.UserModule:
  """The run's model module, imported once per process (Do hands it on)."""
  return user_module.load(config.module_file, config.module_path, config.model)


def check_on_layout(job: Job, config: TrainerConfig, module=None):
  """Builds the optimizer and the module's callbacks as the training process will on
  ``config.layout`` (concrete: after ``layout: auto`` is resolved): on a mesh, the
  optimizer rebuilt with ``mesh=`` (user_module.check_optimizer). An optimizer or callback
  the layout cannot honour fails here, before training, naming the hook."""
  module = load_module(config) if module is None else module
  spec = ms.ModelSpec.from_dict(job.model_spec)
  user_module.check_optimizer(module, spec, config.optimizer, config.learning_rate,
                              config.layout, config.mesh)
  user_module.make_callbacks(module, spec, config.layout)


def with_hyperparameters(config: TrainerConfig, hyperparameters: Optional[types.Artifact]
                         ) -> TrainerConfig:
  """``config`` with the HyperParameters artifact applied (:func:`apply_hyperparameters`)."""
  return apply_hyperparameters(config, hyperparameters)[0]


def apply_hyperparameters(config: TrainerConfig, hyperparameters: Optional[types.Artifact]
                          ) -> Tuple[TrainerConfig, Dict[str, Dict[str, Any]]]:
  """(``config`` with the HyperParameters artifact's values merged into ``hparams``
  (hyperparameters.py ``merge``: a conflict raises ConfigError naming the hparam) and each
  tuned value named like a trainer setting (``learning_rate``, ``optimizer``,
  ``batch_size``: hyperparameters.SETTINGS) set for this run, said on the console and in
  the log (old -> new); history.json's ``tuned_settings`` {setting: {"config": old,
  "tuned": new}}). Without the artifact: ``config`` itself and {}. Either way the hparams
  a built-in model reads are checked (hyperparameters.check_builtin). The merged hparams
  are the run's: the module's ``spec.hparams``, the checkpoint identity and the record."""
  builtin = None if config.module_file or config.module_path else config.model
  if hyperparameters is None:
    hp_lib.check_builtin(builtin, config.hparams, {})
    return config, {}
  tuned = hp_lib.read_values(hyperparameters.uri)
  source = f"the hyperparameters input ({hyperparameters.uri})"
  merged = hp_lib.merge(config.hparams, tuned, source)
  hp_lib.check_builtin(builtin, merged, tuned, source)
  settings = hp_lib.tuned_settings(dataclasses.asdict(config), tuned, source)
  print(f"[trainer] hparams from {hyperparameters.uri}: "
        f"{json.dumps(tuned, sort_keys=True)}", flush=True)
  for name, change in settings.items():
    if change["config"] != change["tuned"]:
      logging.warning(
          "DistributedTrainer: trainer.%s %r -> %r from the Tuner's best_hyperparameters "
          "(%s): a tuned value named like a trainer setting sets it for this run (the "
          "config cannot tell a value you set from its default; to keep yours, drop %r "
          "from the tuner_fn's search space)", name, change["config"], change["tuned"],
          hyperparameters.uri, name)
  replaced = dataclasses.replace(config, hparams=merged,
                                 **{n: c["tuned"] for n, c in settings.items()})
  try:
    return replaced.validate(), settings
  except config_util.ConfigError as e:  # An unknown optimizer, a batch_size the replicas
    if e.key not in settings:            # do not divide: the tuned value is named.
      raise
    raise config_util.ConfigError(
        hp_lib.INPUT, f"tuned {e.key!r} sets trainer.{e.key} for this run: {e}. Received: "
        f"{settings[e.key]['tuned']!r} from {source}. Fix the tuner_fn's search space, or "
        f"rename the hparam if it is not the trainer's {e.key}") from None


def check_warm_start(job: Job, config: TrainerConfig, module=None) -> None:
  """With a base_model: builds the model once on the host and matches it against the base
  (warm_start.py), so that a variable that does not match fails here, before training,
  naming it (unless ``trainer.warm_start_partial``)."""
  if not job.base_model_dir:
    return
  # Start-up: only a run with a base model needs it (it reads TensorFlow checkpoints).
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  module = load_module(config) if module is None else module
  model = user_module.build(module, ms.ModelSpec.from_dict(job.model_spec))
  found = warm_start.match(model, job.base_model_dir, spec_dict=job.model_spec,
                           normalization=job.normalization,
                           transform_graph_uri=job.transform_graph_uri)
  warm_start.check(found, config.warm_start_partial)
  print(f"[trainer] warm start from {job.base_model_dir}: {len(found.pairs)} variable(s) "
        f"match" + (f", {len(found.skipped())} start fresh "
                    f"({warm_start.PARTIAL_SETTING}=true)" if found.skipped() else ""),
        flush=True)
  for line in warm_start.describe_notes(found.notes):
    print(f"[trainer] warm start: {line}", flush=True)


def _source(examples: types.Artifact) -> str:
  """The data behind the Examples, for messages: PartitionedExampleGen's ``source``
  property (the CSV path or glob), else the Examples' URI."""
  source = custom_properties.value(examples, keys.SOURCE)
  return source if isinstance(source, str) and source else examples.uri


def _optional(input_dict: Dict[str, List[types.Artifact]], key: str
              ) -> Optional[types.Artifact]:
  found = input_dict.get(key) or []
  return artifact_utils.get_single_instance(found) if found else None


class Executor(base_executor.BaseExecutor):

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]], exec_properties: Dict[str, Any]):
    tfenv.prepare()  # An entry point: the training process inherits the environment.
    config = config_util.from_json(TrainerConfig, exec_properties[keys.CONFIG_KEY]).validate()
    hyperparameters = _optional(input_dict, keys.HYPERPARAMETERS_KEY)
    # First: a tuned batch_size is the one the devices are planned for.
    config, tuned = apply_hyperparameters(config, hyperparameters)
    devices.keep_off_gpus()  # Scans, model checks and planner on the CPU: no CUDA here.
    remote = kube_settings.opted_in(os.environ, config.layout)
    if (config.require_gpu or config.device == "gpu") and not remote \
        and not layout_choice.gpu_names():  # A TFJob's replicas check their own GPUs.
      raise gpu_env.NoGpuError(gpu_env.no_gpu_message("DistributedTrainer executor"))
    if not remote:  # More logical devices than cores: one line with both numbers.
      layout_choice.warn_if_oversubscribed(config, [] if config.device == "cpu" else layout_choice.gpu_names())
      config = fit_mesh(config, [] if config.device == "cpu" else layout_choice.gpu_names())
    examples = artifact_utils.get_single_instance(input_dict[keys.EXAMPLES_KEY])
    schema = _optional(input_dict, keys.SCHEMA_KEY)
    transform_graph = _optional(input_dict, keys.TRANSFORM_GRAPH_KEY)
    model = artifact_utils.get_single_instance(output_dict[keys.MODEL_KEY])
    model_run = artifact_utils.get_single_instance(output_dict[keys.MODEL_RUN_KEY])
    history = artifact_utils.get_single_instance(output_dict[keys.HISTORY_KEY])
    module = load_module(config)  # Once: prepare, the planner and check_on_layout share it.
    if module.optimizer and {"learning_rate", "optimizer"} & set(tuned):
      print(f"[trainer] {module.name} builds the optimizer (its optimizer(spec) hook): "
            f"the tuned values reach it as spec.hparams only", flush=True)
    job = prepare(job_from_artifacts(config, examples, model.uri, model_run.uri, history.uri,
                                     schema, transform_graph, checkpoint_root(os.environ)),
                  config, module, _source(examples))
    print(f"[trainer] checkpoints: {job.checkpoint_dir}", flush=True)
    base_model = _optional(input_dict, keys.BASE_MODEL_KEY)
    if base_model is not None:
      # As the stock Evaluator finds a Model's SavedModel (<uri>/Format-Serving).
      job = dataclasses.replace(job, base_model_dir=path_utils.serving_model_path(
          base_model.uri, path_utils.is_old_model_artifact(base_model)))
      check_warm_start(job, config, module)
    job, config, planned = layout_choice.plan_job(job, config, module)  # auto -> concrete
    check_on_layout(job, config, module)
    # The choice goes into history.json too (the evaluator reads it), written by the child.
    job = dataclasses.replace(job, layout_choice=dict(planned),
                              hyperparameters_uri=(hyperparameters.uri if hyperparameters
                                                   is not None else None),
                              tuned_settings=tuned)
    settings = kube_settings.settings_from_env(os.environ, config.layout, config.workers)
    if settings is not None:  # Opt-in multi-node: a TFJob or TrainJob (see kube/).
      kube_launch.run(job, settings)
    else:
      launcher.launch(job, config.layout, config.workers)
    checkpoint.clear(job.checkpoint_dir)  # Finished: a rerun (any layout) starts afresh.
    path = os.path.join(history.uri, keys.HISTORY_FILE)
    with fileio.open(path) as f:  # Written once, by the training process; only read here.
      record = run_history.RunHistory.from_json(f.read(), path)
    record.write_properties(history)  # Every TrainingHistory property (run_history.py).
    for artifact in (model, history):
      task_contract.write_properties(artifact, record.task, record.num_classes,
                                     record.label_vocabulary)
    if not fileio.exists(job.model_dir):
      raise RuntimeError(f"Training finished but wrote no model to {job.model_dir}")
    logging.info("Training complete. Model written to %s", job.model_dir)
