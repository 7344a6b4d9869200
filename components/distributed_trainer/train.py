"""The training loop, run in its own process by the executor (one per worker).

    python -m tfx_parallel.components.distributed_trainer.train --job job.json

A separate process per training run lets each layout configure its own devices (N
logical CPUs, or GPUs) before TensorFlow initialises, keeps DTensor and
MirroredStrategy collectives apart, and lets `multi_worker` start one process per
worker with its own TF_CONFIG. The job file is written by the executor (`Job`).
"""
import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Dict, List, Optional

from tfx_parallel.pipeline import tfenv

tfenv.prepare()

from tfx_parallel.components.common import config_util  # pylint: disable=g-import-not-at-top
from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top


@dataclasses.dataclass
class Job:
  """Everything one training process needs; serialised to JSON by the executor."""
  config: dict
  examples_uri: str
  feature_keys: List[str]
  label_key: str
  train_rows: int
  model_dir: str          # SavedModel destination (chief only).
  model_run_dir: str      # TensorBoard logs.
  history_dir: str        # history.json + loss.png.
  checkpoint_dir: str     # Stable across reruns of the same inputs + config.
  num_shards: int = 1

  def trainer_config(self) -> TrainerConfig:
    return config_util.from_dict(TrainerConfig, self.config).validate()


def devices_needed(config: TrainerConfig) -> int:
  """Logical CPU devices this layout needs when there is no GPU."""
  if config.layout == "mirrored":
    return config.devices or 2
  if config.layout == "mesh":
    return config.mesh_batch * config.mesh_model
  return 1


