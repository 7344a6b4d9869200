"""The multi-node settings, decoded once: the executor's ``TFX_PARALLEL_TFJOB_*``
variables (listed in the package docstring) into :class:`TFJobSettings`, checked before
anything is created; and the variables the executor passes to its replicas. Pure apart
from reading the pod's namespace file."""
import dataclasses
import difflib
import json
from typing import Any, Mapping, Optional, Tuple

ENV_PREFIX = "TFX_PARALLEL_TFJOB_"

ENV_IMAGE = ENV_PREFIX + "IMAGE"

# Set by the KFP v2 driver on every executor container through the downward API
# (kubeflow/pipelines backend/src/v2/component/constants.go: EnvPodName, EnvPodUID). No
# variable names the namespace: KFP v2 compiles only these two into every container
# (kubeflow/pipelines 2.15.0 backend/src/v2/compiler/argocompiler/common.go:40-54).
ENV_KFP_POD_NAME, ENV_KFP_POD_UID = "KFP_POD_NAME", "KFP_POD_UID"
# The pod's own namespace, in every pod that mounts its service account's token (the
# ServiceAccount admission controller's volume; kubernetes plugin/pkg/admission/
# serviceaccount/admission.go).
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# Cluster autoscaler's --max-node-provision-time default (15 min: kubernetes/autoscaler
# cluster-autoscaler/config/flags/flags.go; main.go before 1.30) plus 5 min for the new node to join and pull the image:
# an Unschedulable pod on a cluster that scales GPU nodes up from zero is normal for
# that long, so its grace is longer than the one for pods that cannot start.
UNSCHEDULABLE_GRACE_SECONDS = 1200.0

# How often the executor proves it is alive to its replicas, and how long they wait
# for a proof before stopping (TFX_PARALLEL_TFJOB_ORPHAN_SECONDS): an executor killed
# with SIGKILL (OOM, node loss) cannot delete its TFJob, and KFP keeps the step's pod,
# so the ownerReference frees nothing, until the workflow's TTL (a day by default).
HEARTBEAT_SECONDS = 60.0
# The executor beats from its poll loop (kube/launch.py run, poll_seconds=10.0 by
# default), so two beats are up to HEARTBEAT_SECONDS + one poll apart.
EXECUTOR_POLL_SECONDS = 10.0
HEARTBEAT_SPACING_SECONDS = HEARTBEAT_SECONDS + EXECUTOR_POLL_SECONDS

ORPHAN_SECONDS = 600.0
# The least orphan limit: three beats may go by unseen (one spacing late to be written,
# one for the replica's poll, which is up to HEARTBEAT_SECONDS, one for a slow write)
# before a healthy job's replicas would stop with the permanent ORPHANED_EXIT_CODE.
MIN_ORPHAN_SECONDS = 3 * HEARTBEAT_SPACING_SECONDS

# The replicas' own variables (not TFX_PARALLEL_TFJOB_*: those are the executor's settings).
ENV_HEARTBEAT, ENV_ORPHAN = "TFX_PARALLEL_HEARTBEAT_URI", "TFX_PARALLEL_ORPHAN_SECONDS"


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
  max_restarts: int = 3
  pending_grace_seconds: float = 300.0
  unschedulable_grace_seconds: float = UNSCHEDULABLE_GRACE_SECONDS
  ttl_seconds: int = 600
  orphan_seconds: float = ORPHAN_SECONDS
  owner: Optional[Tuple[str, str]] = None

  def __post_init__(self):
    if not self.orphan_seconds >= MIN_ORPHAN_SECONDS:  # Also however it was built.
      raise ValueError(f"{ENV_PREFIX}ORPHAN_SECONDS={self.orphan_seconds!r}: "
                       f"{orphan_limit_problem()}")


