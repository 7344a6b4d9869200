"""Multi-node training as a Kubeflow TFJob (kubeflow.org/v1), for `multi_worker` only.

A KFP task is a single pod. To train on several nodes, the DistributedTrainer executor
(running in that pod) submits a TFJob whose replicas run the training entry point of
the same image, waits for it and returns its logs. The Kubeflow training operator
injects TF_CONFIG into each replica; `MultiWorkerMirroredStrategy` reads it.

Opt-in only: the executor uses this when the trainer layout is ``multi_worker`` AND
``TFX_PARALLEL_TFJOB_IMAGE`` is set in its environment (in the compiled pipeline:
``components.DistributedTrainer.env``, see kubeflow/gpu.yaml). Otherwise the local
launcher runs, unchanged. Settings, all read once by :func:`settings_from_env`:

    TFX_PARALLEL_TFJOB_IMAGE          image of the replicas (required to opt in)
    TFX_PARALLEL_TFJOB_WORKERS        Worker replicas (default: trainer `workers`)
    TFX_PARALLEL_TFJOB_CHIEF          1 adds a Chief replica (default 0: worker 0 is chief)
    TFX_PARALLEL_TFJOB_GPUS           nvidia.com/gpu limit per replica (default 0)
    TFX_PARALLEL_TFJOB_NODE_SELECTOR  JSON object of node labels (default {})
    TFX_PARALLEL_TFJOB_TOLERATIONS    JSON list of Kubernetes tolerations (default [])
    TFX_PARALLEL_TFJOB_RESOURCES      JSON {"requests": {...}, "limits": {...}} (default {})
    TFX_PARALLEL_TFJOB_NAMESPACE      default: the pod's own namespace, else "default"
    TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS  default 86400

The job file is written next to the checkpoints under the pipeline root, which the
replicas must reach (gs://, s3://, or a shared volume mounted at the same path). The
replicas run ``python -m tfx_parallel.components.distributed_trainer.tfjob --job URI``,
which copies the job file to local disk (train.py reads a local file) and runs
``train.main``.
"""
import argparse
import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

GROUP, VERSION, PLURAL, KIND = "kubeflow.org", "v1", "tfjobs", "TFJob"
# The training operator injects TF_CONFIG into the container with this name only.
CONTAINER_NAME = "tensorflow"
GPU_RESOURCE = "nvidia.com/gpu"
# Label the training operator puts on every replica pod of a job.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
ENV_PREFIX = "TFX_PARALLEL_TFJOB_"
ENV_IMAGE = ENV_PREFIX + "IMAGE"
_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
SUCCEEDED, FAILED, TIMEOUT = "Succeeded", "Failed", "Timeout"


@dataclasses.dataclass(frozen=True)
class TFJobSpec:
  """What one TFJob runs and where; :func:`manifest` turns it into the resource.

  Attributes:
    name: TFJob name (DNS-1123 label, <= 63 characters).
    namespace: Kubernetes namespace.
    image: container image of every replica.
    command: the replica container's command (argv).
    worker_replicas: Worker replicas (>= 1).
    chief_replicas: 0, or 1 for a separate Chief replica.
    gpus_per_replica: nvidia.com/gpu limit of each replica (0 = none).
    resources: extra container resources, {"requests": {...}, "limits": {...}}.
    node_selector: node labels the replica pods must match.
    tolerations: Kubernetes tolerations (dicts in the API's camelCase).
    env: environment of the replica container (TF_CONFIG is left to the operator).
  """
  name: str
  namespace: str
  image: str
  command: Tuple[str, ...]
  worker_replicas: int = 1
  chief_replicas: int = 0
  gpus_per_replica: int = 0
  resources: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
  node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
  tolerations: Tuple[Mapping[str, Any], ...] = ()
  env: Mapping[str, str] = dataclasses.field(default_factory=dict)

  def validate(self) -> "TFJobSpec":
    if not (0 < len(self.name) <= 63 and self.name.replace("-", "a").isalnum()
            and self.name == self.name.lower() and self.name[0].isalnum()
            and self.name[-1].isalnum()):
      raise ValueError(f"TFJob name must be a DNS-1123 label of <= 63 characters. "
                       f"Received: name={self.name!r}")
    if not self.image or not self.command:
      raise ValueError(f"TFJob needs an image and a command. Received: image={self.image!r}, "
                       f"command={list(self.command)!r}")
    if self.worker_replicas < 1 or self.chief_replicas not in (0, 1):
      raise ValueError(f"TFJob needs >= 1 worker and 0 or 1 chief. Received: "
                       f"worker_replicas={self.worker_replicas}, "
                       f"chief_replicas={self.chief_replicas}")
    if self.gpus_per_replica < 0:
      raise ValueError(f"gpus_per_replica must be >= 0. Received: {self.gpus_per_replica}")
    return self


