"""Every user hook on every layout, through the run's own step engines (engines/__init__.py).

``python tests/hook_cases.py fit`` trains each module of tests/hook_modules/ with the fit
engine as ``single`` and as ``mirrored`` x2 (2 logical CPUs); ``python tests/hook_cases.py
mesh`` with the mesh engine on meshes 1x1, 1x2, 2x1 and 2x2 (4 logical CPUs; DTensor and
MirroredStrategy cannot share a process). Same data, STEPS steps of GLOBAL_BATCH rows.
Prints one ``RESULT{json}``: final weights and the optimizer's class/config per hook and
layout (on the meshes, each variable's layout and per-device block, read back from the
DTensors), or the error a layout raised before training; the loss of every step as the
engine's ``step_losses`` gives it, and (the fit process) the same steps' losses from a
manual GradientTape loop on one device, without fit or an engine.
"""
import json
import sys

from tfx_parallel.components.common import tfenv

HOOKS = ("custom_loss", "sgd_momentum", "adam_schedule", "layout_rule")
REFUSED = ("legacy_optimizer",)
FIT_LAYOUTS = {"single": {"layout": "single"}, "mirrored x2": {"layout": "mirrored", "devices": 2}}
MESHES = ((1, 1), (1, 2), (2, 1), (2, 2))
FEATURES, GLOBAL_BATCH, STEPS = 4, 8, 6
EXECUTION = 3  # steps_per_execution: two executions of 3 steps.


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
  from tfx_parallel.components.distributed_trainer.engines import factory as engines
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config = TrainerConfig(module_path=module_path(hook), batch_size=GLOBAL_BATCH, steps=STEPS,
                         optimizer="sgd", learning_rate=0.05, log_every=STEPS,
                         steps_per_execution=EXECUTION, checkpoint_every=0,
                         **layout).validate()
  plan = devices.plan(config.layout, config.devices, config.mesh, "cpu", 0, GLOBAL_BATCH)
  engine = engines.create(config, plan, {})
  module = user_module.load(module_path=config.module_path)
  try:
    engine.build(module, spec())
  except ValueError as e:
    return {"error": f"{type(e).__name__}: {e}"}
  losses = loss_log(engine)
  engine.train(engine.dataset(lambda *_: dataset(), 0), 0, STEPS, [losses])
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
          "loss": type(engine.loss).__name__ + ":" + getattr(engine.loss, "name", ""),
          "step_losses": losses.exact, "keras_logs": losses.keras}


def loss_log(engine):
  """A callback that reads the engine's exact losses of each execution's steps."""
  import tf_keras  # pylint: disable=g-import-not-at-top

  class _LossLog(tf_keras.callbacks.Callback):

    def __init__(self):
      super().__init__()
      self.exact, self.keras, self.count = [], [], 0

    def on_train_batch_end(self, batch, logs=None):
      n, self.count = batch + 1 - self.count, batch + 1
      self.exact += [float(x) for x in engine.step_losses(n)]
      self.keras.append(float(logs["loss"]))  # fit's running mean, once per execution
  return _LossLog()


def manual_losses(hook: str) -> list:
  """Each step's loss from a plain GradientTape loop on one device: the hook's model
  (seeded initialisers), loss and optimizer, the same batches; no fit, no engine."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  module = user_module.load(module_path=module_path(hook))
  tf_keras.utils.set_random_seed(0)
  model = user_module.build(module, spec())
  loss_fn = user_module.make_loss(module, spec())
  optimizer = user_module.make_optimizer(module, spec(), "sgd", 0.05)
  out = []
  for x, y in dataset():
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
      if model.losses:
        loss += tf.add_n(model.losses)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    out.append(float(loss))
  return out


def main(which: str) -> dict:
  if which == "fit":
    tfenv.split_cpu(2)
    layouts = FIT_LAYOUTS
  else:
    tfenv.split_cpu(4)
    layouts = {f"mesh {b}x{m}": {"layout": "mesh", "mesh": (b, m)} for b, m in MESHES}
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.experimental.enable_tensor_float_32_execution(False)
  out = {hook: {name: train(hook, layout) for name, layout in layouts.items()}
         for hook in HOOKS + REFUSED}
  if which == "fit":
    out["manual"] = {hook: manual_losses(hook) for hook in HOOKS}
  return out


if __name__ == "__main__":
  print("RESULT" + json.dumps(main(sys.argv[1])))
