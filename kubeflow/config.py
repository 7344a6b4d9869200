"""Typed config of `tfx-parallel compile`: where each component runs on Kubernetes.

One YAML file, decoded once into :class:`KubeflowConfig`::

    pipeline_root: gs://my-bucket/tfx-parallel   # required; a URI, never a local path
    pipeline: {...}                               # PipelineConfig.from_dict (layout, mesh, ...)
    components:
      default: {image: ..., cpu_request: "1", ...}   # applies to every component
      DistributedTrainer: {accelerator: {type: nvidia.com/gpu, count: 1}, ...}

A component section overrides the ``default`` section key by key (a key it sets
replaces the default's value whole, e.g. ``tolerations``). Every error is a
ConfigError naming the dotted key, e.g. ``components.DistributedTrainer.cpu_limit``.
"""
import dataclasses
import re
from typing import Any, Dict, Mapping, Optional, Tuple

from tfx_parallel.components.common.config_util import ConfigError, from_dict, require
from tfx_parallel.pipeline import settings
from tfx_parallel.pipeline.config import PipelineConfig

DEFAULT_SECTION = "default"
# Kubernetes quantity syntax accepted by the KFP SDK (PipelineTask.set_cpu_limit ...).
_CPU_RE = re.compile(r"^([0-9]*[.])?[0-9]+m?$")
_MEMORY_RE = re.compile(r"^[0-9]+(E|Ei|P|Pi|T|Ti|G|Gi|M|Mi|K|Ki)?$")
# KFP/TFX pipeline names: tfx/orchestration/kubeflow/v2/pipeline_builder._LEGAL_NAME_PATTERN.
_PIPELINE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,127}$")
_URI_RE = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A Kubernetes object name (DNS-1123 subdomain), as a PersistentVolumeClaim's.
_PVC_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
TOLERATION_OPERATORS = ("Exists", "Equal")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclasses.dataclass(frozen=True)
class Accelerator:
  """An accelerator resource for the container.

  Attributes:
    type: on Kubernetes (KFP) the extended resource name, e.g. ``nvidia.com/gpu``;
      on Vertex AI Pipelines a machine accelerator, e.g. ``NVIDIA_TESLA_T4``.
    count: accelerators per pod (>= 1).
  """
  type: str = ""
  count: int = 1

  def validate(self) -> "Accelerator":
    require(isinstance(self.type, str) and bool(self.type), "type",
            f"must name the accelerator, e.g. 'nvidia.com/gpu'. Received: {self.type!r}")
    require(isinstance(self.count, int) and not isinstance(self.count, bool)
            and self.count >= 1, "count", f"must be an integer >= 1. Received: {self.count!r}")
    return self


@dataclasses.dataclass(frozen=True)
class Toleration:
  """A Kubernetes toleration (the fields of kfp-kubernetes' Toleration message).

  Attributes:
    key: the taint key, e.g. ``nvidia.com/gpu``; empty with ``Exists``: every taint.
    operator: ``Equal`` (the taint's value must be ``value``) or ``Exists``.
    value: the taint value ``Equal`` compares with.
    effect: the taint effect tolerated (``NoSchedule``, ``PreferNoSchedule``,
      ``NoExecute``); empty: every effect.
    toleration_seconds: with ``NoExecute``: how long the pod stays bound after the
      taint appears; None: for ever.
  """
  key: str = ""
  operator: str = "Equal"
  value: str = ""
  effect: str = ""
  toleration_seconds: Optional[int] = None

  def validate(self) -> "Toleration":
    require(self.operator in TOLERATION_OPERATORS, "operator",
            f"must be one of {TOLERATION_OPERATORS}. Received: {self.operator!r}")
    require(self.effect in TOLERATION_EFFECTS, "effect",
            f"must be one of {TOLERATION_EFFECTS}. Received: {self.effect!r}")
    require(isinstance(self.key, str) and isinstance(self.value, str), "key",
            "key and value must be strings")
    if self.operator == "Exists":
      require(not self.value, "value",
              f"must be empty when operator is 'Exists'. Received: {self.value!r}")
    else:
      require(bool(self.key), "key", "must be set when operator is 'Equal'")
    if self.toleration_seconds is not None:
      require(isinstance(self.toleration_seconds, int) and self.toleration_seconds >= 0,
              "toleration_seconds", f"must be an integer >= 0. Received: "
              f"{self.toleration_seconds!r}")
      require(self.effect == "NoExecute", "toleration_seconds",
              f"only applies to effect 'NoExecute'. Received effect: {self.effect!r}")
    return self


