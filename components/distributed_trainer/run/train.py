"""The training loop, run in its own process by the executor (one per worker).

    python -m tfx_parallel.components.distributed_trainer.run.train --job job.json

A separate process per training run lets each layout configure its own devices (N
logical CPUs, or GPUs) before TensorFlow initialises, keeps DTensor and
MirroredStrategy collectives apart, and lets `multi_worker` start one process per
worker with its own TF_CONFIG. The job file is written by the executor (`Job`).
"""
import argparse
import dataclasses
import io
import json
import os
import sys
import time
import traceback
from typing import Any, Dict, List, Optional

from tfx_parallel.components.common import config_util, divergence, keys, run_history
from tfx_parallel.components.common import tfenv
from tfx_parallel.components.distributed_trainer.engines import factory
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.inputs import memory_cache
from tfx_parallel.components.distributed_trainer.plan import devices as devices_lib, gpu_env
from tfx_parallel.components.distributed_trainer.plan import length as length_lib
from tfx_parallel.components.distributed_trainer.plan import memory
from tfx_parallel.components.distributed_trainer.run import checkpoint
from tfx_parallel.components.distributed_trainer.job import Job
from tfx_parallel.components.distributed_trainer import failures
from tfx_parallel.components.distributed_trainer.run import run_record


def setup_devices(config: TrainerConfig, gpu_names: Optional[List[str]] = None):
  """Plans and configures this process's devices before TensorFlow initialises:
  (config with the layout fitted to the devices present, the plan).

  ``require_gpu`` (or ``device: gpu``) without a visible GPU raises gpu_env.NoGpuError
  with CUDA's own load error. ``gpu_names``: the GPUs present (default: TensorFlow's list).
  """
  gpus = devices_lib.visible_gpus() if gpu_names is None else gpu_names
  if (config.require_gpu or config.device == "gpu") and not gpus:
    raise gpu_env.NoGpuError(gpu_env.no_gpu_message("training process"))
  if not gpus and gpu_names is None and not os.environ.get(gpu_env.CHECKED_ENV):
    gpu_env.preflight(config)  # Warns when nvidia-smi lists GPUs TensorFlow cannot see.
  plan = devices_lib.plan(config.layout, config.devices, config.mesh, config.device,
                          len(gpus), config.batch_size, config.logical_gpus)
  if plan.reason:
    print(f"[trainer] devices: {plan.reason}", flush=True)
  devices_lib.configure(plan, config.gpu_memory, config.logical_gpus, config.tf32)
  if config.layout == "mirrored":
    config = dataclasses.replace(config, devices=plan.devices)
  elif config.layout == "mesh":
    config = dataclasses.replace(config, mesh=tuple(plan.mesh))
  return config, plan


def best_weights(early, state, patience: int) -> Optional[list]:
  """The weights to export in place of the last ones: the best evaluation's, after an
  automatic length (``patience`` > 0, Keras ``restore_best_weights``), or when the run
  overfits (divergence.overfitting: the eval loss rose from its best while the training
  loss fell); else None."""
  best = early.best_weights()
  if best is None or patience:
    return best
  evals = [e for e in state.epochs if e.get("eval_loss") is not None]
  why = divergence.overfitting([e["eval_loss"] for e in evals],
                               [e.get("train_loss") for e in evals],
                               [e.get("eval_loss_se") for e in evals])
  if not why:
    return None
  print(f"[trainer] overfitting: {why}; exporting the weights of step {early.best_step} "
        f"(the best eval loss) instead of the last (trainer.patience > 0 also stops early)",
        flush=True)
  return best


def builtin_hparams(config: TrainerConfig) -> Dict[str, Any]:
  """The hparams a module sees: config ``hidden_units`` for the built-ins, then the
  user's ``hparams`` (which win)."""
  base = {} if (config.module_file or config.module_path) else {
      "hidden_units": list(config.hidden_units)}
  return dict(base, **config.hparams)


