"""Many mesh engines, one after another, in one process (issue #49 item 3).

``python tests/many_meshes_case.py`` splits the CPU into 4 logical devices and trains
the hook modules' model (tests/hook_cases.py: same data, 6 steps in executions of 3)
with one mesh engine after another: eight engines of four meshes and four
optimizers and losses. Prints one ``RESULT{json}`` line: each
engine's step losses, or the error it stopped on.

Each engine traces its own step function, which holds a ``tf.while_loop``; DTensor's
MLIR pipeline turns the loop's body back into a function named after the loop's op
(region_control_flow_to_functional.cc) and registers it in the process-wide function
library, so two engines whose loops had the same op name could collide: "Cannot add
function 'while4_body' because a different function with the same name already
exists".
"""
import json

import hook_cases
from tfx_parallel.components.common import tfenv

# (hook module, mesh): eight engines; SGD (custom_loss), SGD with momentum, Adam with
# a schedule, SGD with a layout rule; four meshes, each met more than once.
ENGINES = [("custom_loss", (1, 1)), ("custom_loss", (1, 2)), ("custom_loss", (2, 1)),
           ("custom_loss", (2, 2)), ("sgd_momentum", (1, 1)), ("sgd_momentum", (1, 2)),
           ("adam_schedule", (2, 1)), ("layout_rule", (2, 2))]


def train(hook: str, mesh) -> dict:
  """hook_cases.train's mesh run (the run's own MeshEngine), with the names of the loop
  ops its step functions hold."""
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.engines import factory  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.plan import devices  # pylint: disable=g-import-not-at-top
  config = TrainerConfig(module_path=hook_cases.module_path(hook), layout="mesh", mesh=mesh,
                         batch_size=hook_cases.GLOBAL_BATCH, steps=hook_cases.STEPS,
                         optimizer="sgd", learning_rate=0.05, log_every=hook_cases.STEPS,
                         steps_per_execution=hook_cases.EXECUTION,
                         checkpoint_every=0).validate()
  plan = devices.plan("mesh", config.devices, config.mesh, "cpu", 0, hook_cases.GLOBAL_BATCH)
  engine = factory.create(config, plan, {})
  engine.build(user_module.load(module_path=config.module_path), hook_cases.spec())
  losses = hook_cases.loss_log(engine)
  engine.train(engine.dataset(lambda *_: hook_cases.dataset(), 0), 0, hook_cases.STEPS,
               [losses])
  loops = sorted(op.name for fn in engine.trainer._train_fns.values()  # pylint: disable=protected-access
                 for concrete in fn._list_all_concrete_functions()  # pylint: disable=protected-access
                 for op in concrete.graph.get_operations()
                 if op.type in ("While", "StatelessWhile"))
  return {"losses": losses.exact, "loop_ops": loops}


def main():
  tfenv.split_cpu(4)
  runs = []
  for hook, mesh in ENGINES:
    try:
      runs.append(dict(train(hook, mesh), hook=hook, mesh=list(mesh)))
    except Exception as e:  # pylint: disable=broad-except
      runs.append({"hook": hook, "mesh": list(mesh), "error": f"{type(e).__name__}: {e}"})
  return {"runs": runs}


if __name__ == "__main__":
  print("RESULT" + json.dumps(main()))