# Backends 2.4.1 and later compile a task's retryPolicy into an Argo retryStrategy on its
# executor template; 2.1.0 to 2.4.0 ignore it (kubeflow/pipelines
# backend/src/v2/compiler/argocompiler/container.go 2.4.1:236,275 and :473-498
# getTaskRetryStrategy, added by kubeflow/pipelines#11673; no retry code at 2.4.0). Argo ends all retries at the first attempt's start + backoff_max
# and gives each retried pod that deadline (argo-workflows workflow/controller/
# operator.go processNodeRetries: ``maxDurationDeadline := firstChildNode.StartedAt.Add
# (maxDuration)``, ``opts.executionDeadline = maxDurationDeadline``), so its default
# here is a week, not the KFP SDK's 3600s (kfp/dsl/structures.py RetryPolicy.to_proto),
# which would forbid the retry of a trainer preempted after its first hour.
DEFAULT_BACKOFF_MAX_SECONDS = 7 * 24 * 3600


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
  """A task's KFP retryPolicy (``PipelineTaskSpec.RetryPolicy``, kfp ``set_retry``).

  Attributes:
    max_retry_count: retries after a failed attempt (0: none). A retried trainer
      resumes from its last checkpoint (``checkpoint_volume``, docs/kubeflow.md).
    backoff_seconds: wait before the first retry.
    backoff_factor: each later wait is the previous one times this (a whole number:
      the Argo compiler truncates it to an integer, ``int32(GetBackoffFactor())``).
    backoff_max_seconds: no retry starts later than this after the first attempt
      started, and a retried pod is stopped then.
  """
  max_retry_count: int = 2
  backoff_seconds: int = 60
  backoff_factor: int = 2
  backoff_max_seconds: int = DEFAULT_BACKOFF_MAX_SECONDS

  def validate(self) -> "RetryPolicy":
    for name, low in (("max_retry_count", 0), ("backoff_seconds", 0), ("backoff_factor", 1),
                      ("backoff_max_seconds", 1)):
      value = getattr(self, name)
      require(isinstance(value, int) and not isinstance(value, bool) and value >= low, name,
              f"must be an integer >= {low}. Received: {value!r}")
    return self


