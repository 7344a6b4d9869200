"""The parallel layouts: where parameters live and how one training step runs.

Every layout exposes the same small interface (`Runtime`), so the training loop,
checkpointing and export are layout-independent:

* `build(values, slots)` places numpy parameter (and optimizer-slot) values;
* `distribute(dataset_fn)` turns a dataset factory into this layout's input;
* `step(batch, t)` runs one synchronous step and returns (loss, grad_norm);
* `gather()` returns every parameter and slot as full (unsharded) numpy arrays.
"""
import json
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tfx_parallel.components.distributed_trainer import model as model_lib
from tfx_parallel.components.distributed_trainer import optimizers

BATCH_AXIS, MODEL_AXIS = "batch", "model"


class Runtime:
  """Base: one device, plain variables (the `single` layout)."""
  name = "single"

  def __init__(self, specs: Sequence[model_lib.ParamSpec], optimizer: str, lr: float,
               global_batch: int):
    self.specs = list(specs)
    self.optimizer = optimizer
    self.lr = lr
    self.global_batch = global_batch
    self.params: List[tf.Variable] = []
    self.slots: Dict[str, List[tf.Variable]] = {}
    self._step_fn = None

  # --- description -------------------------------------------------------------
  replicas = 1
  mesh_shape: Tuple[int, int] = (1, 1)

  def devices(self) -> List[str]:
    return [d.name for d in tf.config.list_logical_devices("CPU")[:1]]

  def describe(self) -> dict:
    return {"layout": self.name, "replicas": self.replicas,
            "mesh_shape": list(self.mesh_shape), "devices": self.devices()}

  @property
  def is_chief(self) -> bool:
    return True

  # --- placement -----------------------------------------------------------------
  def _variable(self, value: np.ndarray, spec: model_lib.ParamSpec, name: str):
    return tf.Variable(value, name=name)

  def build(self, values: Dict[str, np.ndarray],
            slots: Optional[Dict[str, Dict[str, np.ndarray]]] = None):
    self.params = [self._variable(values[s.name], s, s.name) for s in self.specs]
    self.slots = {}
    for slot in optimizers.SLOTS[self.optimizer]:
      src = (slots or {}).get(slot) or {}
      self.slots[slot] = [
          self._variable(src.get(s.name, np.zeros(s.shape, np.float32)), s,
                         f"{s.name}_{slot}") for s in self.specs]
    self._step_fn = tf.function(self._step)

  def _value(self, v) -> np.ndarray:
    return v.numpy()

  def gather(self) -> Tuple[Dict[str, np.ndarray], Dict[str, Dict[str, np.ndarray]]]:
    values = {s.name: self._value(p) for s, p in zip(self.specs, self.params)}
    slots = {slot: {s.name: self._value(v) for s, v in zip(self.specs, vs)}
             for slot, vs in self.slots.items()}
    return values, slots

  # --- input and step --------------------------------------------------------------
  def distribute(self, dataset_fn: Callable[[int, int, int], tf.data.Dataset]):
    """dataset_fn(batch_size, num_shards, shard_index) -> dataset of (x, y)."""
    return dataset_fn(self.global_batch, 1, 0)

  def _grads(self, x, y, global_batch=None):
    with tf.GradientTape() as tape:
      loss = model_lib.mse(model_lib.forward(self.params, x), y, global_batch)
    return loss, tape.gradient(loss, self.params)

  def _step(self, batch, t):
    x, y = batch
    loss, grads = self._grads(x, y)
    optimizers.apply(self.optimizer, self.params, grads, self.slots, self.lr, t)
    return loss, tf.linalg.global_norm(grads)

  def step(self, batch, t: int) -> Tuple[float, float]:
    loss, norm = self._step_fn(batch, tf.constant(float(t)))
    return float(loss), float(norm)


