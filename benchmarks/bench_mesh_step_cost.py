"""What a mesh step costs, first call and steady state, for comparing two commits.

    python benchmarks/bench_mesh_step_cost.py [--shapes 1x1,2x1,1x2] [--calls 30]
        [--engine [--steps-per-epoch N] | --input]

Issue #49 item 3 wrote the k steps of one DTensor call out in Python (one traced function,
no ``tf.while_loop``). That trades a loop the compiler sees once for k copies of the step,
so the first call (trace, DTensor's MLIR lowering, the first k steps) can grow, and the
steady step can change too. This measures both on the code of the checkout it runs from,
so this file and profile_mesh_step.py, copied beside each other and run by two checkouts'
interpreters, compare them (``--label`` names the run in the output).

Per mesh shape, in one process split into 2 logical CPU devices: profile_mesh_step.py's
model and batches, the built-in mlp (hidden [256, 256], 16 float features), Adam 0.001, global batch 256, k = 10 steps per
call (``MeshTrainer.steps_async`` on k stacked batches, as MeshEngine runs
steps_per_execution 10). ``first_call_s``: the first call, fetched (trace, compile, the
first k steps); then ``--calls`` calls, each fetched, as ms per step by wall time and by
this process's CPU time (``time.process_time``, the figure that other load changes
least). Prints one JSON line.

``--engine`` times ``MeshEngine.train`` instead, the run's own loop with its input
(the trainer calls above take batches stacked before the clock starts): the same model, optimizer,
batches and k through ``engines.MeshEngine`` (config steps_per_execution 10), fed the
per-step batch dataset as run/train.py feeds it, the executions cut where
engines/epochs.py says (``--steps-per-epoch``; default one epoch, every execution k
steps). ``first_call_s`` is then a first ``train`` of 3 executions (traces and warm-up);
the figures are one ``train`` of ``--calls`` executions from step 0 again (its input
taken, stacked and packed, the steps run, the losses read, the callbacks driven).

``--input`` times only the input of ``--calls`` executions of k batches, no mesh, by CPU
and wall ms per execution, each form on a fresh prefetched iterator: ``python_stack``,
k ``next`` calls and ``tf.stack`` per tensor on the main thread (MeshEngine.train at
28d364a); ``python_next_only``, the k ``next`` calls alone; ``tf_data``,
``mesh_engine.stacked_executions`` (tf.data stacks, one ``next`` per execution).
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import profile_mesh_step  # pylint: disable=g-import-not-at-top,wrong-import-position
from profile_mesh_step import BATCH, FEATURES, HIDDEN, K  # pylint: disable=g-import-not-at-top,wrong-import-position


def measure(shape, calls: int) -> dict:
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.models import mlp  # pylint: disable=g-import-not-at-top
  spec, ds = profile_mesh_step.model_and_batches()
  it = iter(ds.batch(K))
  tr = mesh_runtime.MeshTrainer(lambda: mlp.build_model(spec), mesh_shape=shape, rules=None,
                                loss_fn=tf_keras.losses.MeanSquaredError(), optimizer="adam",
                                learning_rate=0.001, global_batch=BATCH)
  batches = [next(it) for _ in range(calls + 3)]
  t, c = time.perf_counter(), time.process_time()
  tr.fetch([tr.steps_async(*batches[0])])
  first_wall, first_cpu = time.perf_counter() - t, time.process_time() - c
  for b in batches[1:3]:  # warm-up
    tr.fetch([tr.steps_async(*b)])
  t, c = time.perf_counter(), time.process_time()
  for b in batches[3:]:
    tr.fetch([tr.steps_async(*b)])
  wall, cpu = time.perf_counter() - t, time.process_time() - c
  return {"first_call_s": round(first_wall, 3), "first_call_cpu_s": round(first_cpu, 3),
          "ms_per_step": round(1000 * wall / (calls * K), 3),
          "cpu_ms_per_step": round(1000 * cpu / (calls * K), 3)}


def measure_engine(shape, calls: int, steps_per_epoch=None) -> dict:
  """``MeshEngine.train`` over ``calls`` executions (module docstring, ``--engine``)."""
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_engine  # pylint: disable=g-import-not-at-top
  spec, ds = profile_mesh_step.model_and_batches()
  config = TrainerConfig(layout="mesh", mesh=shape, model="mlp", optimizer="adam",
                         learning_rate=0.001, batch_size=BATCH, hidden_units=tuple(HIDDEN),
                         steps_per_execution=K)
  engine = mesh_engine.MeshEngine(config, None, {})
  engine.build(user_module.load(None, None, "mlp"), spec)
  warm, steps = 3 * K, calls * K
  t, c = time.perf_counter(), time.process_time()
  engine.train(ds, 0, warm, [], steps_per_epoch and min(steps_per_epoch, warm))
  first_wall, first_cpu = time.perf_counter() - t, time.process_time() - c
  t, c = time.perf_counter(), time.process_time()
  engine.train(ds, 0, steps, [], steps_per_epoch)
  wall, cpu = time.perf_counter() - t, time.process_time() - c
  return {"first_call_s": round(first_wall, 3), "first_call_cpu_s": round(first_cpu, 3),
          "ms_per_step": round(1000 * wall / steps, 3),
          "cpu_ms_per_step": round(1000 * cpu / steps, 3)}


def measure_input(calls: int) -> dict:
  """The input forms of ``--input`` (module docstring), CPU and wall ms per execution."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import mesh_engine  # pylint: disable=g-import-not-at-top
  _, ds = profile_mesh_step.model_and_batches()
  warm = 3

  def python_stack():
    it = iter(ds.prefetch(K))
    return lambda: tf.nest.map_structure(lambda *t: tf.stack(t), *[next(it) for _ in range(K)])

  def python_next_only():
    it = iter(ds.prefetch(K))
    return lambda: [next(it) for _ in range(K)]

  def tf_data():
    it = iter(mesh_engine.stacked_executions(ds, [K] * (calls + warm), K).prefetch(1))
    return lambda: next(it)

  out = {}
  for form in (python_stack, python_next_only, tf_data):
    one = form()
    for _ in range(warm):
      one()
    t, c = time.perf_counter(), time.process_time()
    for _ in range(calls):
      one()
    out[form.__name__] = {"ms_per_execution": round(1000 * (time.perf_counter() - t) / calls, 3),
                          "cpu_ms_per_execution": round(
                              1000 * (time.process_time() - c) / calls, 3)}
  return out