def orphan_limit_problem() -> str:
  """Why an orphan limit below MIN_ORPHAN_SECONDS is refused, and the fix."""
  return (f"must be >= {MIN_ORPHAN_SECONDS:g} (3 x the heartbeat spacing: the executor "
          f"writes its heartbeat every {HEARTBEAT_SECONDS:g} s from a "
          f"{EXECUTOR_POLL_SECONDS:g} s poll), or the replicas of a healthy job stop; "
          f"set {ENV_PREFIX}ORPHAN_SECONDS={MIN_ORPHAN_SECONDS:g} or more, or unset it "
          f"for {ORPHAN_SECONDS:g}")

# Setting suffix -> (TFJobSettings field, parser name); the one list of known names.
_SETTINGS = {
    "IMAGE": "image", "NAMESPACE": "namespace", "WORKERS": "worker_replicas",
    "CHIEF": "chief_replicas", "GPUS": "gpus_per_replica", "NODE_SELECTOR": "node_selector",
    "TOLERATIONS": "tolerations", "RESOURCES": "resources",
    "TIMEOUT_SECONDS": "timeout_seconds", "MAX_RESTARTS": "max_restarts",
    "PENDING_GRACE_SECONDS": "pending_grace_seconds",
    "UNSCHEDULABLE_GRACE_SECONDS": "unschedulable_grace_seconds", "TTL_SECONDS": "ttl_seconds",
    "ORPHAN_SECONDS": "orphan_seconds",
}


def _own_namespace(namespace_file: str) -> str:
  try:
    with open(namespace_file) as f:
      return f.read().strip() or "default"
  except OSError:
    return "default"


def _check_model(value: Any, model: str, where: str) -> None:
  """Checks `value` (API JSON, camelCase) against a model of the `kubernetes` client
  (generated from the Kubernetes OpenAPI spec): field names and types. Raises
  ValueError naming `where` and the field."""
  from kubernetes import client  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
  if model.startswith("list["):
    if not isinstance(value, list):
      raise ValueError(f"{where}: expected a list. Received: {value!r}")
    for i, item in enumerate(value):
      _check_model(item, model[5:-1], f"{where}[{i}]")
    return
  if model.startswith("dict("):
    inner = model[5:-1].split(", ", 1)[1]
    if not isinstance(value, dict):
      raise ValueError(f"{where}: expected a JSON object. Received: {value!r}")
    for key, item in value.items():
      _check_model(item, inner, f"{where}.{key}")
    return
  scalars = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}
  if model in scalars:
    ok = isinstance(value, scalars[model]) and not (model == "int" and isinstance(value, bool))
    if not ok:
      raise ValueError(f"{where}: expected {model}. Received: {value!r} "
                       f"({type(value).__name__})")
    return
  cls = getattr(client, model)
  if not isinstance(value, dict):
    raise ValueError(f"{where}: expected a JSON object ({model}). Received: {value!r}")
  by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
  for key, item in value.items():
    if key not in by_json:
      near = difflib.get_close_matches(key, list(by_json), n=1)
      hint = f" Did you mean {near[0]!r}?" if near else ""
      raise ValueError(f"{where}: unknown field {key!r} for {model} (known: "
                       f"{sorted(by_json)}).{hint}")
    _check_model(item, cls.openapi_types[by_json[key]], f"{where}.{key}")


def _check_quantities(resources: Mapping[str, Any], where: str) -> None:
  from kubernetes.utils import parse_quantity  # pylint: disable=g-import-not-at-top  (1.6 s: only to submit)
  for kind in ("requests", "limits"):
    for resource, quantity in (resources.get(kind) or {}).items():
      try:
        parse_quantity(quantity)
      except ValueError:
        raise ValueError(f"{where}.{kind}.{resource}: not a Kubernetes quantity. Received: "
                         f"{quantity!r}") from None


