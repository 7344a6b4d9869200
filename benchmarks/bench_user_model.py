"""`single` on a user MLP with embeddings vs plain tf_keras `model.fit`, side by side.

    python benchmarks/bench_user_model.py [--smoke] [--repeats N] [--out FILE.json]

Data: gzip TFRecords (4 shards) with 8 float features, 2 string features (vocabularies of
50 and 1,000 values, some missing) and a 0/1 label; batch 512.

* **ours**: the trainer's training process (`python -m
  tfx_parallel.components.distributed_trainer.train --job job.json`, layout single, this
  file as the user module), examples/s read from its history records (training time only:
  the per-epoch evaluation is excluded, the first record -- tracing -- is skipped).
* **plain fit**: the same model (this file's `build_model`, same spec, seed, optimizer and
  `steps_per_execution`) trained by plain tf_keras `model.fit` on a hand-written tf.data
  pipeline of the kind a user writes (interleave, shuffle, repeat, batch, one
  `parse_example` per batch, StaticHashTable lookups, prefetch); examples/s over the same
  steps from a timing callback, first execution skipped.
* **input wait** (ours): in one process, our input pipeline + `fit` for N steps (T_real),
  then `fit` for N steps on the same batches pre-materialised in memory (T_mem);
  wait = max(T_real - T_mem, 0) / T_real, i.e. the share of step time the model would
  save if input were free.

Runs alternate (ours, plain, plain, ours, ...); the table shows medians. Prints a
Markdown table and writes JSON (default benchmarks/_work/user_model.json).
"""
import argparse
import json
import os
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import benchutil as bu  # noqa: E402  pylint: disable=wrong-import-position

NUM_FLOAT = 8
VOCABS = {"s_small": 50, "s_large": 1000}
BATCH = 512
SPE = 10          # steps_per_execution (both sides); also log_every.
HIDDEN = (64, 32)
EMBEDDING_DIM = 16
TRAIN_CMD = "python -m tfx_parallel.components.distributed_trainer.train --job job.json"


def sizes(smoke: bool) -> dict:
  if smoke:
    return dict(train_rows=8_192, eval_rows=1_024, steps=60, repeats=1)
  return dict(train_rows=200_000, eval_rows=4_096, steps=300, repeats=3)


# ------------------------------------------------------------------ the user module