def resolve_spec(job: Job, config: TrainerConfig):
  """(ModelSpec, normalisation) from the job, or from a scan of the data when the job
  was written without them (e.g. by a test)."""
  # Start-up: stats imports TensorFlow.
  from tfx_parallel.components.distributed_trainer.inputs import stats  # pylint: disable=g-import-not-at-top
  if job.model_spec is not None:
    return ms.ModelSpec.from_dict(job.model_spec), job.normalization
  spec, norm, _ = stats.prepare(
      job.examples_uri, job.feature_keys, job.string_feature_keys, job.label_key,
      task=config.task, max_vocabulary=config.max_vocabulary, hash_buckets=config.hash_buckets,
      hparams=builtin_hparams(config), skip_missing_labels=config.skip_missing_labels,
      max_missing_label_share=config.max_missing_label_share,
      normalize=config.normalize, normalize_clip=config.normalize_clip,
      dtypes=job.feature_dtypes, vocabularies=job.vocabularies,
      files={"train": job.files("train"), "eval": job.files("eval")})
  return spec, norm


def input_cache_plan(config: TrainerConfig, spec, rows: int, workers: int = 1):
  """(record, on_load) for config ``cache``: the choice for this worker's share of the
  ``rows``, printed once; ``record`` goes into history.json as ``input_cache`` and
  ``on_load`` (pass it to tf_data.training_dataset) adds what loading took."""
  choice = memory_cache.choose(config.cache, -(-int(rows) // max(1, workers)),
                              memory_cache.example_bytes(spec), memory_cache.available_memory())
  if choice.mode != "memory":  # Else said once, with what the load took (on_load).
    print(f"[trainer] input cache: {choice.mode} ({choice.reason})", flush=True)
  record = choice.as_record()

  def on_load(columns):
    record.update(rows=columns.rows, bytes=columns.nbytes(),
                  load_seconds=round(columns.load_seconds, 3))
    print(f"[trainer] input cache: memory: parsed {columns.rows:,} rows "
          f"({columns.nbytes() / 2**20:,.1f} MB) in {columns.load_seconds:.2f}s "
          f"({choice.reason})", flush=True)
  return record, on_load


def linear_weights(model, spec, normalization) -> Optional[dict]:
  """The built-in linear model's numeric kernel and bias in raw feature units."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  # Start-up: linear imports tf_keras.
  from tfx_parallel.components.distributed_trainer.models import linear  # pylint: disable=g-import-not-at-top
  try:
    kernel, bias = model.get_layer(linear.LINEAR_LAYER).get_weights()
  except ValueError:
    return None
  if normalization is not None:
    mean = np.asarray(normalization["mean"], np.float32)
    std = np.asarray(normalization["std"], np.float32)
    kernel = kernel / std[:, None]
    bias = bias - mean @ kernel
  return {"kernel": kernel.tolist(), "bias": np.asarray(bias).tolist()}


def save_checkpoint(job: Job, engine, state, step: int, module_digest: str = ""):
  """The one checkpoint path (checkpoint.py): the engine's model and optimizer as a
  tf.train.Checkpoint, which any layout reads; the run state, the layout it was saved
  by and the digest of the module source it trained go along."""
  checkpoint.save(job.checkpoint_dir, step, engine.checkpointed(),
                  {"records": state.records, "epochs": state.epochs,
                   "wall_time": state.wall_time(),
                   "initial_eval_loss": state.initial_eval_loss,
                   "epoch_learning_rate": state.epoch_learning_rate,
                   "layout": describe_layout(engine.describe()),
                   "module_digest": module_digest},
                  host_blocks=engine.host_blocks)


def restore_checkpoint(job: Job, engine, module=None):
  """(start step, records, epochs, wall time, initial eval loss, the learning rate at the
  start of the epoch the checkpoint is inside) from the latest checkpoint, else zeros and
  None (the rate: None too in a checkpoint at an epoch's end, or older than the field).

  A checkpoint written by other source of the user ``module`` (its recorded
  ``module_digest`` differs from ``module.source_digest``) is not resumed: the console
  says so, and the chief removes it. Restoring is strict (checkpoint.restore)."""
  found = checkpoint.latest(job.checkpoint_dir)
  if not found:
    old = checkpoint.legacy(job.checkpoint_dir)
    if old:
      print(f"[trainer] checkpoint: {len(old)} checkpoint(s) in the .npz format of earlier "
            f"versions in {job.checkpoint_dir} are not resumed; training starts at step 0",
            flush=True)
    return 0, [], [], 0.0, None, None
  digest = module.source_digest if module is not None else ""
  saved = checkpoint.read_meta(found).get("module_digest", "")
  if saved != digest:
    print(f"[trainer] checkpoint: {found} is not resumed: it was written by other source "
          f"of module {getattr(module, 'name', '?')} (sha256 {saved[:12] or 'not recorded'}, now "
          f"{digest[:12] or 'none'}); training starts at step 0", flush=True)
    if engine.chief:
      checkpoint.clear(job.checkpoint_dir)
    return 0, [], [], 0.0, None, None
  meta = checkpoint.restore(found, engine.checkpointed())
  step = int(meta["step"])
  print(f"[trainer] resuming from {found} at step {step} (saved by layout "
        f"{meta.get('layout', 'an unrecorded layout')}; "
        f"now {describe_layout(engine.describe())})", flush=True)
  return (step, meta.get("records", []), meta.get("epochs", []), meta.get("wall_time", 0.0),
          meta.get("initial_eval_loss"), meta.get("epoch_learning_rate"))


def warm_start_from_base(job: Job, config: TrainerConfig, engine, start_step: int,
                         spec: Optional[ms.ModelSpec] = None, normalization=None
                         ) -> Optional[dict]:
  """Initialises the engine's model from ``job.base_model_dir`` (warm_start.py), one
  variable at a time; history.json's ``warm_start`` record (None without a base model).
  A resumed run (``start_step`` > 0) keeps its checkpoint: a checkpoint of the same run
  wins over the base model."""
  if not job.base_model_dir:
    return None
  # Start-up: only a run with a base model reads one (TensorFlow's checkpoint reader).
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  if start_step > 0:
    print(f"[trainer] warm start: not applied, resumed from this run's checkpoint at step "
          f"{start_step} (a checkpoint of the same run wins over base_model)", flush=True)
    return {"source": job.base_model_dir, "loaded": 0, "skipped": 0, "skipped_names": [],
            "partial": config.warm_start_partial, "resumed_instead": True}
  found = warm_start.match(engine.model, job.base_model_dir, normalization=normalization,
                           spec_dict=spec.to_dict() if spec is not None else None,
                           transform_graph_uri=job.transform_graph_uri)
  warm_start.check(found, config.warm_start_partial)
  warm_start.load(found, job.base_model_dir, engine.assign_from_host)
  print(f"[trainer] warm start from {job.base_model_dir}: loaded {len(found.pairs)} "
        f"variable(s)" + (f", {len(found.skipped())} start fresh: "
                          f"{'; '.join(found.skipped()[:5])}" if found.skipped() else ""),
        flush=True)
  return found.record(config.warm_start_partial)


def describe_layout(desc: dict) -> str:
  """``single``, ``mirrored x2``, ``multi_worker x4`` or ``mesh 2x2``."""
  if desc["layout"] == "mesh":
    return f"mesh {desc['mesh_shape'][0]}x{desc['mesh_shape'][1]}"
  return desc["layout"] + (f" x{desc['replicas']}" if desc["replicas"] > 1 else "")


def run(job: Job, progress: Optional[dict] = None) -> dict:
  """Trains; returns the history dict (also written by the chief).

  The one run skeleton of every layout: inputs, run state, callbacks, checkpoints, the
  run record, export and the console lines. The layout's part is its step engine
  (engines/factory.py: ``FitEngine`` for single / mirrored / multi_worker, ``MeshEngine`` for
  the mesh).
  """
  # Before TensorFlow initialises; multi_worker must not initialise it here either
  # (collective ops are configured when its strategy is created).
  config, plan = setup_devices(job.trainer_config())
  device_record = dict(plan.as_record(), tf32=config.tf32)  # Into history.json.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  tfenv.skip_tf_keras_autograph()  # 10-25 s less before the first step (tfenv.py).
  # After skip_tf_keras_autograph, as the device plan is applied before TensorFlow
  # initialises: these import tf_keras / TensorFlow.
  from tfx_parallel.components.distributed_trainer.engines import callbacks as cb  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs import tf_data  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import export  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor  # pylint: disable=g-import-not-at-top

  engine = factory.create(config, plan, device_record)
  if progress is not None:  # What main() tells a config error by (failures.config_error).
    progress.update(engine=engine, layout=config.layout)
  spec, normalization = resolve_spec(job, config)
  module = user_module.load(config.module_file, config.module_path, config.model)
  # Refused here, before any build, when the layout cannot honour one of them.
  user_callbacks = user_module.make_callbacks(module, spec, config.layout)
  pre = Preprocessor(spec, normalization)
  print(f"[trainer] model {module.name}: {spec.describe()}", flush=True)
  engine.build(module, spec)
  start_step, records, epochs, wall_offset, initial_eval, epoch_rate = restore_checkpoint(
      job, engine, module)
  warm_record = warm_start_from_base(job, config, engine, start_step, spec, normalization)

  length = length_lib.choose(config.steps, config.epochs, config.min_steps, config.patience,
                             job.train_rows, config.batch_size)
  steps_per_epoch, total = length.steps_per_epoch, length.total_steps
  print(f"[trainer] length: {length.reason}", flush=True)
  train_files = job.files("train")
  cache_record, on_load = input_cache_plan(config, spec, job.train_rows, engine.num_workers)

  def dataset(batch: int, num_shards: int, index: int, skip: int):
    files, data_shard = tf_data.shard_files(train_files, config.train_split, num_shards, index)
    return tf_data.training_dataset(
        files, pre, batch, cache=cache_record["mode"], seed=config.seed,
        shuffle_buffer=config.shuffle_buffer, skip_missing_labels=config.skip_missing_labels,
        skip_batches=skip, data_shard=data_shard, on_load=on_load)

  train_ds = engine.dataset(dataset, start_step)
  eval_ds = tf_data.make_dataset(job.files("eval"), pre, 1024, shuffle=False,
                              drop_remainder=False,
                              skip_missing_labels=config.skip_missing_labels)

  desc = engine.describe()
  splits, replicated, split_text = engine.variable_record()
  for path in replicated:
    print(f"[trainer] mesh: {path} {splits[path]['per_device']} stays whole on every device: the model axis of "
          f"{desc['mesh_shape'][1]} divides none of the dimensions a default rule would split",
          flush=True)
  print(f"[trainer] layout {desc['layout']} replicas {desc['replicas']} mesh "
        f"{desc['mesh_shape'][0]}x{desc['mesh_shape'][1]} devices {len(desc['devices'])} "
        f"steps {start_step}->{total} global batch {config.batch_size} "
        f"steps/execution {engine.steps_per_execution} on {desc['device_type']} "
        f"({desc['collective']})" + (f"; variables: {split_text}" if split_text else ""),
        flush=True)
  execution_note = config.execution_note()
  if execution_note:
    print(f"[trainer] {execution_note}", flush=True)
  state = cb.RunState(total=total, start_step=start_step, global_batch=config.batch_size,
                      steps_per_epoch=steps_per_epoch, learning_rate=config.learning_rate,
                      records=records, epochs=epochs, wall_offset=wall_offset,
                      step=start_step, epoch_learning_rate=epoch_rate)
  if progress is not None:
    progress["state"] = state
  writer = tf.summary.create_file_writer(job.model_run_dir) if engine.chief else None
  evaluate = engine.evaluator(eval_ds, user_callbacks)
  if initial_eval is None:  # The untrained model: the divergence rule's starting point
    # (before t_start and the Recorder: not training time; not a user's test hooks).
    initial_eval = evaluate(drive_callbacks=False)[0]
  state.initial_eval_loss = initial_eval
  callbacks = [
      cb.Recorder(state, config.log_every, config.stop_on_divergence, evaluate,
                  engine.step_losses, writer,
                  non_negative=run_record.non_negative(engine.loss),
                  learning_rate_at=lambda step: run_record.learning_rate_at(engine.optimizer,
                                                                            step)),
      cb.Progress(state, config.stop_on_divergence),
  ]
  # Keeps the best evaluation's weights: exported after an early stop, or when the run
  # overfits (patience 0: a length the user set is trained in full).
  early = cb.EarlyStop(state, length.patience, engine.snapshot)
  callbacks.insert(1, early)  # After the Recorder, before progress and checkpoints.
  for user_callback in user_callbacks:  # Each followed by what notes its stop, if any.
    callbacks += [user_callback, cb.UserStop(state, type(user_callback).__name__)]
  # Last: a checkpoint at an epoch's end holds what the user's on_epoch_end changed.
  callbacks.append(cb.Checkpointer(state, config.checkpoint_every,
                                   lambda step: save_checkpoint(job, engine, state, step,
                                                                module.source_digest),
                                   engine.chief))
  t_start = time.perf_counter()
  # Keras epochs are the run's (engines/epochs.py): on_epoch_end(e, logs) at each.
  engine.train(train_ds, start_step, total, callbacks, steps_per_epoch)
  elapsed = time.perf_counter() - t_start - state.eval_seconds
  steps_run = max(state.step - start_step, 1) if total > start_step else 1

  history = dict(desc, global_batch_size=config.batch_size, total_steps=total,
                 model=module.name if (config.module_file or config.module_path) else config.model,
                 optimizer=config.optimizer, records=state.records, epochs=state.epochs,
                 hparams=dict(spec.hparams),
                 steps_run=steps_run,
                 examples_per_sec=steps_run * config.batch_size / max(elapsed, 1e-9),
                 diverged=state.diverged,
                 stopped_early=(state.diverged or state.early_stopped
                                or bool(state.stopped_by)) and state.step < total,
                 training_length=length.as_record(),
                 initial_eval_loss=state.initial_eval_loss,
                 feature_keys=list(spec.feature_names), label_key=spec.label_key,
                 task=spec.task, num_classes=spec.num_classes,
                 label_vocabulary=(list(spec.label_vocabulary)
                                   if spec.label_vocabulary is not None else None),
                 steps_per_execution=engine.steps_per_execution,
                 skipped_examples=job.skipped_examples,
                 resumed_from_step=start_step, input_cache=cache_record,
                 variable_splits=splits, replicated_variables=replicated)
  history.update(run_record.describe(engine.written_optimizer, engine.loss, spec.task,
                                     spec.num_classes, state.diverged_reason))
  if job.missing_values is not None:  # The executor's scan: counts and fills per feature,
    history["missing_values"] = job.missing_values
    history["input_columns"] = job.input_columns  # and what became of string features.
  # The executor's scan of the label: missing labels, classes per split.
  history["missing_labels"] = job.missing_labels or None
  history["label_counts"] = job.label_counts
  history["label_classes_not_in_train"] = job.label_classes_not_in_train or None
  history.update(job.layout_choice)  # layout: auto: the planner's choice.
  if warm_record is not None:
    history["warm_start"] = warm_record
  if job.hyperparameters_uri:
    history["hyperparameters_uri"] = job.hyperparameters_uri
    history["tuned_settings"] = job.tuned_settings
  best = best_weights(early, state, length.patience)
  history["early_stopping"] = early.record()
  if state.early_stopped:
    print(f"[trainer] early stop at step {state.step}: the eval loss has not improved "
          f"for {length.patience} evaluations since step {early.best_step} "
          f"({early.best:.6g})" + ("; keeping that step's weights" if best is not None
                                    else ""), flush=True)
  elif state.stopped_by and state.step < total:
    print(f"[trainer] early stop at step {state.step} (epoch "
          f"{-(-state.step // steps_per_epoch)} of {-(-total // steps_per_epoch)}): "
          f"{state.stopped_by} (callbacks(spec)) set model.stop_training", flush=True)
  if config.layout == "mesh":  # The rules and shardings applied.
    history.update(run_record.mesh_layout(engine.trainer))
  # Measured from where the variables live, after training (every optimizer slot exists).
  history.update(memory.measure(engine.model.trainable_variables,
                                engine.optimizer.variables).as_dict())
  peaks = memory.gpu_memory_peaks(desc["devices"])
  if peaks:
    history["gpu_memory_peak_bytes"] = peaks
  if engine.chief:
    # Export from a plain copy built outside any strategy or mesh.
    tf_keras.utils.set_random_seed(config.seed)
    with tf.device("/CPU:0"):  # The export copy lives in host memory.
      plain = build_host_copy(module, spec)
      # One variable at a time (a mesh writes each block into its slice on the host).
      engine.copy_weights_to(plain, best)
      del best
    weights = linear_weights(plain, spec, normalization)
    if weights is not None:
      history["weights"] = weights
    export.export(job.model_dir, plain, pre, job.transform_graph_uri)
    # What a warm start from this model compares its ids with (warm_start.py).
    from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
    warm_start.write_inputs_record(job.model_dir, spec.to_dict(), normalization)
    write_history(job.history_dir, history)
    print(f"[trainer] done: {steps_run} steps in {elapsed:.1f}s, final loss "
          f"{state.last_loss:.6g}; model written to {job.model_dir}", flush=True)
  return history


def build_host_copy(module, spec):
  """The export's plain model, built on the current device with every variable created
  as zeros instead of by its initializer: each is overwritten at once with the trained
  value (the engine's ``copy_weights_to``), and an initializer's temporaries land on the
  host beside the trained state. tf_keras's GlorotUniform draws a whole uniform tensor and
  then a scaled copy of it (tf.random.uniform's ``rnd * (maxval - minval) + minval``):
  on the 6144-wide mlp of benchmarks/bench_mesh_memory.py that build peaked 432 MB above
  the RSS before it against 145 MB built from zeros (its model), i.e. two whole copies
  of a 151 MB kernel (measured on a mesh 1x4 process, 2026-12-06). A variable whose
  shape is not known when it is created keeps its initializer."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def zeros(next_creator, **kwargs):
    shape, initial = kwargs.get("shape"), kwargs.get("initial_value")
    if callable(initial) and shape is not None and tf.TensorShape(shape).is_fully_defined():
      dtype = tf.as_dtype(kwargs.get("dtype") or tf.float32)
      kwargs["initial_value"] = lambda: tf.zeros(shape, dtype)
    return next_creator(**kwargs)

  with tf.variable_creator_scope(zeros):
    return user_module.build(module, spec)


def write_history(directory: str, history: dict):
  """history.json through the typed run record (a key outside its schema raises)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  record = run_history.RunHistory.from_dict(history, "the training run's history")
  tf.io.gfile.makedirs(directory)
  with tf.io.gfile.GFile(os.path.join(directory, keys.HISTORY_FILE), "w") as f:
    f.write(record.to_json())
  plot_loss(os.path.join(directory, "loss.png"), history)


def plot_loss(path: str, history: dict):
  """Train (and per-epoch eval) loss against step. A ``Figure`` of its own: no pyplot
  state and no ``matplotlib.use``, which would change the backend of the user's process."""
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(6, 4))
  ax = fig.add_subplot()
  recs = history["records"]
  ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], label="train loss")
  if history["epochs"]:
    ax.plot([e["step"] for e in history["epochs"]], [e["eval_loss"] for e in history["epochs"]],
            "o-", label="eval loss")
  ax.set_yscale("log")
  ax.set_xlabel("step")
  ax.set_ylabel(f"loss ({history.get('task') or 'regression'})")
  m = history["mesh_shape"]
  ax.set_title(f"{history['layout']} (replicas {history['replicas']}, mesh {m[0]}x{m[1]})")
  ax.legend()
  fig.tight_layout()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=100)
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(buf.getvalue())