def main(shapes, calls: int, label: str, engine: bool = False,
         steps_per_epoch=None, input_only: bool = False) -> dict:
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()
  tfenv.split_cpu(max(a * b for a, b in shapes))
  out = {"label": label, "k": K, "calls": calls,
         "model": f"mlp {HIDDEN}, {FEATURES} features, batch {BATCH}, adam"}
  if input_only:
    out["input"] = measure_input(calls)
    return out
  if engine:
    out["loop"] = f"MeshEngine.train, steps_per_epoch {steps_per_epoch or 'all'}"
  for shape in shapes:
    out[f"{shape[0]}x{shape[1]}"] = (measure_engine(shape, calls, steps_per_epoch) if engine
                                     else measure(shape, calls))
  return out


if __name__ == "__main__":
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--shapes", default="1x1,2x1,1x2")
  p.add_argument("--calls", type=int, default=30)
  p.add_argument("--label", default="")
  p.add_argument("--engine", action="store_true",
                 help="time MeshEngine.train, input included (module docstring)")
  p.add_argument("--steps-per-epoch", type=int, default=None)
  p.add_argument("--input", action="store_true",
                 help="time only the input of the executions, no mesh (module docstring)")
  a = p.parse_args()
  print(json.dumps(main([tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")],
                        a.calls, a.label, a.engine, a.steps_per_epoch, a.input)))