def build_model(spec):
  """The benchmark's user model: embeddings for the string features, an MLP, 1 logit."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs, parts = {}, []
  for f in spec.features:
    if f.is_string:
      inputs[f.name] = tf_keras.Input((1,), name=f.name, dtype="int64")
      emb = tf_keras.layers.Embedding(f.num_ids, EMBEDDING_DIM, name=f"{f.name}_embedding")
      parts.append(tf_keras.layers.Flatten()(emb(inputs[f.name])))
    else:
      inputs[f.name] = tf_keras.Input((1,), name=f.name)
      parts.append(inputs[f.name])
  h = tf_keras.layers.Concatenate()(parts)
  for i, width in enumerate(HIDDEN, 1):
    h = tf_keras.layers.Dense(width, activation="relu", name=f"hidden_{i}")(h)
  return tf_keras.Model(inputs, tf_keras.layers.Dense(spec.output_units, name="output")(h))


# ------------------------------------------------------------------------- data


def write_data(root: str, rows: int, eval_rows: int, shards: int = 4) -> str:
  done = os.path.join(root, "_done")
  if os.path.exists(done):
    return root
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tfx_parallel.pipeline.tfenv  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  for split, n in (("train", rows), ("eval", eval_rows)):
    d = os.path.join(root, f"Split-{split}")
    os.makedirs(d, exist_ok=True)
    x = rng.standard_normal((n, NUM_FLOAT)).astype(np.float32)
    cats = {k: rng.zipf(1.3, n) % v for k, v in VOCABS.items()}
    score = x[:, 0] - x[:, 1] + (cats["s_small"] % 3 == 0) - 0.5
    y = (score + rng.logistic(size=n) > 0).astype(np.float32)
    writers = [tf.io.TFRecordWriter(os.path.join(d, f"data_tfrecord-{i:05d}-of-{shards:05d}.gz"),
                                    options="GZIP") for i in range(shards)]
    for i in range(n):
      feats = {f"x{j}": tf.train.Feature(float_list=tf.train.FloatList(value=[x[i, j]]))
               for j in range(NUM_FLOAT)}
      for k in VOCABS:
        if i % 11:
          feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(
              value=[f"{k}_{cats[k][i]}".encode()]))
      feats["y"] = tf.train.Feature(float_list=tf.train.FloatList(value=[y[i]]))
      writers[i % shards].write(
          tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    for w in writers:
      w.close()
  open(done, "w").close()
  return root


def job_dict(data: str, tmp: str, sz: dict) -> dict:
  config = dict(layout="single", module_file=os.path.abspath(__file__), batch_size=BATCH,
                steps=sz["steps"], epochs=1, learning_rate=0.001, optimizer="adam",
                log_every=SPE, steps_per_execution=SPE, checkpoint_every=0, task="binary")
  return dict(config=config, examples_uri=data, feature_keys=[f"x{j}" for j in range(NUM_FLOAT)],
              string_feature_keys=list(VOCABS), label_key="y", train_rows=sz["train_rows"],
              model_dir=os.path.join(tmp, "model", "Format-Serving"),
              model_run_dir=os.path.join(tmp, "model_run"),
              history_dir=os.path.join(tmp, "history"),
              checkpoint_dir=os.path.join(tmp, "ckpt", str(os.getpid())), num_shards=4)


def records_rate(records) -> float:
  """Training examples/s over the records after the first (tracing), eval excluded."""
  steps = seconds = 0.0
  for prev, cur in zip(records[:-1], records[1:]):
    n = cur["step"] - prev["step"]
    steps += n
    seconds += n * BATCH / cur["examples_per_sec"]
  return steps * BATCH / seconds


# ------------------------------------------------------------------ child processes


def _spec_and_pre(job):
  from tfx_parallel.components.distributed_trainer import train  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.preprocess import Preprocessor  # pylint: disable=g-import-not-at-top
  spec, norm = train.resolve_spec(job, job.trainer_config())
  return spec, Preprocessor(spec, norm)


class _Timer:
  """A tf_keras callback timing executions after the first."""

  def __new__(cls):
    import tf_keras  # pylint: disable=g-import-not-at-top

    class Timer(tf_keras.callbacks.Callback):
      def __init__(self):
        super().__init__()
        self.marks = []

      def on_train_batch_end(self, batch, logs=None):
        self.marks.append((int(batch) + 1, time.perf_counter()))

    return Timer()


def child_plain(job_path: str) -> dict:
  """Plain tf_keras fit on a hand-written input pipeline (see the module docstring)."""
  import tfx_parallel.pipeline.tfenv as tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.train import Job  # pylint: disable=g-import-not-at-top
  with open(job_path) as f:
    job = Job(**json.load(f))
  config = job.trainer_config()
  spec, _ = _spec_and_pre(job)
  tables = {}
  for f in spec.string_features:
    keys = tf.constant(list(f.vocabulary))
    tables[f.name] = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        keys, tf.range(1, len(f.vocabulary) + 1, dtype=tf.int64)), 0)
  feature_spec = {f.name: tf.io.FixedLenFeature([1], tf.string if f.is_string else tf.float32,
                                                default_value="" if f.is_string else 0.0)
                  for f in spec.features}
  feature_spec["y"] = tf.io.FixedLenFeature([1], tf.float32)

  def parse(serialized):
    p = tf.io.parse_example(serialized, feature_spec)
    x = {f.name: tables[f.name].lookup(p[f.name]) if f.is_string else p[f.name]
         for f in spec.features}
    return x, p["y"]

  files = sorted(tf.io.gfile.glob(os.path.join(job.examples_uri, "Split-train", "*")))
  ds = (tf.data.Dataset.from_tensor_slices(files)
        .interleave(lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"),
                    cycle_length=4, block_length=64, num_parallel_calls=tf.data.AUTOTUNE)
        .shuffle(config.shuffle_buffer, seed=config.seed).repeat()
        .batch(BATCH, drop_remainder=True)
        .map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
  tf_keras.utils.set_random_seed(config.seed)
  model = build_model(spec)
  model.compile(optimizer=tf_keras.optimizers.Adam(config.learning_rate),
                loss=tf_keras.losses.BinaryCrossentropy(from_logits=True),
                steps_per_execution=SPE)
  timer = _Timer()
  model.fit(ds, epochs=1, steps_per_epoch=config.steps, callbacks=[timer], verbose=0)
  (s0, t0), (s1, t1) = timer.marks[0], timer.marks[-1]
  return {"rate": (s1 - s0) * BATCH / (t1 - t0)}


def child_wait(job_path: str) -> dict:
  """Input wait of our pipeline: fit on it vs fit on the same batches held in memory."""
  import tfx_parallel.pipeline.tfenv as tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common.splits import split_files  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import data, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.train import Job  # pylint: disable=g-import-not-at-top
  with open(job_path) as f:
    job = Job(**json.load(f))
  config = job.trainer_config()
  spec, pre = _spec_and_pre(job)
  tf_keras.utils.set_random_seed(config.seed)
  module = user_module.load(config.module_file)
  model = user_module.build(module, spec)
  model.compile(optimizer=tf_keras.optimizers.Adam(config.learning_rate),
                loss=user_module.default_loss(spec.task), steps_per_execution=SPE)

  def real():
    return data.make_dataset(split_files(job.examples_uri, "train"), pre, BATCH, shuffle=True,
                             seed=config.seed, repeat=True,
                             shuffle_buffer=config.shuffle_buffer)

  steps = config.steps
  batches = list(real().take(steps))  # Materialised: the same batches, in memory.
  in_memory = tf.data.Dataset.from_tensor_slices(
      ({k: tf.stack([b[0][k] for b in batches]) for k in spec.feature_names},
       tf.stack([b[1] for b in batches]))).repeat()
  model.fit(in_memory, epochs=1, steps_per_epoch=2 * SPE, verbose=0)  # trace / warm up

  def timed(ds):
    timer = _Timer()
    model.fit(ds, epochs=1, steps_per_epoch=steps, callbacks=[timer], verbose=0)
    (s0, t0), (s1, t1) = timer.marks[0], timer.marks[-1]
    return (t1 - t0) / (s1 - s0)

  per_step_real = timed(real())
  per_step_mem = timed(in_memory)
  return {"wait": max(per_step_real - per_step_mem, 0.0) / per_step_real,
          "step_ms_real": 1e3 * per_step_real, "step_ms_memory": 1e3 * per_step_mem}


# --------------------------------------------------------------------------- driver


def run(smoke: bool, repeats: int = 0) -> dict:
  sz = sizes(smoke)
  repeats = repeats or sz["repeats"]
  data = write_data(bu.work_dir(f"user_model_data_{sz['train_rows']}"), sz["train_rows"],
                    sz["eval_rows"])
  ours, plain, waits = [], [], []
  for rep in range(repeats):
    tmp = bu.work_dir("user_model_runs", str(rep))
    job = job_dict(data, tmp, sz)
    path = os.path.join(tmp, "job.json")
    with open(path, "w") as f:
      json.dump(job, f)
    order = ("ours", "plain") if rep % 2 == 0 else ("plain", "ours")
    for which in order:
      if which == "ours":
        bu.run_python(["-m", "tfx_parallel.components.distributed_trainer.train", "--job", path],
                      timeout=1200)
        with open(os.path.join(job["history_dir"], "history.json")) as f:
          ours.append(records_rate(json.load(f)["records"]))
      else:
        res = bu.run_python([os.path.abspath(__file__), "--child", "plain", "--job", path],
                            timeout=1200)
        plain.append(bu.last_json_line(res["stdout"])["rate"])
      print(f"[bench_user_model] rep {rep} {which}: "
            f"{(ours if which == 'ours' else plain)[-1]:,.0f} ex/s", flush=True)
    res = bu.run_python([os.path.abspath(__file__), "--child", "wait", "--job", path],
                        timeout=1200)
    waits.append(bu.last_json_line(res["stdout"]))
    print(f"[bench_user_model] rep {rep} input wait {waits[-1]['wait']:.1%}", flush=True)
  return {"smoke": smoke, "repeats": repeats, "sizes": sz, "batch": BATCH,
          "steps_per_execution": SPE, "ours": ours, "plain": plain, "waits": waits,
          "ratio": statistics.median(ours) / statistics.median(plain),
          "input_wait": statistics.median(w["wait"] for w in waits),
          "machine": bu.machine(), "load_average": bu.load_average(),
          "command": f"python benchmarks/bench_user_model.py{' --smoke' if smoke else ''}"}


def table(result: dict) -> str:
  med = statistics.median
  sz = result["sizes"]
  waits = ", ".join(f"{w['wait']:.1%}" for w in result["waits"])
  lines = [
      f"Data: {sz['train_rows']:,} train rows, {NUM_FLOAT} float + 2 string features "
      f"(vocab {VOCABS['s_small']}/{VOCABS['s_large']}), batch {BATCH}, {sz['steps']} steps, "
      f"steps_per_execution {SPE}, MLP {HIDDEN} + embeddings {EMBEDDING_DIM}, Adam; "
      f"{result['repeats']} alternating repeats, medians. Command: `{result['command']}`",
      "",
      "| case | examples/s (median) | runs | ratio vs plain fit | target |",
      "|---|---|---|---|---|",
      f"| plain tf_keras model.fit | {med(result['plain']):,.0f} | "
      f"{', '.join(f'{v:,.0f}' for v in result['plain'])} | 1.00 | |",
      f"| ours: single (user module) | {med(result['ours']):,.0f} | "
      f"{', '.join(f'{v:,.0f}' for v in result['ours'])} | {result['ratio']:.2f} | >= 0.95 |",
      f"| ours: input wait | {result['input_wait']:.1%} | "
      f"{waits} | | < 5% |",
  ]
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--smoke", action="store_true", help="tiny data, one repeat")
  parser.add_argument("--repeats", type=int, default=0)
  parser.add_argument("--out", default=os.path.join(bu.WORK, "user_model.json"))
  parser.add_argument("--child", choices=["plain", "wait"], help=argparse.SUPPRESS)
  parser.add_argument("--job", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    fn = child_plain if args.child == "plain" else child_wait
    print(json.dumps(fn(args.job)), flush=True)
    return 0
  result = run(args.smoke, args.repeats)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(result, f, indent=1)
  print(table(result))
  print(f"\nJSON: {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