def settings_from_env(environ: Mapping[str, str], layout: str, workers: int,
                      namespace_file: str = NAMESPACE_FILE) -> Optional[TFJobSettings]:
  """TFJob settings when opted in (layout multi_worker and TFX_PARALLEL_TFJOB_IMAGE
  set), else None. Raises ValueError naming the variable on an unknown name or a bad
  value (types and field names of JSON settings, Kubernetes quantities)."""
  image = environ.get(ENV_IMAGE, "")
  if layout != "multi_worker" or not image:
    return None
  for name in sorted(environ):
    if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX):] not in _SETTINGS:
      known = [ENV_PREFIX + s for s in _SETTINGS]
      near = difflib.get_close_matches(name, known, n=1)
      hint = f" Did you mean {near[0]}?" if near else ""
      raise ValueError(f"{name}: unknown TFJob setting.{hint} Known: {', '.join(known)}")

  def read(suffix, parse, default):
    name = ENV_PREFIX + suffix
    if name not in environ:
      return default
    try:
      return parse(environ[name])
    except ValueError as e:
      raise ValueError(f"{name}: cannot parse {environ[name]!r}: {e}") from None

  def json_of(model):
    def parse(text):
      value = json.loads(text)
      _check_model(value, model, "value")
      return value
    return parse

  def count(minimum):
    def parse(text):
      value = int(text)
      if value < minimum:
        raise ValueError(f"must be >= {minimum}")
      return value
    return parse

  def chief(text):
    if text not in ("0", "1"):
      raise ValueError("must be 0 or 1 (the webhook allows one Chief)")
    return int(text)

  def seconds(text):
    value = float(text)
    if not value > 0:
      raise ValueError("must be > 0")
    return value

  def orphan_seconds(text):
    value = seconds(text)
    if value < MIN_ORPHAN_SECONDS:
      raise ValueError(orphan_limit_problem())
    return value

  resources = read("RESOURCES", json_of("V1ResourceRequirements"), {})
  try:
    _check_quantities(resources, "value")
  except ValueError as e:
    raise ValueError(f"{ENV_PREFIX}RESOURCES: {e}") from None
  namespace = read("NAMESPACE", str, None) or _own_namespace(namespace_file)
  owner = None
  if environ.get(ENV_KFP_POD_NAME) and environ.get(ENV_KFP_POD_UID) \
      and namespace == _own_namespace(namespace_file):
    # An owner in another namespace counts as absent: the garbage collector would
    # delete the TFJob at once. So only in the pod's own namespace.
    owner = (environ[ENV_KFP_POD_NAME], environ[ENV_KFP_POD_UID])
  return TFJobSettings(
      image=image,
      namespace=namespace,
      worker_replicas=read("WORKERS", count(1), workers),
      chief_replicas=read("CHIEF", chief, 0),
      gpus_per_replica=read("GPUS", count(0), 0),
      node_selector=read("NODE_SELECTOR", json_of("dict(str, str)"), {}),
      tolerations=tuple(read("TOLERATIONS", json_of("list[V1Toleration]"), [])),
      resources=resources,
      timeout_seconds=read("TIMEOUT_SECONDS", seconds, 86400.0),
      max_restarts=read("MAX_RESTARTS", count(0), 3),
      pending_grace_seconds=read("PENDING_GRACE_SECONDS", seconds, 300.0),
      unschedulable_grace_seconds=read("UNSCHEDULABLE_GRACE_SECONDS", seconds,
                                       UNSCHEDULABLE_GRACE_SECONDS),
      ttl_seconds=read("TTL_SECONDS", count(1), 600),
      orphan_seconds=read("ORPHAN_SECONDS", orphan_seconds, ORPHAN_SECONDS),
      owner=owner)


def opted_in(environ: Mapping[str, str], layout: str) -> bool:
  """Whether training runs on Kubernetes replicas (a TFJob or a TrainJob) rather than on
  this machine: layout ``multi_worker`` and :data:`ENV_IMAGE` set."""
  return layout == "multi_worker" and bool(environ.get(ENV_IMAGE))


def default_api_client():
  """The API client of the pod's service account (in a cluster), else of the kubeconfig."""
  # Optional and slow (1.6 s): only a step that submits or reads the cluster needs it.
  from kubernetes import client, config  # pylint: disable=g-import-not-at-top
  try:
    config.load_incluster_config()
  except config.ConfigException:
    config.load_kube_config()
  return client.ApiClient()
