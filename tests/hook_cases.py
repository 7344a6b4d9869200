"""Every user hook on every layout, through the run's own step engines (engines/__init__.py).

``python tests/hook_cases.py fit`` trains each module of tests/hook_modules/ with the fit
engine as ``single`` and as ``mirrored`` x2 (2 logical CPUs); ``python tests/hook_cases.py
mesh`` with the mesh engine on meshes 1x1, 1x2, 2x1 and 2x2 (4 logical CPUs; DTensor and
MirroredStrategy cannot share a process). Same data, STEPS steps of GLOBAL_BATCH rows.
Prints one ``RESULT{json}``: final weights and the optimizer's class/config per hook and
layout (on the meshes, each variable's layout and per-device block, read back from the
DTensors), or the error a layout raised before training.
"""
import json
import sys

from tfx_parallel.components.common import tfenv

HOOKS = ("custom_loss", "sgd_momentum", "adam_schedule", "layout_rule")
REFUSED = ("legacy_optimizer",)
FIT_LAYOUTS = {"single": {"layout": "single"}, "mirrored x2": {"layout": "mirrored", "devices": 2}}
MESHES = ((1, 1), (1, 2), (2, 1), (2, 2))
FEATURES, GLOBAL_BATCH, STEPS = 4, 8, 6


def module_path(hook: str) -> str:
  """The hook's module, importable from tests/ (this script's directory)."""
  return f"hook_modules.{hook}"


def spec():
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  return ms.ModelSpec(features=tuple(ms.FeatureSpec(f"x{i}", ms.FLOAT32)
                                     for i in range(FEATURES)), label_key="y")


def dataset():
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.normal(size=(GLOBAL_BATCH * STEPS, FEATURES)).astype(np.float32)
  y = (np.sin(x) @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
  features = {f"x{i}": x[:, i:i + 1] for i in range(FEATURES)}
  return tf.data.Dataset.from_tensor_slices((features, y)).batch(GLOBAL_BATCH,
                                                                  drop_remainder=True)


def train(hook: str, layout: dict) -> dict:
  from tfx_parallel.components.distributed_trainer.plan import devices  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import engines, user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config = TrainerConfig(module_path=module_path(hook), batch_size=GLOBAL_BATCH, steps=STEPS,
                         optimizer="sgd", learning_rate=0.05, log_every=STEPS,
                         checkpoint_every=0, **layout).validate()
  plan = devices.plan(config.layout, config.devices, config.mesh, "cpu", 0, GLOBAL_BATCH)
  engine = engines.create(config, plan, {})
  module = user_module.load(module_path=config.module_path)
  try:
    engine.build(module, spec())
  except ValueError as e:
    return {"error": f"{type(e).__name__}: {e}"}
  engine.train(engine.dataset(lambda *_: dataset(), 0), 0, STEPS, [])
  opt = engine.optimizer
  lr = opt.learning_rate  # A tensor (schedules), a variable, or a MirroredVariable.
  lr = lr.numpy() if hasattr(lr, "values") else lr
  out = {}
  if layout.get("layout") == "mesh":  # Where each variable landed, read from the DTensors.
    out = {"layouts": {k: list(v) for k, v in engine.trainer.layouts().items()},
           "shard_shapes": {k: list(v) for k, v in engine.trainer.shard_shapes().items()}}
  return {**out, "weights": [w.tolist() for w in engine.weights()],
          "recorded_optimizer": type(engine.written_optimizer).__name__,
          "optimizer": type(opt).__name__,
          "learning_rate": float(lr),  # after STEPS steps (schedules decay)
          "iterations": int(opt.iterations.numpy()),
          "loss": type(engine.loss).__name__ + ":" + getattr(engine.loss, "name", "")}


def main(which: str) -> dict:
  if which == "fit":
    tfenv.split_cpu(2)
    layouts = FIT_LAYOUTS
  else:
    tfenv.split_cpu(4)
    layouts = {f"mesh {b}x{m}": {"layout": "mesh", "mesh": (b, m)} for b, m in MESHES}
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.experimental.enable_tensor_float_32_execution(False)
  return {hook: {name: train(hook, layout) for name, layout in layouts.items()}
          for hook in HOOKS + REFUSED}


if __name__ == "__main__":
  print("RESULT" + json.dumps(main(sys.argv[1])))
