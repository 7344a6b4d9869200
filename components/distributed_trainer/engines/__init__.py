"""The two step engines of a training run (run/train.py owns the run itself).

An engine builds the user's model, loss and optimizer for its layout, trains N steps
while driving the run's tf_keras callbacks at every execution boundary, and hands back
weights and state:

* :class:`FitEngine`: ``single``, ``mirrored``, ``multi_worker``; tf_keras ``model.fit``
  under a ``tf.distribute`` strategy (strategies.py), or none.
* :class:`MeshEngine`: ``mesh``; ``mesh_runtime.MeshTrainer`` on a DTensor (batch, model)
  mesh, with the layout rules of sharding.py. Its loop reports the running mean loss
  ``fit`` reports and fetches the loss from the devices once per execution
  (``steps_per_execution``).

Both take the loss from ``user_module.make_loss`` and the optimizer from the one
factory ``user_module.make_optimizer`` (optimizers.py; on the mesh, built with
``mesh=``). Their common surface: ``model``, ``optimizer``, ``loss``, ``chief``,
``num_workers``, ``describe()``, ``variable_record()``, ``dataset(make, start_step)``,
``evaluator(eval_ds)``, ``train(dataset, start_step, total, callbacks)``, ``weights()``,
``state()`` / ``load_state()`` (layout-independent: model weights in
``model.get_weights()`` order, optimizer variables in ``optimizer.variables`` order).
"""
import contextlib
import math
from typing import Callable, Dict, List, Tuple


class FitEngine:
  """tf_keras ``fit`` under the layout's strategy (None for single)."""

  def __init__(self, config, plan, device_record: dict):
    """Creates the strategy: first thing after the devices are configured (multi_worker
    configures collective ops, which must precede any other use of TensorFlow)."""
    from tfx_parallel.components.distributed_trainer.engines import strategies  # pylint: disable=g-import-not-at-top
    self.config, self.device_record = config, device_record
    self.layout = config.layout
    self.strategy = strategies.make_strategy(config.layout, config.devices, plan.collective)
    self.chief, self.num_workers, self.worker_index = True, 1, 0
    if config.layout == "multi_worker":
      task_type, self.worker_index, self.num_workers = strategies.worker_info(self.strategy)
      self.chief = strategies.is_chief(task_type, self.worker_index)
    self.steps_per_execution = config.execution_steps()

  def build(self, module, spec):
    """The user's model, loss and optimizer under the strategy, compiled."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
    config = self.config
    tf_keras.utils.set_random_seed(config.seed)
    with self.scope():
      self.model = user_module.build(module, spec)
      self.loss = user_module.make_loss(module, spec)
      self.optimizer = user_module.make_optimizer(module, spec, config.optimizer,
                                                  config.learning_rate)
      self.model.compile(optimizer=self.optimizer, loss=self.loss,
                         steps_per_execution=self.steps_per_execution)

  def scope(self):
    return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

  def describe(self) -> dict:
    from tfx_parallel.components.distributed_trainer.engines import strategies  # pylint: disable=g-import-not-at-top
    return dict(strategies.describe(self.layout, self.strategy, self.model.weights),
                **self.device_record)

  def variable_record(self) -> Tuple[Dict[str, dict], List[str], str]:
    """(per-variable splits, replicated-by-default paths, console text): whole copies."""
    return {}, [], ""

  def dataset(self, make: Callable[[int, int, int, int], object], start_step: int):
    """The train dataset: ``make(batch, num_shards, index, skip_batches)``."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    batch = self.config.batch_size
    if self.layout != "multi_worker":
      return make(batch, 1, 0, start_step)

    def fn(ctx: tf.distribute.InputContext):
      per_pipeline = ctx.num_replicas_in_sync // ctx.num_input_pipelines
      return make(ctx.get_per_replica_batch_size(batch), ctx.num_input_pipelines,
                  ctx.input_pipeline_id, start_step * per_pipeline)
    return self.strategy.distribute_datasets_from_function(fn)

  def evaluator(self, eval_ds) -> Callable[[], float]:
    from tfx_parallel.components.distributed_trainer.run import callbacks as cb  # pylint: disable=g-import-not-at-top
    return cb.make_evaluator(self.model, self.loss, eval_ds)

  def train(self, dataset, start_step: int, total: int, callbacks: list):
    if total > start_step:
      self.model.fit(dataset, epochs=1, steps_per_epoch=total - start_step,
                     callbacks=callbacks, verbose=0)

  def weights(self) -> list:
    return self.model.get_weights()

  def state(self) -> Tuple[list, Dict[str, object]]:
    from tfx_parallel.components.distributed_trainer.engines import optimizers  # pylint: disable=g-import-not-at-top
    with self.scope():
      self.optimizer.build(self.model.trainable_variables)
    return self.model.get_weights(), dict(zip(optimizers.variable_names(self.optimizer),
                                              [v.numpy() for v in self.optimizer.variables]))

  def load_state(self, weights: list, optimizer_state: Dict[str, object]):
    from tfx_parallel.components.distributed_trainer.engines import optimizers  # pylint: disable=g-import-not-at-top
    with self.scope():
      self.model.set_weights(weights)
      self.optimizer.build(self.model.trainable_variables)
      self.optimizer.set_weights(optimizers.match_state(self.optimizer, optimizer_state))


