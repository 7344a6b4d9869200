"""Parity of fifteen mesh engines with tf_keras ``fit``, all in one process.

    .venv/bin/python benchmarks/bench_mesh_parity.py [--combine-all-reduces] [--out FILE]

Splits the CPU into 4 logical devices and builds fifteen ``MeshTrainer`` s one after
another (:data:`ENGINES`): meshes 1x1, 1x2, 2x1, 2x2, 1x4 and 4x1; optimizers SGD,
momentum SGD, Adam, RMSprop and Adagrad; steps_per_execution 1, 3, 7 and 10; models
with Dense layers only, an Embedding, a BatchNormalization, an LSTM and a GRU (both
``unroll=True``). Each engine trains 10 steps, then every engine evaluates 7 rows, then
each trains 10 more steps and every engine evaluates again, so the engines' functions
run interleaved. Each step count is split into executions of at most steps_per_execution
steps, as MeshEngine ends an execution at the end of an epoch. For reference the same
model and optimizer train on one device with plain tf_keras ``fit``
on the same global batches (tests/mesh_cases.py), 10 steps then 10.

Per engine it prints the largest absolute difference from ``fit`` of the losses (each
step's running mean over its ``fit`` call, as ``fit`` logs it; and the evaluation's
per-example loss sum) and of the weights (every weight after 10 and after 20 steps,
the BatchNormalization's moving statistics included), then the largest over all
engines, and writes them as JSON to ``--out``.

``--combine-all-reduces`` starts DTensor's device with
``DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION=1``, before any trainer does (a
trainer sets it to 0, components/common/tfenv.py ``ENV_REQUIRED``, but DTensor reads it
once, when its device is made): the pass that the project turns off because it
re-orders Adam's reads of m and v before their writes.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# tests/mesh_cases.py holds the parity model, batches and loss (test-only helpers are
# not in the wheel).
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import mesh_cases  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

COMBINE_ENV = "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION"
PARTS = (10, 10)       # steps trained before each round of evaluation
EVAL_ROWS = 7          # not a multiple of the batch axis: padded, masked
OPTIMIZERS = {"sgd": ("SGD", {}), "momentum": ("SGD", {"momentum": 0.9}),
              "adam": ("Adam", {}), "rmsprop": ("RMSprop", {}), "adagrad": ("Adagrad", {})}
# (mesh, model, optimizer, steps_per_execution): every shape two or three times, every
# optimizer three or four, every steps_per_execution three or four, every model three.
ENGINES = [((1, 1), "dense", "sgd", 1), ((1, 2), "embedding", "adam", 3),
           ((2, 1), "embedding", "adam", 7), ((2, 2), "embedding", "adam", 10),
           ((1, 4), "batchnorm", "momentum", 3), ((4, 1), "batchnorm", "rmsprop", 7),
           ((2, 2), "lstm", "adagrad", 1), ((1, 2), "gru", "rmsprop", 10),
           ((2, 1), "dense", "momentum", 3), ((1, 4), "lstm", "adam", 7),
           ((4, 1), "gru", "sgd", 10), ((1, 1), "batchnorm", "adagrad", 10),
           ((2, 2), "dense", "rmsprop", 1), ((1, 2), "lstm", "momentum", 7),
           ((2, 1), "gru", "adagrad", 3)]


def build(kind: str):
  """A seeded functional model on mesh_cases' features ``color`` (int64 ids) and ``x``;
  ``embedding`` is mesh_cases' parity model."""
  if kind == "embedding":
    return mesh_cases.build_model()
  import tf_keras  # pylint: disable=g-import-not-at-top
  layers, init = tf_keras.layers, tf_keras.initializers
  color = tf_keras.Input((1,), dtype="int64", name="color")
  x = tf_keras.Input((1,), dtype="float32", name="x")
  dense = lambda units, seed, **kw: layers.Dense(  # pylint: disable=unnecessary-lambda-assignment
      units, kernel_initializer=init.GlorotUniform(seed=seed), **kw)
  if kind == "dense":  # Two Dense branches, one per feature, concatenated.
    h = layers.Concatenate()([dense(4, 11, activation="relu")(tf_keras.layers.Lambda(
        lambda c: tf_keras.backend.cast(c, "float32"))(color)), dense(4, 12)(x)])
  else:
    e = layers.Flatten()(layers.Embedding(mesh_cases.VOCAB + 1, 4, embeddings_initializer=
                                          init.RandomUniform(seed=13))(color))
    h = dense(8, 14)(layers.Concatenate()([e, x]))
    if kind == "batchnorm":
      h = layers.Activation("relu")(layers.BatchNormalization()(h))
    elif kind in ("lstm", "gru"):  # A 3-step sequence from the hidden layer.
      cell = {"lstm": layers.LSTM, "gru": layers.GRU}[kind]
      h = cell(4, unroll=True, kernel_initializer=init.GlorotUniform(seed=15),
               recurrent_initializer=init.Orthogonal(seed=16))(layers.RepeatVector(3)(h))
    else:
      raise ValueError(f"model: one of dense, embedding, batchnorm, lstm, gru. Received: {kind!r}")
  out = dense(3, 17, name="head")(h)
  return tf_keras.Model({"color": color, "x": x}, out)