def main(argv=None) -> int:
  tfenv.prepare()  # The training process's entry point: before TensorFlow is imported.
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--job", required=True, help="job JSON written by the executor")
  args = parser.parse_args(argv)
  with open(args.job) as f:
    job = Job(**json.load(f))
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if any(str(uri).startswith("s3://") for uri in (job.examples_uri, job.checkpoint_dir,
                                                  job.model_dir, job.history_dir)):
    # tensorflow-io registers s3:// on import (kube/object_store.py register; a step on
    # the default store keeps its checkpoints there: kubeflow/entrypoint.py).
    import tensorflow_io  # pylint: disable=g-import-not-at-top,unused-import
  progress: dict = {}
  try:
    run(job, progress)
  except (tf.errors.UnavailableError, tf.errors.AbortedError,
          tf.errors.CancelledError, tf.errors.DeadlineExceededError) as e:
    # A peer of a multi-worker run died: say so plainly instead of a hang or a
    # page of collective-op traceback.
    first = str(e.message if hasattr(e, "message") else e).strip().splitlines()[0]
    print(f"[trainer] ERROR: a peer training process failed or became unreachable "
          f"({type(e).__name__}: {first[:300]}). Stopping this worker; rerun to resume "
          f"from the last checkpoint in {job.checkpoint_dir}.", file=sys.stderr, flush=True)
    return PEER_FAILED_EXIT_CODE
  except Exception as e:  # pylint: disable=broad-except
    config_error = _config_error(e, progress)
    if config_error is not None:
      print(failures.one_line(config_error), file=sys.stderr, flush=True)
      return failures.CONFIG_ERROR_EXIT_CODE
    if failures.resumable(e):
      # A rerun may not meet it: exit >= 128 so that the operator restarts the replica
      # (failures.exit_code), with the traceback and one line that says so.
      traceback.print_exc()
      code = failures.exit_code(e)
      print(f"{failures.one_line(e)} (exit code {code}: "
            f"{failures.EXIT_CODE_MEANINGS[code]}; a rerun resumes from the last "
            f"checkpoint in {job.checkpoint_dir})", file=sys.stderr, flush=True)
      return code
    # A rerun meets it again: one line (a user-facing error says what to fix, without
    # a traceback; any other error keeps it).
    if not isinstance(e, failures.user_error_types()):
      traceback.print_exc()
    print(failures.one_line(e), file=sys.stderr, flush=True)
    return failures.NOT_RESUMABLE_EXIT_CODE
  return 0