class MirroredRuntime(Runtime):
  """Synchronous data parallelism with a tf.distribute strategy.

  Each replica computes the gradient of its share of the global-batch mean; the
  gradients are summed across replicas (all-reduce) and applied once, in
  cross-replica context, to every mirrored copy.
  """
  name = "mirrored"

  def __init__(self, strategy: tf.distribute.Strategy, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.strategy = strategy
    self.replicas = strategy.num_replicas_in_sync

  def devices(self) -> List[str]:
    return list(self.strategy.extended.worker_devices)

  def build(self, values, slots=None):
    with self.strategy.scope():
      super().build(values, slots)

  def distribute(self, dataset_fn):
    return self.strategy.experimental_distribute_dataset(dataset_fn(self.global_batch, 1, 0))

  def _step(self, batch, t):
    def replica_fn(x, y):
      return self._grads(x, y, self.global_batch)
    losses, grads = self.strategy.run(replica_fn, args=batch)
    loss = self.strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
    grads = [self.strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None)
             for g in grads]
    optimizers.apply(self.optimizer, self.params, grads, self.slots, self.lr, t)
    return loss, tf.linalg.global_norm(grads)


class MultiWorkerRuntime(MirroredRuntime):
  """MultiWorkerMirroredStrategy from TF_CONFIG; input sharded by FILE per worker."""
  name = "multi_worker"

  def __init__(self, strategy, *args, **kwargs):
    super().__init__(strategy, *args, **kwargs)
    resolver = strategy.cluster_resolver
    self.task_type, self.task_id = resolver.task_type, resolver.task_id
    self.num_workers = len(resolver.cluster_spec().as_dict().get("worker", [])) + len(
        resolver.cluster_spec().as_dict().get("chief", []))

  @property
  def is_chief(self) -> bool:
    return is_chief(self.task_type, self.task_id)

  def devices(self) -> List[str]:
    """Every worker's devices in the cluster (this process sees only its own)."""
    cluster = self.strategy.cluster_resolver.cluster_spec().as_dict()
    local = [d.split("/device:")[-1] for d in self.strategy.extended.worker_devices]
    return [f"/job:{job}/replica:0/task:{i}/device:{d}"
            for job in sorted(cluster) for i in range(len(cluster[job])) for d in local]

  def distribute(self, dataset_fn):
    def fn(ctx: tf.distribute.InputContext):
      return dataset_fn(ctx.get_per_replica_batch_size(self.global_batch),
                        ctx.num_input_pipelines, ctx.input_pipeline_id)
    return self.strategy.distribute_datasets_from_function(fn)