def make_optimizer(name: str):
  import tf_keras  # pylint: disable=g-import-not-at-top
  cls, kwargs = OPTIMIZERS[name]
  return getattr(tf_keras.optimizers, cls)(mesh_cases.LR, **kwargs)


class Reference:
  """One device, plain tf_keras ``fit``, one compiled model trained part by part."""

  def __init__(self, kind: str, optimizer: str):
    self.model = build(kind)
    self.model.compile(optimizer=make_optimizer(optimizer), loss=mesh_cases.loss_fn())

  def train(self, part):
    """Each step's logged loss (the running mean over this ``fit`` call)."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tf_keras  # pylint: disable=g-import-not-at-top
    logged = []
    log = tf_keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: logged.append(float(logs["loss"])))
    self.model.fit({k: np.concatenate([f[k] for f, _ in part]) for k in part[0][0]},
                   np.concatenate([y for _, y in part]), batch_size=mesh_cases.GLOBAL_BATCH,
                   epochs=1, shuffle=False, verbose=0, callbacks=[log])
    return logged


class Engine:
  """A MeshTrainer and its ``fit`` reference, with the largest differences seen."""

  def __init__(self, mesh, kind: str, optimizer: str, steps_per_execution: int):
    from tfx_parallel.components.distributed_trainer import optimizers  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
    self.where = {"mesh": "x".join(map(str, mesh)), "model": kind, "optimizer": optimizer,
                  "steps_per_execution": steps_per_execution}
    self.k = steps_per_execution
    self.reference = Reference(kind, optimizer)
    self.trainer = mesh_runtime.MeshTrainer(
        lambda: build(kind), mesh_shape=mesh, rules=None, loss_fn=mesh_cases.loss_fn(),
        optimizer=lambda m: optimizers.on_mesh(make_optimizer(optimizer), m, "bench"),
        global_batch=mesh_cases.GLOBAL_BATCH, module_name="parity")
    self.loss_diff = self.weight_diff = 0.0

  def train(self, part):
    import numpy as np  # pylint: disable=g-import-not-at-top
    tr, losses = self.trainer, []
    for i in range(0, len(part), self.k):
      chunk = part[i:i + self.k]
      losses += tr.fetch([tr.steps_async(
          {k: np.stack([f[k] for f, _ in chunk]) for k in chunk[0][0]},
          np.stack([y for _, y in chunk]))])
    running = np.cumsum(losses) / np.arange(1, len(losses) + 1)
    self.loss_diff = max(self.loss_diff, float(np.max(np.abs(
        running - np.array(self.reference.train(part))))))
    self.weight_diff = max(self.weight_diff, max(
        float(np.max(np.abs(a - b))) for a, b in
        zip(tr.full_weights(), self.reference.model.get_weights())))

  def evaluate(self, features, labels):
    import tf_keras  # pylint: disable=g-import-not-at-top
    per_example = tf_keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction=tf_keras.losses.Reduction.NONE)
    total, _, _ = self.trainer.evaluation_sums(per_example)(features, labels)
    expected = float(per_example(labels, self.reference.model(features, training=False))
                     .numpy().sum())
    self.loss_diff = max(self.loss_diff, abs(total - expected))

  def result(self) -> dict:
    return dict(self.where, loss_diff=self.loss_diff, weight_diff=self.weight_diff)


def main(combine: bool) -> dict:
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.split_cpu(4)
  if combine:  # DTensor's device reads it when it is made: make it now.
    os.environ[COMBINE_ENV] = "1"
    from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
    dtensor.device_name()
  start = time.time()
  data = mesh_cases.batches(steps=sum(PARTS))
  features, labels = mesh_cases.batches(steps=1, seed=9)[0]
  features = {k: v[:EVAL_ROWS] for k, v in features.items()}
  engines = [Engine(*e) for e in ENGINES]
  done = 0
  for n in PARTS:
    for engine in engines:
      engine.train(data[done:done + n])
    for engine in engines:
      engine.evaluate(features, labels[:EVAL_ROWS])
    done += n
  results = [e.result() for e in engines]
  return {"combine_all_reduces": combine, "seconds": round(time.time() - start, 1),
          "engines": results,
          "max_loss_diff": max(r["loss_diff"] for r in results),
          "max_weight_diff": max(r["weight_diff"] for r in results)}


def main_cli(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--combine-all-reduces", action="store_true",
                 help=f"start DTensor with {COMBINE_ENV}=1 (the project sets 0)")
  p.add_argument("--out", default=os.path.join(HERE, "mesh_parity.json"))
  a = p.parse_args(argv)
  result = main(a.combine_all_reduces)
  for r in result["engines"]:
    print(f"{r['mesh']:>3} {r['model']:<9} {r['optimizer']:<8} k={r['steps_per_execution']:<2} "
          f"loss {r['loss_diff']:.2e}  weights {r['weight_diff']:.2e}")
  print(f"max: loss {result['max_loss_diff']:.2e}  weights {result['max_weight_diff']:.2e}  "
        f"(all-reduce combining {'on' if a.combine_all_reduces else 'off'}, "
        f"{result['seconds']} s)")
  with open(a.out, "w") as f:
    json.dump(result, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main_cli())
