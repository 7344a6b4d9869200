"""Six mesh trainers, one after another, in one process (issue #49 item 3).

``python tests/many_meshes_case.py`` splits the CPU into 4 logical devices and builds,
trains and evaluates one ``MeshTrainer`` after another: meshes 1x2, 2x1 and 1x4, hidden
widths 8, 12 and 16, Adam and SGD. Each trains 5 steps as executions of 3 then 2 (two
step functions per trainer) and evaluates 7 rows (padded on a 2-row batch axis). The
same model, optimizer and batches go through plain tf_keras ``fit`` on one device for
reference. Prints one ``RESULT{json}`` line: per trainer its losses, weights, evaluation
sums and the reference's, and the loop ops its functions hold; or the error it stopped
on.

Before the fix every trainer's step held a ``tf.while_loop``; DTensor's MLIR pipeline
turns a loop back into functions named per compiled module
(region_control_flow_to_functional.cc: ``GetUniqueName(op) + "_body"``) and registers
them process-wide, so trainers built one after another collided now and then: "Cannot
add function 'while4_body' because a different function with the same name already
exists".
"""
import json

import mesh_cases
from tfx_parallel.components.common import tfenv

# (mesh, hidden width, optimizer)
TRAINERS = [((1, 2), 8, "adam"), ((2, 1), 12, "adam"), ((1, 4), 16, "sgd"),
            ((1, 2), 16, "sgd"), ((2, 1), 8, "sgd"), ((1, 4), 12, "adam")]
EVAL_ROWS = 7


def build(width: int):
  """mesh_cases' parity model with one hidden layer of ``width``, seeded."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  init = tf_keras.initializers
  color = tf_keras.Input((1,), dtype="int64", name="color")
  x = tf_keras.Input((1,), dtype="float32", name="x")
  e = tf_keras.layers.Embedding(mesh_cases.VOCAB + 1, 4, name="color_embedding",
                                embeddings_initializer=init.RandomUniform(seed=1))(color)
  h = tf_keras.layers.Concatenate()([tf_keras.layers.Flatten()(e), x])
  h = tf_keras.layers.Dense(width, activation="relu", name="hidden",
                            kernel_initializer=init.GlorotUniform(seed=2))(h)
  out = tf_keras.layers.Dense(3, name="head", kernel_initializer=init.GlorotUniform(seed=4))(h)
  return tf_keras.Model({"color": color, "x": x}, out)


def loop_ops(functions) -> list:
  """The names of the loop ops the traces of ``functions`` hold, nested functions too."""
  out = []
  for fn in functions:
    for concrete in fn._list_all_concrete_functions():  # pylint: disable=protected-access
      graphs = [concrete.graph] + [f.graph for f in concrete.graph._functions.values()  # pylint: disable=protected-access
                                   if hasattr(f, "graph")]
      out += [op.name for g in graphs for op in g.get_operations()
              if op.type in ("While", "StatelessWhile")]
  return out


def run(mesh, width: int, optimizer: str) -> dict:
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
  data = mesh_cases.batches()
  ref, hist = mesh_cases.reference(optimizer, data, lambda: build(width))
  tr = mesh_runtime.MeshTrainer(lambda: build(width), mesh_shape=mesh, rules=None,
                                loss_fn=mesh_cases.loss_fn(), optimizer=optimizer,
                                learning_rate=mesh_cases.LR,
                                global_batch=mesh_cases.GLOBAL_BATCH, module_name="many")
  losses = []
  for chunk in (data[:3], data[3:]):
    losses += tr.fetch([tr.steps_async(
        {k: np.stack([f[k] for f, _ in chunk]) for k in chunk[0][0]},
        np.stack([y for _, y in chunk]))])
  per_example = tf_keras.losses.SparseCategoricalCrossentropy(
      from_logits=True, reduction=tf_keras.losses.Reduction.NONE)
  features, labels = mesh_cases.batches(steps=1, seed=9)[0]
  features = {k: v[:EVAL_ROWS] for k, v in features.items()}
  labels = labels[:EVAL_ROWS]
  evaluate = tr.evaluation_sums(per_example)
  total, _, count = evaluate(features, labels)
  reference_values = per_example(labels, ref(features, training=False)).numpy()
  return {"losses": losses, "reference_mean_loss": hist.history["loss"][-1],
          "weights": [w.tolist() for w in tr.full_weights()],
          "reference": [w.tolist() for w in ref.get_weights()],
          "eval": [total, count], "reference_eval": [float(reference_values.sum()),
                                                      int(reference_values.size)],
          "loop_ops": loop_ops(list(tr._train_fns.values())),  # pylint: disable=protected-access
          "traces": len(tr._train_fns)}  # pylint: disable=protected-access


def main():
  tfenv.split_cpu(4)
  runs = []
  for mesh, width, optimizer in TRAINERS:
    where = {"mesh": list(mesh), "width": width, "optimizer": optimizer}
    try:
      runs.append(dict(run(mesh, width, optimizer), **where))
    except Exception as e:  # pylint: disable=broad-except
      runs.append(dict(where, error=f"{type(e).__name__}: {e}"))
  return {"runs": runs}


if __name__ == "__main__":
  print("RESULT" + json.dumps(main()))