def _config_error(error: BaseException, progress: dict):
  """failures.config_error with what the run got to: whether a step completed, and the
  state the planner counts per device (plan/memory.py) when memory ran out."""
  state = progress.get("state")
  done = state is not None and state.step > state.start_step
  state_bytes = None
  engine = progress.get("engine")
  if engine is not None and getattr(engine, "model", None) is not None:
    try:
      state_bytes = memory.measure(engine.model.trainable_variables,
                                   engine.optimizer.variables).state_bytes_per_device
    except Exception:  # pylint: disable=broad-except
      state_bytes = None  # The figure is a courtesy: the error is reported without it.
  return failures.config_error(error, first_step_done=done, layout=progress.get("layout", ""),
                               state_bytes=state_bytes)


# Exit code of a worker that stopped because a peer failed: retryable (>= 128) under a
# TFJob's restartPolicy ExitCode; the constant and the reason live in failures.py.
PEER_FAILED_EXIT_CODE = failures.PEER_LOST_EXIT_CODE


def _exit(status: int) -> None:
  """Ends the training process with `status`; with tensorflow-io loaded, without the
  interpreter's teardown, where its S3 client aborts (SIGABRT, exit 134: see
  kube/object_store.py run_and_exit), which would read as a retryable crash."""
  if "tensorflow_io" not in sys.modules:
    sys.exit(status)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)  # pylint: disable=protected-access


if __name__ == "__main__":
  _exit(main())