@dataclasses.dataclass(frozen=True)
class ComponentPlacement:
  """How and where one component's container runs.

  Attributes:
    image: container image holding this project (see kubeflow/Dockerfile).
    cpu_request, cpu_limit: Kubernetes CPU quantities ("500m", "4"); None = unset.
    memory_request, memory_limit: Kubernetes memory quantities ("2G", "16Gi").
    accelerator: accelerator type and count; None for CPU-only pods.
    node_selector: node labels the pod must match.
    tolerations: taints the pod tolerates (e.g. nvidia.com/gpu:NoSchedule).
    beam_pipeline_args: Beam args for a Beam component (PartitionedExampleGen), e.g.
      ``--runner=DataflowRunner``, ``--runner=FlinkRunner``; appended to the
      pipeline's own Beam args, so they win. With a runner whose workers run outside
      the pod, the entry point adds Beam's ``--s3_*`` options at run time from KFP's
      store and secret, so no credential goes in the config (docs/kubeflow.md).
    env: extra environment variables (TF_USE_LEGACY_KERAS=1 is always set).
    pvc_mounts: existing PersistentVolumeClaim name -> absolute path in the container,
      e.g. ``{cuda-jit-cache: /var/cache/cuda}``: the image's CUDA_CACHE_PATH, so the
      kernels CUDA JIT-compiles (Hopper) are kept across pods (kubeflow/gpu.yaml).
    retry: the task's KFP retryPolicy (:class:`RetryPolicy`); ``{max_retry_count: 0}``
      turns retries off.
    checkpoint_volume: DistributedTrainer only: an absolute path at or below one of its
      ``pvc_mounts``, where its checkpoints live, keyed by run and task, so that a
      retried pod resumes them. Unset: under a gs://, s3:// or minio:// pipeline root,
      under the task's root (TensorFlow writes gs://, tensorflow-io s3://; minio:// is
      opened as s3:// with the endpoint of KFP's store session); under any other scheme
      in the pod, and a retry restarts from step 0 (`tfx-parallel compile` says so).
  """
  image: str = ""
  cpu_request: Optional[str] = None
  cpu_limit: Optional[str] = None
  memory_request: Optional[str] = None
  memory_limit: Optional[str] = None
  accelerator: Optional[Accelerator] = None
  node_selector: Dict[str, str] = dataclasses.field(default_factory=dict)
  tolerations: Tuple[Toleration, ...] = ()
  beam_pipeline_args: Tuple[str, ...] = ()
  env: Dict[str, str] = dataclasses.field(default_factory=dict)
  pvc_mounts: Dict[str, str] = dataclasses.field(default_factory=dict)
  retry: RetryPolicy = RetryPolicy()
  checkpoint_volume: Optional[str] = None

  def validate(self) -> "ComponentPlacement":
    require(isinstance(self.image, str) and bool(self.image) and " " not in self.image,
            "image", f"must be a container image reference. Received: {self.image!r}")
    for name, pattern, hint in (("cpu_request", _CPU_RE, "'500m' or '4'"),
                                ("cpu_limit", _CPU_RE, "'500m' or '4'"),
                                ("memory_request", _MEMORY_RE, "'512M' or '16Gi'"),
                                ("memory_limit", _MEMORY_RE, "'512M' or '16Gi'")):
      value = getattr(self, name)
      if value is not None:
        require(isinstance(value, str) and bool(pattern.match(value)), name,
                f"must be a Kubernetes quantity string such as {hint}. Received: {value!r}")
    # Imported here: resources imports this module for ComponentPlacement.
    from tfx_parallel.kubeflow import resources  # pylint: disable=g-import-not-at-top
    for request, limit, to_number in (("cpu_request", "cpu_limit", resources.cpu_to_float),
                                      ("memory_request", "memory_limit",
                                       resources.memory_to_gb)):
      req, lim = getattr(self, request), getattr(self, limit)
      if req is not None and lim is not None:
        require(to_number(req) <= to_number(lim), request,
                f"{req!r} exceeds {limit} {lim!r}")
    if self.accelerator is not None:
      _nested("accelerator", self.accelerator.validate)
    for key, value in self.node_selector.items():
      require(isinstance(key, str) and bool(key) and isinstance(value, str),
              f"node_selector.{key}", f"labels map strings to strings. Received: {value!r}")
    for i, toleration in enumerate(self.tolerations):
      _nested(f"tolerations[{i}]", toleration.validate)
    require(all(isinstance(a, str) and a.startswith("--") for a in self.beam_pipeline_args),
            "beam_pipeline_args", f"must be flags like '--runner=FlinkRunner'. Received: "
            f"{list(self.beam_pipeline_args)!r}")
    for key, value in self.env.items():
      require(bool(_ENV_NAME_RE.match(str(key))) and isinstance(value, str), f"env.{key}",
              f"needs a variable name and a string value. Received: {value!r}")
    for claim, path in self.pvc_mounts.items():
      require(bool(_PVC_NAME_RE.match(claim)), f"pvc_mounts.{claim}",
              f"must name a PersistentVolumeClaim (lower case alphanumerics, '-' or '.'). "
              f"Received: {claim!r}")
      require(isinstance(path, str) and path.startswith("/"), f"pvc_mounts.{claim}",
              f"must be an absolute path in the container. Received: {path!r}")
    paths = list(self.pvc_mounts.values())
    require(len(set(paths)) == len(paths), "pvc_mounts",
            f"two claims are mounted at the same path. Received: {dict(self.pvc_mounts)!r}")
    _nested("retry", self.retry.validate)
    if self.checkpoint_volume is not None:
      volume = self.checkpoint_volume
      require(isinstance(volume, str) and volume.startswith("/")
              and any(volume.rstrip("/") == p.rstrip("/") or volume.startswith(p.rstrip("/") + "/")
                      for p in paths), "checkpoint_volume",
              f"must be an absolute path at or below one of pvc_mounts {sorted(paths)} (a "
              f"volume that outlives the pod). Received: {volume!r}")
    return self


