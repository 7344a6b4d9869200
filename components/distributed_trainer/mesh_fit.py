"""The ``mesh`` layout's training run: the job's data through ``mesh_runtime.MeshTrainer``.

The same input pipeline, history records, per-epoch eval loss, divergence stop and
progress lines as the fit-based layouts (callbacks.py, driven step by step here: the
mesh uses a custom loop, since tf_keras ``fit`` is proven only on 1-D meshes), then the
measured training-state bytes (memory.py, from the DTensor layouts), the export of a
plain copy of the model (``build_model()`` outside the mesh, ``set_weights`` of the
gathered weights) and history.json.

Checkpoints (every ``checkpoint_every`` steps) hold the gathered model weights in
``model.get_weights()`` order and the optimizer's variables in ``optimizer.variables``
order, as the fit-based layouts save them (checkpoint.py); a rerun resumes from the
latest one on the same batches (the input skips the steps already taken).
"""
import math
import time
import types


def _loss_fn(loss):
  def fn(labels, outputs):
    return loss(labels, outputs)
  return fn


def _save(checkpoint, job, trainer, state, step: int):
  full = trainer.state()  # model/<path> in model.weights order, then optimizer/<name>
  names, n = list(full), len(trainer.model.weights)
  values = {f"w{i:04d}": full[k] for i, k in enumerate(names[:n])}
  slots = {"optimizer": {f"v{i:04d}": full[k] for i, k in enumerate(names[n:])}}
  checkpoint.save(job.checkpoint_dir, step, values, slots, {
      "records": state.records, "epochs": state.epochs, "wall_time": state.wall_time()})


def _restore(checkpoint, job, trainer):
  """(start step, records, epochs, wall time) from the latest checkpoint, else zeros."""
  found = checkpoint.latest(job.checkpoint_dir)
  if not found:
    return 0, [], [], 0.0
  step, values, slots, meta = checkpoint.load(found)
  names, n = list(trainer.state()), len(trainer.model.weights)
  opt = slots.get("optimizer", {})
  trainer.load_state({**{k: values[f"w{i:04d}"] for i, k in enumerate(names[:n])},
                      **{k: opt[f"v{i:04d}"] for i, k in enumerate(names[n:])}})
  print(f"[train] resuming from {found} at step {step}", flush=True)
  return step, meta.get("records", []), meta.get("epochs", []), meta.get("wall_time", 0.0)