class MeshEngine:
  """``MeshTrainer`` on the (batch, model) mesh of ``config.mesh``."""

  def __init__(self, config, plan, device_record: dict):
    del plan
    self.config, self.device_record = config, device_record
    self.layout = "mesh"
    self.chief, self.num_workers, self.worker_index = True, 1, 0
    self.steps_per_execution = config.execution_steps()

  def build(self, module, spec):
    """Places the user's model on the mesh (probe, rules, DVariables) with the loss and
    the optimizer built with ``mesh=``; a rule or optimizer that cannot apply fails here,
    before the first step."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer.engines import mesh_runtime  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
    config = self.config
    self.module, self.spec = module, spec
    self.loss = user_module.make_loss(module, spec)
    tf_keras.utils.set_random_seed(config.seed)
    self.trainer = mesh_runtime.MeshTrainer(
        lambda: user_module.build(module, spec), mesh_shape=tuple(config.mesh),
        rules=module.layout_rules(spec) if module.layout_rules else None,
        loss_fn=self.loss,
        optimizer=lambda mesh: user_module.make_optimizer(
            module, spec, config.optimizer, config.learning_rate, mesh=mesh),
        global_batch=config.batch_size, module_name=module.name)
    self.model, self.optimizer = self.trainer.model, self.trainer.optimizer

  def describe(self) -> dict:
    b, m = self.trainer.mesh_shape
    return dict({"layout": "mesh", "replicas": b, "mesh_shape": [b, m],
                 "devices": list(self.trainer.mesh.local_devices())}, **self.device_record)

  def variable_record(self) -> Tuple[Dict[str, dict], List[str], str]:
    """(per-variable splits, variables the default rules left whole, console text)."""
    from tfx_parallel.components.distributed_trainer.engines import sharding  # pylint: disable=g-import-not-at-top
    m = self.trainer.mesh_shape[1]
    splits = sharding.split_record(self.trainer.shardings, self.trainer.shard_shapes(), m)
    return (splits, [v.path for v in self.trainer.replicated],
            sharding.describe_splits(splits, self.trainer.global_shapes()))

  def dataset(self, make, start_step: int):
    return make(self.config.batch_size, 1, 0, start_step)

  def evaluator(self, eval_ds) -> Callable[[], float]:
    """Evaluation on a plain copy (outside the mesh) that takes the gathered weights."""
    from tfx_parallel.components.distributed_trainer.run import callbacks as cb  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
    plain = user_module.build(self.module, self.spec)
    evaluate = cb.make_evaluator(plain, self.loss, eval_ds)

    def eval_loss() -> float:
      plain.set_weights(self.weights())
      return evaluate()
    return eval_loss

  def train(self, dataset, start_step: int, total: int, callbacks: list):
    """Steps until ``total`` (or a callback sets ``model.stop_training``). The callbacks
    see, as under ``fit``, the batch index and the running mean loss since the start, at
    every ``steps_per_execution`` steps; the loss leaves the devices only then."""
    model = self.model
    model.stop_training = False
    for c in callbacks:
      c.set_model(model)
    k = self.steps_per_execution
    pending, count, mean = [], 0, 0.0
    if total > start_step:
      for features, labels in dataset:
        pending.append(self.trainer.step_async(features, labels))
        count += 1
        if count % k and start_step + count < total:
          continue
        losses, pending = self.trainer.fetch(pending), []
        for n, loss in enumerate(losses, count - len(losses) + 1):
          mean = mean + (loss - mean) / n if math.isfinite(loss) else loss
        for c in callbacks:
          c.on_train_batch_end(count - 1, {"loss": mean})
        if start_step + count >= total or model.stop_training:
          break
    for c in callbacks:
      c.on_train_end()

  def weights(self) -> list:
    return self.trainer.full_weights()

  def state(self) -> Tuple[list, Dict[str, object]]:
    full = self.trainer.state()  # model/<path> in model.weights order, then optimizer/<name>
    prefix = "optimizer/"
    return ([v for k, v in full.items() if not k.startswith(prefix)],
            {k[len(prefix):]: v for k, v in full.items() if k.startswith(prefix)})

  def load_state(self, weights: list, optimizer_state: Dict[str, object]):
    from tfx_parallel.components.distributed_trainer.engines import optimizers  # pylint: disable=g-import-not-at-top
    values = optimizers.match_state(self.optimizer, optimizer_state)
    names = list(self.trainer.state())
    self.trainer.load_state(dict(zip(names, list(weights) + values)))


def create(config, plan, device_record: dict):
  """The engine of ``config.layout`` (then ``engine.build(module, spec)``)."""
  cls: type = MeshEngine if config.layout == "mesh" else FitEngine
  return cls(config, plan, device_record)