@dataclasses.dataclass(frozen=True)
class KubeflowConfig:
  """The whole `tfx-parallel compile` config.

  Attributes:
    pipeline_root: where artifacts go, a URI such as ``gs://bucket/root``,
      ``s3://...`` or ``minio://mlpipeline/v2/artifacts``; KFP lets a run override it.
    pipeline: the same PipelineConfig the local runner uses.
    components: component id (or "default") -> placement, already merged with the
      default section.
  """
  pipeline_root: str
  pipeline: PipelineConfig
  components: Mapping[str, ComponentPlacement]

  def placement(self, component_id: str) -> ComponentPlacement:
    """This component's placement (the default section when it has none)."""
    return self.components.get(component_id, self.components[DEFAULT_SECTION])


def _nested(prefix: str, validate):
  """Runs `validate`, prefixing the key of any ConfigError it raises."""
  try:
    validate()
  except ConfigError as e:
    raise ConfigError(f"{prefix}.{e.key}", str(e).split(": ", 1)[1]) from None


def _placement(data: Dict[str, Any], prefix: str) -> ComponentPlacement:
  """Decodes one (already merged) component section; errors name `prefix.key`."""
  data = dict(data)
  if data.get("accelerator") is not None:
    data["accelerator"] = from_dict(Accelerator, data["accelerator"], prefix + "accelerator.")
  tolerations = data.get("tolerations") or []
  require(isinstance(tolerations, list), prefix + "tolerations",
          f"must be a list. Received: {type(tolerations).__name__}")
  data["tolerations"] = tuple(from_dict(Toleration, t, f"{prefix}tolerations[{i}].")
                              for i, t in enumerate(tolerations))
  for key in ("node_selector", "env", "pvc_mounts"):
    value = data.get(key) or {}
    require(isinstance(value, dict), prefix + key,
            f"must be a mapping. Received: {type(value).__name__}")
    data[key] = {str(k): v for k, v in value.items()}
  retry = data.get("retry")
  require(retry is None or isinstance(retry, dict), prefix + "retry",
          f"must be a mapping such as {{max_retry_count: 2}}. Received: {retry!r}")
  data["retry"] = from_dict(RetryPolicy, retry or {}, prefix + "retry.")
  args = data.get("beam_pipeline_args") or []
  require(isinstance(args, list), prefix + "beam_pipeline_args",
          f"must be a list. Received: {type(args).__name__}")
  data["beam_pipeline_args"] = tuple(args)
  placement = from_dict(ComponentPlacement, data, prefix)
  _nested(prefix.rstrip("."), placement.validate)
  return placement


def from_mapping(data: Dict[str, Any]) -> KubeflowConfig:
  """Decodes and validates the whole config; raises ConfigError naming the key.

  The ``pipeline:`` section is read as ``tfx-parallel run --config`` reads it
  (pipeline/settings.py): the same keys, over the same defaults of its data source."""
  if not isinstance(data, dict):
    raise ConfigError("<root>", f"expected a mapping, received {type(data).__name__}")
  unknown = sorted(set(data) - set(settings.FILE_KEYS))
  if unknown:
    raise ConfigError(unknown[0], "unknown key; valid keys are "
                      f"{sorted(settings.FILE_KEYS)}")
  root = data.get("pipeline_root")
  require(isinstance(root, str) and bool(_URI_RE.match(root)), "pipeline_root",
          "must be a URI such as gs://bucket/root or minio://mlpipeline/v2/artifacts "
          f"(the pods cannot see this machine's files). Received: {root!r}")
  sections = data.get("components") or {}
  require(isinstance(sections, dict), "components",
          f"must be a mapping. Received: {type(sections).__name__}")
  default = sections.get(DEFAULT_SECTION) or {}
  require(isinstance(default, dict), f"components.{DEFAULT_SECTION}",
          f"must be a mapping. Received: {type(default).__name__}")
  # The default section first, so that its errors name it, not the first component.
  components = {DEFAULT_SECTION: _placement(default, f"components.{DEFAULT_SECTION}.")}
  for name, section in sections.items():
    require(isinstance(section, dict) or section is None, f"components.{name}",
            f"must be a mapping. Received: {type(section).__name__}")
    if name != DEFAULT_SECTION:
      components[str(name)] = _placement({**default, **(section or {})}, f"components.{name}.")
  trainer = components.get("DistributedTrainer", components[DEFAULT_SECTION])
  pipeline = _pipeline_config(data.get(settings.PIPELINE_SECTION), trainer)
  return KubeflowConfig(pipeline_root=root, pipeline=pipeline, components=components)


