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


def make_strategy(layout: str, devices: int = 0) -> Optional[tf.distribute.Strategy]:
  """The strategy of ``layout`` (None for single). Devices must already be configured;
  for multi_worker this must run before anything initialises the TensorFlow context."""
  if layout == "multi_worker":
    return tf.distribute.MultiWorkerMirroredStrategy()
  if layout == "single":
    return None
  if layout == "mirrored":
    pool = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    n = devices or len(pool)
    if len(pool) < n:
      raise ValueError(f"devices: mirrored over {n} devices, found {len(pool)}")
    return tf.distribute.MirroredStrategy([d.name for d in pool[:n]])
  raise ValueError(f"layout: {layout!r} has no tf.distribute strategy")


def describe(layout: str, strategy: Optional[tf.distribute.Strategy]) -> dict:
  """layout, replicas, mesh_shape and devices (every worker's, for multi_worker)."""
  if strategy is None:
    devices = [d.name for d in (tf.config.list_logical_devices("GPU")
                                or tf.config.list_logical_devices("CPU"))[:1]]
    return {"layout": layout, "replicas": 1, "mesh_shape": [1, 1], "devices": devices}
  devices: List[str] = list(strategy.extended.worker_devices)
  resolver = getattr(strategy, "cluster_resolver", None)
  if layout == "multi_worker" and resolver is not None:
    cluster = resolver.cluster_spec().as_dict()
    local = [d.split("/device:")[-1] for d in devices]
    devices = [f"/job:{job}/replica:0/task:{i}/device:{d}"
               for job in sorted(cluster) for i in range(len(cluster[job])) for d in local]
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