class MeshRuntime(Runtime):
  """A DTensor mesh of batch x model devices.

  Input rows are split over the batch axis (data parallel). For the linear model the
  feature columns are split over the model axis too (device (b, m) holds X_i for its
  W_i); for the MLP every model-axis device sees all features. Kernels follow
  `ParamSpec.sharding`.
  """
  name = "mesh"

  def __init__(self, mesh_shape: Tuple[int, int], device_type: str, *args, **kwargs):
    super().__init__(*args, **kwargs)
    from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
    self.dtensor = dtensor
    self.mesh_shape = tuple(mesh_shape)
    self.replicas = mesh_shape[0]
    n = mesh_shape[0] * mesh_shape[1]
    local = tf.config.list_logical_devices(device_type)
    if len(local) < n:
      raise ValueError(f"mesh: {mesh_shape[0]}x{mesh_shape[1]} needs {n} {device_type} "
                       f"devices, found {len(local)}")
    self.mesh = dtensor.create_mesh([(BATCH_AXIS, mesh_shape[0]), (MODEL_AXIS, mesh_shape[1])],
                                    devices=[d.name for d in local[:n]],
                                    device_type=device_type)
    # Feature columns are split over the model axis only when the first kernel is
    # row-sharded (linear); a column-sharded first layer (MLP) needs every feature.
    self.split_features = self.specs[0].sharding == model_lib.ROWS
    self.x_layout = dtensor.Layout(
        [BATCH_AXIS, MODEL_AXIS if self.split_features else dtensor.UNSHARDED], self.mesh)
    self.y_layout = dtensor.Layout([BATCH_AXIS, dtensor.UNSHARDED], self.mesh)

  def devices(self) -> List[str]:
    return list(self.mesh.local_devices())

  def layout_of(self, spec: model_lib.ParamSpec):
    d = self.dtensor
    u = d.UNSHARDED
    if len(spec.shape) == 1:
      return d.Layout([MODEL_AXIS if spec.sharding == model_lib.COLS else u], self.mesh)
    if spec.sharding == model_lib.ROWS:
      return d.Layout([MODEL_AXIS, u], self.mesh)
    if spec.sharding == model_lib.COLS:
      return d.Layout([u, MODEL_AXIS], self.mesh)
    return d.Layout.replicated(self.mesh, rank=2)

  def _place(self, value, layout):
    d = self.dtensor
    t = d.copy_to_mesh(tf.convert_to_tensor(value),
                       d.Layout.replicated(self.mesh, rank=len(layout.sharding_specs)))
    return d.relayout(t, layout)

  def _variable(self, value, spec, name):
    return self.dtensor.DVariable(self._place(value, self.layout_of(spec)), name=name)

  def _value(self, v) -> np.ndarray:
    d = self.dtensor
    full = d.relayout(v.read_value(), d.Layout.replicated(self.mesh, rank=len(v.shape)))
    return d.unpack(full)[0].numpy()

  def _pack(self, value: tf.Tensor, layout):
    """Packs a host batch into a DTensor: device (b, m) gets row block b, column
    block m (only the block, no replication)."""
    b, m = self.mesh_shape
    rows = tf.split(value, b, axis=0)
    if layout is self.x_layout and self.split_features:
      parts = [c for r in rows for c in tf.split(r, m, axis=1)]
    else:
      parts = [r for r in rows for _ in range(m)]
    return self.dtensor.pack(parts, layout)

  def _step(self, batch, t):
    x, y = batch
    loss, grads = self._grads(x, y)
    # Materialise each gradient in its parameter's layout: the batch-axis reduction
    # of X_iᵀ ∂L/∂Y must happen before non-linear updates (Adam squares it).
    grads = [self.dtensor.relayout(g, self.layout_of(s)) for g, s in zip(grads, self.specs)]
    optimizers.apply(self.optimizer, self.params, grads, self.slots, self.lr, t)
    return loss, tf.linalg.global_norm(grads)

  def step(self, batch, t):
    x, y = batch
    loss, norm = self._step_fn((self._pack(x, self.x_layout), self._pack(y, self.y_layout)),
                               tf.constant(float(t)))  # scalars auto-broadcast
    return (float(self.dtensor.unpack(loss)[0].numpy()),
            float(self.dtensor.unpack(norm)[0].numpy()))


def is_chief(task_type: Optional[str], task_id: Optional[int]) -> bool:
  """Chief is the 'chief' task, or worker 0 when the cluster has no chief."""
  if task_type in (None, "chief"):
    return True
  if task_type == "worker" and task_id == 0:
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return "chief" not in cluster
  return False


def create(layout: str, *, specs, optimizer: str, lr: float, global_batch: int,
           devices: int = 0, mesh_shape=(1, 1)) -> Runtime:
  """Builds the runtime for `layout`. Devices must already be configured."""
  common = dict(specs=specs, optimizer=optimizer, lr=lr, global_batch=global_batch)
  if layout == "multi_worker":
    # Must be created before anything initialises the TensorFlow context.
    return MultiWorkerRuntime(tf.distribute.MultiWorkerMirroredStrategy(), **common)
  gpus = tf.config.list_logical_devices("GPU")
  if layout == "single":
    return Runtime(**common)
  if layout == "mirrored":
    pool = gpus or tf.config.list_logical_devices("CPU")
    n = devices or len(pool)
    if len(pool) < n:
      raise ValueError(f"devices: mirrored over {n} devices, found {len(pool)}")
    strategy = tf.distribute.MirroredStrategy([d.name for d in pool[:n]])
    return MirroredRuntime(strategy, **common)
  if layout == "mesh":
    return MeshRuntime(tuple(mesh_shape), "GPU" if gpus else "CPU", **common)
  raise ValueError(f"layout: unknown layout {layout!r}")