def run(job, config, record=None) -> dict:
  """Trains ``job`` on a (batch, model) mesh of ``config.mesh``; returns the history dict
  (with ``record``'s keys: the device plan)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import callbacks as cb  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import checkpoint, data, export, memory, mesh_runtime, run_record, train, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.preprocess import Preprocessor  # pylint: disable=g-import-not-at-top

  spec, normalization = train.resolve_spec(job, config)
  module = user_module.load(config.module_file, config.module_path, config.model)
  pre = Preprocessor(spec, normalization)
  print(f"[train] model {module.name}: {spec.describe()}", flush=True)
  loss = user_module.make_loss(module, spec)
  tf_keras.utils.set_random_seed(config.seed)
  trainer = mesh_runtime.MeshTrainer(
      lambda: user_module.build(module, spec), mesh_shape=tuple(config.mesh),
      rules=module.layout_rules(spec) if module.layout_rules else None,
      loss_fn=_loss_fn(loss), optimizer=config.optimizer, learning_rate=config.learning_rate,
      global_batch=config.batch_size, module_name=module.name)
  b, m = trainer.mesh_shape
  start_step, records, epochs, wall_offset = _restore(checkpoint, job, trainer)

  steps_per_epoch = max(1, job.train_rows // config.batch_size)
  total = config.steps or config.epochs * steps_per_epoch
  cache_record, on_load = train.input_cache_plan(config, spec, job.train_rows)
  train_ds = data.training_dataset(
      job.files("train"), pre, config.batch_size, cache=cache_record["mode"],
      seed=config.seed, shuffle_buffer=config.shuffle_buffer,
      skip_missing_labels=config.skip_missing_labels, skip_batches=start_step,
      on_load=on_load)
  eval_ds = data.make_dataset(job.files("eval"), pre, 1024, shuffle=False,
                              drop_remainder=False,
                              skip_missing_labels=config.skip_missing_labels)
  # Evaluation runs on a plain copy that takes the gathered weights (outside the mesh).
  plain = user_module.build(module, spec)
  evaluate = cb.make_evaluator(plain, loss, eval_ds)

  def eval_loss() -> float:
    plain.set_weights(trainer.full_weights())
    return evaluate()

  devices = list(trainer.mesh.local_devices())
  print(f"[train] layout mesh replicas {b} mesh {b}x{m} devices {len(devices)} "
        f"steps {start_step}->{total} global batch {config.batch_size}", flush=True)
  state = cb.RunState(total=total, start_step=start_step, global_batch=config.batch_size,
                      steps_per_epoch=steps_per_epoch, learning_rate=config.learning_rate,
                      records=records, epochs=epochs, wall_offset=wall_offset,
                      step=start_step)
  writer = tf.summary.create_file_writer(job.model_run_dir)
  callbacks = [cb.Recorder(state, config.log_every, config.stop_on_divergence, eval_loss,
                           writer, non_negative=run_record.non_negative(loss)),
               cb.Checkpointer(state, config.checkpoint_every,
                               lambda step: _save(checkpoint, job, trainer, state, step), True),
               cb.Progress(state, config.stop_on_divergence)]
  control = types.SimpleNamespace(stop_training=False)  # What the callbacks stop.
  for c in callbacks:
    c.model = control  # Callback.model is a plain attribute holder here.
  t_start = time.perf_counter()
  running, count = 0.0, 0
  for features, labels in train_ds:
    if start_step + count >= total or control.stop_training:
      break
    step_loss = trainer.step(features, labels)
    count += 1
    running += (step_loss - running) / count   # Keras's running mean over the run.
    if not math.isfinite(step_loss):
      running = step_loss
    for c in callbacks:
      c.on_train_batch_end(count - 1, {"loss": running})
  for c in callbacks:
    c.on_train_end()
  elapsed = time.perf_counter() - t_start - state.eval_seconds
  steps_run = max(state.step - start_step, 1) if total > start_step else 1

  history = dict(
      layout="mesh", replicas=b, mesh_shape=[b, m], devices=devices,
      global_batch_size=config.batch_size, total_steps=total,
      model=module.name if (config.module_file or config.module_path) else config.model,
      optimizer=config.optimizer, records=state.records, epochs=state.epochs,
      steps_run=steps_run, examples_per_sec=steps_run * config.batch_size / max(elapsed, 1e-9),
      diverged=state.diverged, stopped_early=state.diverged and state.step < total,
      feature_keys=list(spec.feature_names), label_key=spec.label_key, task=spec.task,
      num_classes=spec.num_classes,
      label_vocabulary=(list(spec.label_vocabulary)
                        if spec.label_vocabulary is not None else None),
      steps_per_execution=1, skipped_examples=job.skipped_examples, padded_features=0,
      resumed_from_step=start_step, input_cache=cache_record, **(record or {}))
  history.update(run_record.describe(trainer.optimizer, loss, spec.task, spec.num_classes,
                                     state.records, state.diverged_reason))
  history.update(run_record.mesh_layout(trainer))  # The rules and shardings applied.
  history.update(memory.measure(trainer.model.trainable_variables,
                                trainer.optimizer.variables).as_dict())
  peaks = memory.gpu_memory_peaks(devices)
  if peaks:
    history["gpu_memory_peak_bytes"] = peaks
  plain.set_weights(trainer.full_weights())
  weights = train.linear_weights(plain, spec, normalization)
  if weights is not None:
    history["weights"] = weights
  export.export(job.model_dir, plain, pre, job.transform_graph_uri)
  train.write_history(job.history_dir, history)
  print(f"[train] done: {steps_run} steps in {elapsed:.1f}s, final loss "
        f"{state.last_loss:.6g}; model written to {job.model_dir}", flush=True)
  return history