def _replica(spec: TFJobSpec, replicas: int) -> Dict[str, Any]:
  resources = {kind: dict(values) for kind, values in spec.resources.items()}
  if spec.gpus_per_replica:
    resources.setdefault("limits", {})[GPU_RESOURCE] = str(spec.gpus_per_replica)
  container = {"name": CONTAINER_NAME, "image": spec.image, "command": list(spec.command),
               "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())]}
  if resources:
    container["resources"] = resources
  pod = {"containers": [container]}
  if spec.node_selector:
    pod["nodeSelector"] = dict(spec.node_selector)
  if spec.tolerations:
    pod["tolerations"] = [dict(t) for t in spec.tolerations]
  # ExitCode: the operator restarts a replica only on retryable exit codes (signals,
  # e.g. a preempted node: 128+); a training error (1-127) fails the job.
  return {"replicas": replicas, "restartPolicy": "ExitCode",
          "template": {"spec": pod}}


def manifest(spec: TFJobSpec) -> Dict[str, Any]:
  """The kubeflow.org/v1 TFJob resource (a JSON dict) for `spec`. Pure."""
  spec.validate()
  replica_specs = {"Worker": _replica(spec, spec.worker_replicas)}
  if spec.chief_replicas:
    replica_specs["Chief"] = _replica(spec, spec.chief_replicas)
  return {
      "apiVersion": f"{GROUP}/{VERSION}",
      "kind": KIND,
      "metadata": {"name": spec.name, "namespace": spec.namespace,
                   "labels": {"app.kubernetes.io/part-of": "tfx-parallel"}},
      # cleanPodPolicy None keeps finished pods so that their logs can be read;
      # deleting the TFJob removes them.
      "spec": {"runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 3},
               "tfReplicaSpecs": replica_specs},
  }


def job_state(tfjob: Mapping[str, Any]) -> Tuple[Optional[str], str]:
  """(SUCCEEDED | FAILED | None while running, message) from the TFJob's conditions."""
  for condition in (tfjob.get("status") or {}).get("conditions") or []:
    if condition.get("type") in (SUCCEEDED, FAILED) and condition.get("status") == "True":
      return condition["type"], condition.get("message", "")
  return None, ""


@dataclasses.dataclass(frozen=True)
class TFJobResult:
  """How a TFJob ended: SUCCEEDED, FAILED or TIMEOUT, with each replica pod's log."""
  state: str
  message: str
  logs: Dict[str, str]

  @property
  def succeeded(self) -> bool:
    return self.state == SUCCEEDED


class TFJobClient:
  """The Kubernetes API calls for TFJobs, and nothing else.

  Args:
    api_client: a ``kubernetes.client.ApiClient``; default: in-cluster config, else
      the local kubeconfig.
  """

  def __init__(self, api_client=None):
    from kubernetes import client  # pylint: disable=g-import-not-at-top
    if api_client is None:
      api_client = _default_api_client()
    self._custom = client.CustomObjectsApi(api_client)
    self._core = client.CoreV1Api(api_client)

  def create(self, body: Mapping[str, Any]) -> Dict[str, Any]:
    namespace = body["metadata"]["namespace"]
    return self._custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                        dict(body))

  def get(self, name: str, namespace: str) -> Dict[str, Any]:
    return self._custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

  def delete(self, name: str, namespace: str) -> None:
    self._custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

  def logs(self, name: str, namespace: str) -> Dict[str, str]:
    """Pod name -> log of every replica pod of the job."""
    pods = self._core.list_namespaced_pod(namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
    return {pod.metadata.name: self._core.read_namespaced_pod_log(pod.metadata.name, namespace)
            for pod in pods.items}

  def wait(self, name: str, namespace: str, timeout_seconds: float,
           poll_seconds: float = 10.0,
           clock: Callable[[], float] = time.monotonic,
           sleep: Callable[[float], None] = time.sleep) -> TFJobResult:
    """Polls the job's conditions until Succeeded/Failed or the timeout; never raises on
    the job's outcome. Returns the state, the operator's message and the pods' logs."""
    deadline = clock() + timeout_seconds
    while True:
      state, message = job_state(self.get(name, namespace))
      if state is None and clock() >= deadline:
        state, message = TIMEOUT, f"TFJob {namespace}/{name} did not finish in " \
                                  f"{timeout_seconds:g} s"
      if state is not None:
        return TFJobResult(state=state, message=message, logs=self.logs(name, namespace))
      sleep(poll_seconds)


def _default_api_client():
  from kubernetes import client, config  # pylint: disable=g-import-not-at-top
  try:
    config.load_incluster_config()
  except config.ConfigException:
    config.load_kube_config()
  return client.ApiClient()


# --- Executor side: settings from the environment, submit, wait. ----------------------

@dataclasses.dataclass(frozen=True)
class TFJobSettings:
  """The executor's TFJob settings, decoded once from TFX_PARALLEL_TFJOB_* variables."""
  image: str
  namespace: str
  worker_replicas: int
  chief_replicas: int = 0
  gpus_per_replica: int = 0
  node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
  tolerations: Tuple[Mapping[str, Any], ...] = ()
  resources: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
  timeout_seconds: float = 86400.0


def _own_namespace() -> str:
  try:
    with open(_NAMESPACE_FILE) as f:
      return f.read().strip() or "default"
  except OSError:
    return "default"


def settings_from_env(environ: Mapping[str, str], layout: str,
                      workers: int) -> Optional[TFJobSettings]:
  """TFJob settings when opted in (layout multi_worker and TFX_PARALLEL_TFJOB_IMAGE
  set), else None. Raises ValueError naming the variable on a bad value."""
  image = environ.get(ENV_IMAGE, "")
  if layout != "multi_worker" or not image:
    return None

  def read(suffix, parse, default):
    name = ENV_PREFIX + suffix
    if name not in environ:
      return default
    try:
      return parse(environ[name])
    except ValueError as e:
      raise ValueError(f"{name}: cannot parse {environ[name]!r}: {e}") from None

  def json_of(kind):
    def parse(text):
      value = json.loads(text)
      if not isinstance(value, kind):
        raise ValueError(f"expected a JSON {kind.__name__}")
      return value
    return parse

  return TFJobSettings(
      image=image,
      namespace=read("NAMESPACE", str, None) or _own_namespace(),
      worker_replicas=read("WORKERS", int, workers),
      chief_replicas=read("CHIEF", int, 0),
      gpus_per_replica=read("GPUS", int, 0),
      node_selector=read("NODE_SELECTOR", json_of(dict), {}),
      tolerations=tuple(read("TOLERATIONS", json_of(list), [])),
      resources=read("RESOURCES", json_of(dict), {}),
      timeout_seconds=read("TIMEOUT_SECONDS", float, 86400.0))


def job_name(checkpoint_dir: str, now: float) -> str:
  """A fresh DNS-1123 name per submission: the checkpoint digest and a timestamp."""
  digest = hashlib.sha256(checkpoint_dir.encode()).hexdigest()[:10]
  return f"tfx-parallel-train-{digest}-{int(now)}"


def replica_command(job_uri: str) -> Tuple[str, ...]:
  return ("python", "-m", "tfx_parallel.components.distributed_trainer.tfjob",
          "--job", job_uri)


def spec_for(settings: TFJobSettings, name: str, job_uri: str) -> TFJobSpec:
  return TFJobSpec(name=name, namespace=settings.namespace, image=settings.image,
                   command=replica_command(job_uri),
                   worker_replicas=settings.worker_replicas,
                   chief_replicas=settings.chief_replicas,
                   gpus_per_replica=settings.gpus_per_replica,
                   resources=settings.resources, node_selector=settings.node_selector,
                   tolerations=settings.tolerations,
                   env={"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})


def run(job, settings: TFJobSettings, client: Optional[TFJobClient] = None,
        now: Callable[[], float] = time.time) -> TFJobResult:
  """Writes `job` (a train.Job) beside its checkpoints, submits the TFJob, waits, and
  deletes it. Raises RuntimeError naming the job and quoting the logs on failure."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import devices  # pylint: disable=g-import-not-at-top
  devices.check_multi_worker_batch(settings.worker_replicas + settings.chief_replicas,  # Chief trains too.
                                   settings.gpus_per_replica, job.config.get("batch_size"), "TFJob")
  name = job_name(job.checkpoint_dir, now())
  job_dir = os.path.join(os.path.dirname(os.path.dirname(job.checkpoint_dir.rstrip("/"))),
                         "_tfjobs")
  job_uri = os.path.join(job_dir, name + ".json")
  fileio.makedirs(job_dir)
  with fileio.open(job_uri, "w") as f:
    f.write(json.dumps(dataclasses.asdict(job)))
  body = manifest(spec_for(settings, name, job_uri))
  client = client or TFJobClient()
  client.create(body)
  logging.info("Submitted TFJob %s/%s (%d workers, %d GPUs each); job file %s",
               settings.namespace, name, settings.worker_replicas,
               settings.gpus_per_replica, job_uri)
  try:
    result = client.wait(name, settings.namespace, settings.timeout_seconds)
  finally:
    client.delete(name, settings.namespace)
  for pod, text in sorted(result.logs.items()):
    logging.info("TFJob pod %s log (last 2000 characters):\n%s", pod, text[-2000:])
  if not result.succeeded:
    tails = "\n".join(f"--- {pod} ---\n{text[-1000:]}"
                      for pod, text in sorted(result.logs.items()))
    raise RuntimeError(f"TFJob {settings.namespace}/{name} ended {result.state}: "
                       f"{result.message}. Job file: {job_uri}. Pod logs:\n{tails}")
  return result


# --- Replica side: fetch the job file, then train. -----------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description="Runs one TFJob replica's training.")
  parser.add_argument("--job", required=True, help="job JSON URI written by the executor")
  args = parser.parse_args(argv)
  from tfx_parallel.components.distributed_trainer import train  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory(prefix="tfx_parallel_tfjob_") as tmp:
    local = os.path.join(tmp, "job.json")
    tf.io.gfile.copy(args.job, local)
    return train.main(["--job", local])


if __name__ == "__main__":
  sys.exit(main())