def padded_features(num_features: int, config: TrainerConfig) -> int:
  if config.layout != "mesh" or config.model != "linear":
    return num_features
  m = config.mesh_model
  if num_features % m == 0:
    return num_features
  if not config.pad_features:
    raise config_util.ConfigError(
        "mesh", f"the model axis ({m}) does not divide the feature count "
        f"({num_features}); set pad_features=true to pad with zero features")
  return -(-num_features // m) * m


class Progress:
  """One progress line every `every` steps: step, loss, examples/s, ETA."""

  def __init__(self, total: int, global_batch: int, start_step: int):
    self.total, self.batch, self.start = total, global_batch, start_step
    self.t0 = time.perf_counter()

  def line(self, step: int, loss: float, examples_per_sec: float) -> str:
    done = step - self.start
    elapsed = time.perf_counter() - self.t0
    eta = elapsed / max(done, 1) * (self.total - step)
    pct = 100.0 * step / self.total
    return (f"[train] step {step}/{self.total} ({pct:5.1f}%) loss {loss:.6g} "
            f"{examples_per_sec:,.0f} ex/s elapsed {elapsed:.1f}s ETA {eta:.1f}s")


def _eval_loss(tf, forward, values: Dict, specs, dataset) -> float:
  params = [tf.constant(values[s.name]) for s in specs]
  total, count = 0.0, 0
  for x, y in dataset:
    pred = forward(params, x)
    total += float(tf.reduce_sum(tf.square(pred - y)))
    count += int(y.shape[0])
  return total / max(count, 1)


def run(job: Job) -> dict:
  """Trains; returns the history dict (also written by the chief)."""
  config = job.trainer_config()
  if not tfenv.gpus() and devices_needed(config) > 1:
    # Before TensorFlow initialises; multi_worker must not initialise it here either
    # (collective ops are configured when its strategy is created).
    tfenv.split_cpu(devices_needed(config))
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import checkpoint, data, export, layouts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model as model_lib  # pylint: disable=g-import-not-at-top

  nf = len(job.feature_keys)
  nf_padded = padded_features(nf, config)
  if nf_padded != nf:
    print(f"[train] padding {nf} features to {nf_padded} for the model axis "
          f"{config.mesh_model}", flush=True)
  specs = model_lib.param_specs(config.model, nf_padded, config.hidden_units)
  spec = data.InputSpec(job.examples_uri, job.feature_keys, job.label_key, nf_padded)
  runtime = layouts.create(config.layout, specs=specs, optimizer=config.optimizer,
                           lr=config.learning_rate, global_batch=config.batch_size,
                           devices=config.devices, mesh_shape=config.mesh)
  steps_per_epoch = max(1, job.train_rows // config.batch_size)
  total = config.steps or config.epochs * steps_per_epoch

  mean = std = None
  if config.normalize:
    sample = np.concatenate([x.numpy() for x, _ in data.make_dataset(
        spec, "train", 1024, shuffle=False, drop_remainder=False).take(10)])
    mean = sample.mean(0).astype(np.float32)
    std = np.maximum(sample.std(0), 1e-6).astype(np.float32)
    if nf_padded != nf:
      mean[nf:], std[nf:] = 0.0, 1.0

  def dataset_fn(batch, num_shards, index):
    ds = data.make_dataset(spec, "train", batch, shuffle=True, seed=config.seed,
                           repeat=True, shuffle_buffer=config.shuffle_buffer,
                           num_shards=num_shards, shard_index=index)
    if mean is not None:
      ds = ds.map(lambda x, y: ((x - mean) / std, y))
    return ds.skip(start_step)  # Resume: the same batches as an uninterrupted run.

  records: List[dict] = []
  epochs: List[dict] = []
  wall_offset = 0.0
  start_step = 0
  found = checkpoint.latest(job.checkpoint_dir)
  if found:
    start_step, values, slots, meta = checkpoint.load(found)
    records, epochs = meta.get("records", []), meta.get("epochs", [])
    wall_offset = meta.get("wall_time", 0.0)
    print(f"[train] resuming from {found} at step {start_step}", flush=True)
  else:
    values, slots = model_lib.init_params(specs, config.seed), None
  runtime.build(values, slots)
  desc = runtime.describe()
  print(f"[train] layout {desc['layout']} replicas {desc['replicas']} mesh "
        f"{desc['mesh_shape'][0]}x{desc['mesh_shape'][1]} devices {len(desc['devices'])} "
        f"steps {start_step}->{total} global batch {config.batch_size}", flush=True)

  eval_ds = data.make_dataset(spec, "eval", 1024, shuffle=False, drop_remainder=False)
  if mean is not None:
    eval_ds = eval_ds.map(lambda x, y: ((x - mean) / std, y))
  eval_forward = tf.function(model_lib.forward)

  writer = tf.summary.create_file_writer(job.model_run_dir) if runtime.is_chief else None
  progress = Progress(total, config.batch_size, start_step)
  iterator = iter(runtime.distribute(dataset_fn))
  t_start = time.perf_counter()
  t_last, step_last = t_start, start_step
  wait = 0.0
  diverged = False
  loss = float("nan")
  losses_since = []
  for step in range(start_step + 1, total + 1):
    t_wait = time.perf_counter()
    batch = next(iterator)
    wait += time.perf_counter() - t_wait
    loss, grad_norm = runtime.step(batch, step)
    losses_since.append(loss)
    finite = math.isfinite(loss) and math.isfinite(grad_norm)
    if step % config.log_every == 0 or step == total or not finite:
      now = time.perf_counter()
      eps = (step - step_last) * config.batch_size / max(now - t_last, 1e-9)
      rec = {"step": step, "loss": float(np.mean(losses_since)), "last_loss": loss,
             "learning_rate": config.learning_rate, "grad_norm": grad_norm,
             "examples_per_sec": eps, "wall_time": wall_offset + now - t_start}
      records.append(rec)
      losses_since = []
      t_last, step_last = now, step
      print(progress.line(step, rec["loss"], eps), flush=True)
      if writer:
        with writer.as_default(step=step):
          tf.summary.scalar("loss", rec["loss"])
          tf.summary.scalar("grad_norm", grad_norm)
          tf.summary.scalar("examples_per_sec", eps)
    if not finite:
      diverged = True
      print(f"[train] loss is {loss} at step {step}: training diverged"
            + ("; stopping early" if config.stop_on_divergence else ""), flush=True)
      if config.stop_on_divergence:
        break
    if step % steps_per_epoch == 0 or step == total:
      values, _ = runtime.gather()
      ev = _eval_loss(tf, eval_forward, values, specs, eval_ds)
      epochs.append({"epoch": len(epochs) + 1, "step": step, "train_loss": rec_loss(
          records), "eval_loss": ev})
      print(f"[train] epoch {len(epochs)} step {step} eval loss {ev:.6g}", flush=True)
    if config.checkpoint_every and step % config.checkpoint_every == 0 and step < total:
      if runtime.is_chief:
        values, slots = runtime.gather()
        checkpoint.save(job.checkpoint_dir, step, values, slots, {
            "records": records, "epochs": epochs,
            "wall_time": wall_offset + time.perf_counter() - t_start})

  elapsed = time.perf_counter() - t_start
  steps_run = max(step - start_step, 1) if total > start_step else 1
  values, _ = runtime.gather()
  final = export.unpad_and_fold(values, specs, nf, mean, std)
  history = dict(desc, global_batch_size=config.batch_size, total_steps=total,
                 model=config.model, optimizer=config.optimizer, records=records,
                 epochs=epochs, steps_run=steps_run,
                 examples_per_sec=steps_run * config.batch_size / max(elapsed, 1e-9),
                 input_wait_fraction=wait / max(elapsed, 1e-9),
                 diverged=diverged, stopped_early=diverged and step < total,
                 feature_keys=list(job.feature_keys), label_key=job.label_key,
                 padded_features=nf_padded - nf, resumed_from_step=start_step)
  if config.model == "linear":
    history["weights"] = {"kernel": final["kernel"].tolist(), "bias": final["bias"].tolist()}
  if runtime.is_chief:
    export.export(job.model_dir, final, specs, job.feature_keys, job.label_key)
    write_history(job.history_dir, history)
    print(f"[train] done: {steps_run} steps in {elapsed:.1f}s, final loss {loss:.6g}; "
          f"model written to {job.model_dir}", flush=True)
  return history


def rec_loss(records: List[dict]) -> Optional[float]:
  return records[-1]["loss"] if records else None


def write_history(directory: str, history: dict):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import keys  # pylint: disable=g-import-not-at-top
  tf.io.gfile.makedirs(directory)
  with tf.io.gfile.GFile(os.path.join(directory, keys.HISTORY_FILE), "w") as f:
    json.dump(history, f, indent=1)
  plot_loss(os.path.join(directory, "loss.png"), history)


def plot_loss(path: str, history: dict):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 4))
  recs = history["records"]
  ax.plot([r["step"] for r in recs], [r["loss"] for r in recs], label="train loss")
  if history["epochs"]:
    ax.plot([e["step"] for e in history["epochs"]], [e["eval_loss"] for e in history["epochs"]],
            "o-", label="eval loss")
  ax.set_yscale("log")
  ax.set_xlabel("step")
  ax.set_ylabel("MSE")
  m = history["mesh_shape"]
  ax.set_title(f"{history['layout']} (replicas {history['replicas']}, mesh {m[0]}x{m[1]})")
  ax.legend()
  fig.tight_layout()
  import io  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=100)
  plt.close(fig)
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(buf.getvalue())


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--job", required=True, help="job JSON written by the executor")
  args = parser.parse_args(argv)
  with open(args.job) as f:
    job = Job(**json.load(f))
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    run(job)
  except (tf.errors.UnavailableError, tf.errors.AbortedError,
          tf.errors.CancelledError, tf.errors.DeadlineExceededError) as e:
    # A peer of a multi-worker run died: say so plainly instead of a hang or a
    # page of collective-op traceback.
    first = str(e.message if hasattr(e, "message") else e).strip().splitlines()[0]
    print(f"[train] ERROR: a peer training process failed or became unreachable "
          f"({type(e).__name__}: {first[:300]}). Stopping this worker; rerun to resume "
          f"from the last checkpoint in {job.checkpoint_dir}.", file=sys.stderr, flush=True)
    return PEER_FAILED_EXIT_CODE
  return 0


# Exit code of a worker that stopped because a peer failed.
PEER_FAILED_EXIT_CODE = 3


if __name__ == "__main__":
  sys.exit(main())