def _pipeline_config(data: Any, trainer: ComponentPlacement) -> PipelineConfig:
  """The ``pipeline:`` section over config.default_config(source). A mesh layout without
  a ``mesh`` gets run's default mesh for the trainer pod's GPUs (its accelerator count;
  2x2 logical CPU devices without one)."""
  try:
    given = settings.from_mapping(data)
    config = settings.build(given)
    if config.trainer.layout == "mesh" and settings.last(given, "trainer.mesh") is None:
      from tfx_parallel.components.distributed_trainer.plan import devices  # pylint: disable=g-import-not-at-top
      gpus = trainer.accelerator.count if trainer.accelerator else 0
      config = dataclasses.replace(config, trainer=dataclasses.replace(
          config.trainer, mesh=devices.default_mesh(gpus, config.trainer.batch_size)))
    config.validate()
  except ConfigError as e:
    raise ConfigError(f"{settings.PIPELINE_SECTION}.{e.key}",
                      settings.COMPILE.message(e.message)) from None
  except TypeError as e:  # A value of the wrong shape inside a list, e.g. mesh: [a, b].
    raise ConfigError(settings.PIPELINE_SECTION, str(e)) from None
  require(bool(_PIPELINE_NAME_RE.match(config.pipeline_name)), "pipeline.pipeline_name",
          "Kubeflow pipeline names must match [a-z0-9][a-z0-9-]{0,127}. "
          f"Received: {config.pipeline_name!r}")
  return config


def check_vertex(config: KubeflowConfig) -> None:
  """Rejects what Vertex AI Pipelines cannot use; the ConfigError names the key.

  Vertex runs each step on a machine it picks from the accelerator type (a machine
  accelerator such as NVIDIA_TESLA_T4, not a Kubernetes resource name), has no node
  selectors or tolerations, and reads and writes Cloud Storage only.
  """
  require(config.pipeline_root.startswith("gs://"), "pipeline_root",
          f"Vertex AI Pipelines needs a gs:// root. Received: {config.pipeline_root!r}")
  for name, placement in sorted(config.components.items()):
    require(not placement.node_selector, f"components.{name}.node_selector",
            "Vertex AI Pipelines has no node selectors; pick the GPU with accelerator.type")
    require(not placement.tolerations, f"components.{name}.tolerations",
            "Vertex AI Pipelines has no tolerations")
    require(not placement.pvc_mounts, f"components.{name}.pvc_mounts",
            "Vertex AI Pipelines mounts no PersistentVolumeClaims")
    if placement.accelerator is not None:
      require("/" not in placement.accelerator.type and "." not in placement.accelerator.type,
              f"components.{name}.accelerator.type",
              "Vertex AI Pipelines needs a machine accelerator such as NVIDIA_TESLA_T4, not "
              f"a Kubernetes resource name. Received: {placement.accelerator.type!r}")


def load(path: str) -> KubeflowConfig:
  """Reads a YAML config file; errors name the file and the key."""
  import yaml  # pylint: disable=g-import-not-at-top
  with open(path) as f:
    try:
      data = yaml.safe_load(f)
    except yaml.YAMLError as e:
      raise ConfigError("<file>", f"{path} is not valid YAML: {e}") from None
  try:
    return from_mapping(data or {})
  except ConfigError as e:
    raise ConfigError(e.key, f"{e.message} (in {path})") from None
