"""The data-parallel layouts as tf.distribute strategies (the mesh layout is in
mesh_runtime.py), and who is the chief.

* ``single``: no strategy, one device;
* ``mirrored``: MirroredStrategy over N local devices (GPUs, else N logical CPUs);
* ``multi_worker``: MultiWorkerMirroredStrategy from TF_CONFIG (one process per worker).

The same tf_keras ``model.fit`` runs under each of them.
"""
import json
import os
from typing import List, Optional

import tensorflow as tf


def make_strategy(layout: str, devices: int = 0, collective: Optional[str] = None
                  ) -> Optional[tf.distribute.Strategy]:
  """The strategy of ``layout`` (None for single), all-reducing with ``collective`` (a
  key of devices.COLLECTIVES, chosen by devices.collectives; None: TensorFlow's default).
  Devices must already be configured; for multi_worker this must run before anything
  initialises the TensorFlow context."""
  if layout == "multi_worker":
    options = None
    if collective in ("nccl", "ring"):
      impl = tf.distribute.experimental.CommunicationImplementation
      options = tf.distribute.experimental.CommunicationOptions(
          implementation=impl.NCCL if collective == "nccl" else impl.RING)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
  if layout == "single":
    return None
  if layout == "mirrored":
    pool = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    n = devices or len(pool)
    if len(pool) < n:
      raise ValueError(f"devices: mirrored over {n} devices, found {len(pool)}")
    return tf.distribute.MirroredStrategy([d.name for d in pool[:n]],
                                          cross_device_ops=cross_device_ops(collective, pool))
  raise ValueError(f"layout: {layout!r} has no tf.distribute strategy")


def cross_device_ops(collective: Optional[str], pool) -> Optional[tf.distribute.CrossDeviceOps]:
  """MirroredStrategy's all-reduce for ``collective`` (None: TensorFlow's choice)."""
  if collective == "nccl_all_reduce":
    return tf.distribute.NcclAllReduce()
  if collective == "reduce_to_gpu0":
    return tf.distribute.ReductionToOneDevice(reduce_to_device=pool[0].name)
  if collective == "reduce_to_cpu":
    return tf.distribute.ReductionToOneDevice(reduce_to_device="/device:CPU:0")
  return None


def variable_devices(variables) -> List[str]:
  """The devices ``variables`` live on (every replica's copy of a mirrored variable),
  in first-seen order: what the run really used."""
  seen: List[str] = []
  for v in variables:
    values = getattr(v, "values", None)
    for component in (values if isinstance(values, (tuple, list)) else (v,)):
      name = tf.DeviceSpec.from_string(component.device).to_string() if component.device else ""
      if name and name not in seen:
        seen.append(name)
  return seen


def describe(layout: str, strategy: Optional[tf.distribute.Strategy],
             variables=None) -> dict:
  """layout, replicas, mesh_shape and devices: read from where ``variables`` live when
  given (the devices used), else the strategy's (every worker's, for multi_worker)."""
  if strategy is None:
    devices = variable_devices(variables or [])
    if not devices:
      devices = [d.name for d in (tf.config.list_logical_devices("GPU")
                                  or tf.config.list_logical_devices("CPU"))[:1]]
    return {"layout": layout, "replicas": 1, "mesh_shape": [1, 1], "devices": devices}
  devices: List[str] = list(strategy.extended.worker_devices)
  resolver = getattr(strategy, "cluster_resolver", None)
  if layout == "multi_worker" and resolver is not None:
    cluster = resolver.cluster_spec().as_dict()
    local = [d.split("/device:")[-1] for d in (variable_devices(variables or []) or devices)]
    devices = [f"/job:{job}/replica:0/task:{i}/device:{d}"
               for job in sorted(cluster) for i in range(len(cluster[job])) for d in local]
  elif variables:
    devices = variable_devices(variables) or devices
  return {"layout": layout, "replicas": int(strategy.num_replicas_in_sync),
          "mesh_shape": [1, 1], "devices": devices}


def worker_info(strategy) -> tuple:
  """(task_type, task_id, number of workers) of a multi-worker strategy."""
  resolver = strategy.cluster_resolver
  cluster = resolver.cluster_spec().as_dict()
  workers = len(cluster.get("worker", [])) + len(cluster.get("chief", []))
  return resolver.task_type, resolver.task_id, workers


def is_chief(task_type: Optional[str], task_id: Optional[int]) -> bool:
  """Chief is the 'chief' task, or worker 0 when the cluster has no chief."""
  if task_type in (None, "chief"):
    return True
  if task_type == "worker" and task_id == 0:
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    return "chief" not in cluster
  return False
