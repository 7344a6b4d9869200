"""Which steps open-source KFP may serve from its cache: not an ingest that reads files.

Open-source KFP's driver keys a step by its input artifacts' ML Metadata ids, parameter
values, output specs, image, command and args (and PVC names from 2.15.0):
kubeflow/pipelines ``backend/src/v2/driver/cache.go`` ``getFingerPrint`` and
``backend/src/v2/cacheutils/cache.go`` ``GenerateCacheKey``. An ExampleGen reading files
has none of its files in that key: the same config with a changed CSV at the same path
would be served the old Examples. TFX closes this gap on Vertex AI with a driver step
that resolves span, version and the files' fingerprint *before* the cache lookup
(tensorflow/tfx v1.16.0 ``tfx/orchestration/kubeflow/v2/file_based_example_gen/
driver.py``, run as the container's ``lifecycle.preCacheCheck``: ``step_builder.py``
:551-571), but no open-source backend runs a ``preCacheCheck`` (no code under
``backend/`` reads it, 2.1.0 to master 7b70c7b), and a fingerprint taken at compile
time would be stale the moment the package is reused. So the compiler switches KFP's
cache off for such a step (``cachingOptions.enableCache: false``, which the driver
honours: ``driver/cache.go``:133 at master, ``driver/driver.go``:1648 at 2.1.0) and says
so. A re-run ingest records new artifacts (new ids), so its consumers re-run too, as
fresh data needs. Synthetic data is a function of the config, which is in the key: it
is cached as usual.
"""
from typing import Dict, Iterable, Mapping

from tfx.components.example_gen.component import FileBasedExampleGen

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen.component import PartitionedExampleGen
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig

REASON = ("reads input files, and the KFP cache key does not cover them (a "
          "changed file at the same path would be served stale): caching off for this step")


def reads_input_files(node) -> bool:
  """Whether the step's output depends on files outside its config and input artifacts."""
  if isinstance(node, FileBasedExampleGen):
    return True
  if isinstance(node, PartitionedExampleGen):
    config = config_util.from_json(ExampleGenConfig, node.exec_properties[keys.CONFIG_KEY])
    return not config.is_synthetic
  return False


def uncached(nodes: Iterable) -> Dict[str, str]:
  """{node id: why KFP must not serve it from its cache}."""
  return {node.id: REASON for node in nodes if reads_input_files(node)}


def switch_off(spec: Dict, reasons: Mapping[str, str]) -> None:
  """Sets ``cachingOptions.enableCache: false`` on the tasks named in ``reasons``."""
  tasks = spec["root"]["dag"]["tasks"]
  for task_id in reasons:
    tasks[task_id]["cachingOptions"] = {"enableCache": False}
