"""The object store that the replicas of a multi-node job share with the executor.

A multi-node job (TFJob or TrainJob, see tfjob.py) runs its replicas in pods of their
own: they cannot see the KFP launcher's local copies (``/minio/...``, ``/s3/...``,
``/gcs/...``) in the executor's pod. So the executor and the replicas read the job file
and the Examples, and write the checkpoints, the model and the history, at the artifacts'
remote URIs, through TensorFlow filesystems:

* ``gs://``: ``tensorflow-io-gcs-filesystem`` (a TensorFlow 2.16 dependency), credentials
  from the node or workload identity, as the KFP launcher's own GCS client.
* ``s3://`` and KFP's ``minio://`` (which the entry point names ``s3://``: MinIO and
  SeaweedFS speak the S3 API): ``tensorflow-io`` 0.37.1, whose wheel requires
  ``tensorflow>=2.16,<2.17`` and registers the ``s3`` scheme on ``import tensorflow_io``.
  Its S3 client reads its settings from the process environment when the first ``s3://``
  file is opened (tensorflow/io v0.37.1
  ``tensorflow_io/core/filesystems/s3/s3_filesystem.cc`` ``GetS3Client``: ``S3_ENDPOINT``
  (a URL; its scheme decides HTTP or HTTPS), ``GetDefaultClientConfig``:
  ``S3_CONNECT_TIMEOUT_MSEC``, ``S3_REQUEST_TIMEOUT_MSEC``, ``S3_CA_FILE``); credentials
  and region come from the AWS SDK's default chain (``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``).

The settings come, first, from the step's ``TFX_PARALLEL_S3_*`` env; then from the KFP
launcher's own session for the bucket, which it records with every artifact and hands
back in the input artifacts' metadata (``store_session_info``: :func:`session_settings`;
the entry point passes it); then KFP's defaults for its ``minio://`` root (kubeflow/pipelines
``backend/src/v2/config/env.go`` ``getDefaultMinioSessionInfo``: region ``minio``,
``disableSSL`` true, secret ``mlpipeline-minio-artifact`` with keys ``accesskey`` and
``secretkey``; ``backend/src/v2/objectstore/object_store.go`` 2.0.5:294 ``MinioDefaultEndpoint``:
``$MINIO_SERVICE_SERVICE_HOST:$MINIO_SERVICE_SERVICE_PORT`` when the pod has them, else
``minio-service.kubeflow:9000``; from 2.16 ``seaweedfs.kubeflow:9000``,
``objectstore/config.go`` 2.16.0:29: :func:`kfp_minio_endpoint`). Kubeflow 1.11 (KFP
2.15) puts SeaweedFS behind the same ``minio-service`` Service and secret (kubeflow/
manifests v1.11.0 ``applications/pipeline/upstream/third-party/seaweedfs/base/seaweedfs/
minio-service.yaml``); KFP 2.16 (Kubeflow 26.03) has only the ``seaweedfs`` Service.
Other stores (AWS S3, a MinIO elsewhere) are named by ``TFX_PARALLEL_S3_*``
(:data:`SETTINGS`), all checked before any pod is created.

The executor reads the secret through the Kubernetes API, in its own namespace for itself
(as the KFP launcher in the same pod does, with the same service account) and in the
job's namespace for the replicas, which get it by ``secretKeyRef``: the credentials never
appear in the job's manifest. Before the job is submitted, :func:`probe` writes, reads
back and deletes an object beside the job file with the filesystem the replicas use.
"""
import base64
import dataclasses
import difflib
import json
import os
import socket
import sys
import traceback
import uuid
from typing import Any, Callable, Dict, Mapping, MutableMapping, Optional, Tuple

from tfx_parallel.components.distributed_trainer import failures
from tfx_parallel.components.distributed_trainer.kube.settings import default_api_client

ENV_PREFIX = "TFX_PARALLEL_S3_"
# Setting suffix -> what it means; the one list of known names.
SETTINGS = {
    "ENDPOINT": "the S3 API's URL, http://host:port or https://host[:port] (default: the "
                "KFP launcher's session for the bucket, else KFP's store: "
                "http://seaweedfs.kubeflow:9000 from 2.16, http://minio-service.kubeflow:9000 "
                "before)",
    "REGION": "the region the client signs for (default: minio, as KFP's launcher)",
    "SECRET": "the Kubernetes secret with the credentials, in the job's namespace "
              "(default: mlpipeline-minio-artifact)",
    "ACCESS_KEY_KEY": "the secret's key holding the access key id (default: accesskey)",
    "SECRET_KEY_KEY": "the secret's key holding the secret access key (default: secretkey)",
    "VERIFY_SSL": "1 or 0: check the endpoint's TLS certificate (default 1; HTTPS only)",
}
KFP_MINIO_SERVICE = "minio-service.kubeflow:9000"  # Up to KFP 2.15 (Kubeflow 1.11).
# From KFP 2.16 (Kubeflow 26.03): the seaweedfs Service's S3 port 9000 (-> 8333), the
# launcher's default (kubeflow/pipelines backend/src/v2/objectstore/config.go 2.16.0:29;
# manifests/kustomize/third-party/seaweedfs/base/seaweedfs/seaweedfs-service.yaml
# 2.16.0:14-21 keeps 8333 and 9000).
KFP_SEAWEEDFS_SERVICE = "seaweedfs.kubeflow:9000"
KFP_MINIO_SECRET = "mlpipeline-minio-artifact"
KFP_MINIO_REGION = "minio"
# The variables tensorflow-io's S3 client and the AWS SDK read (see the module docstring).
S3_ENDPOINT, S3_VERIFY_SSL = "S3_ENDPOINT", "S3_VERIFY_SSL"
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
# The AWS SDK for C++ in tensorflow-io reads AWS_DEFAULT_REGION for a client's region;
# AWS_REGION is the name TensorFlow's S3 documentation gives. Both get the region.
AWS_REGION, AWS_DEFAULT_REGION = "AWS_REGION", "AWS_DEFAULT_REGION"
REMOTE_SCHEMES = ("gs://", "s3://")


class ObjectStoreError(ValueError):
  """The replicas could not share the artifacts; the message names the URI or setting."""


@dataclasses.dataclass(frozen=True)
class ObjectStore:
  """Where a multi-node job's files are, and how a process reaches them."""
  scheme: str                      # "gs://", "s3://", or "" (a volume at the same path)
  endpoint: str = ""               # S3 only: the URL S3_ENDPOINT gets.
  region: str = ""
  secret: str = ""
  access_key_key: str = "accesskey"
  secret_key_key: str = "secretkey"
  verify_ssl: bool = True

  @property
  def is_s3(self) -> bool:
    return self.scheme == "s3://"

  def plain_env(self) -> Dict[str, str]:
    """The settings every process of the job gets as values (no credentials)."""
    if not self.is_s3:
      return {}
    return {S3_ENDPOINT: self.endpoint, AWS_REGION: self.region,
            AWS_DEFAULT_REGION: self.region, S3_VERIFY_SSL: "1" if self.verify_ssl else "0"}

  def replica_env(self) -> Dict[str, Any]:
    """The replica container's env: values, and the credentials by ``secretKeyRef``
    (a ``V1EnvVarSource`` in the API's camelCase)."""
    env: Dict[str, Any] = dict(self.plain_env())
    if self.is_s3:
      for name, key in ((AWS_ACCESS_KEY_ID, self.access_key_key),
                        (AWS_SECRET_ACCESS_KEY, self.secret_key_key)):
        env[name] = {"secretKeyRef": {"name": self.secret, "key": key}}
    return env


def env_var(name: str, value: Any) -> Dict[str, Any]:
  """A container env entry (``V1EnvVar``): a string is its value, a dict its
  ``valueFrom`` (such as :meth:`ObjectStore.replica_env`'s ``secretKeyRef``)."""
  return {"name": name, "value": value} if isinstance(value, str) else \
      {"name": name, "valueFrom": dict(value)}


def remote_mode(environ: Mapping[str, str]) -> bool:
  """Whether the step's artifacts must be read and written at their remote URIs: the
  DistributedTrainer submits a multi-node job (``TFX_PARALLEL_TFJOB_IMAGE`` is its
  opt-in, tfjob.py), whose replicas cannot see this pod's files."""
  return bool(environ.get("TFX_PARALLEL_TFJOB_IMAGE"))


def _scheme(uri: str, what: str) -> str:
  """gs://, s3://, or "" for a path (a volume the replicas mount at the same path)."""
  for scheme in REMOTE_SCHEMES:
    if uri.startswith(scheme):
      if len(uri) == len(scheme) or uri[len(scheme)] == "/":
        raise ObjectStoreError(f"{what}: no bucket in {uri!r}")
      return scheme
  if uri.startswith("minio://"):
    raise ObjectStoreError(f"{what}: {uri!r} must be named s3:// for TensorFlow (the "
                           f"entry point does so); got minio://")
  if "://" in uri or not uri.startswith("/"):
    raise ObjectStoreError(f"{what}: the replicas of a multi-node job read gs://, s3:// "
                           f"(minio:// as s3://) or an absolute path on a volume they "
                           f"mount. Received: {uri!r}")
  return ""


def _settings(environ: Mapping[str, str]) -> Dict[str, str]:
  for name in sorted(environ):
    if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX):] not in SETTINGS:
      known = [ENV_PREFIX + s for s in SETTINGS]
      near = difflib.get_close_matches(name, known, n=1)
      hint = f" Did you mean {near[0]}?" if near else ""
      raise ObjectStoreError(f"{name}: unknown object store setting.{hint} Known: "
                             f"{', '.join(known)}")
  return {s: environ[ENV_PREFIX + s] for s in SETTINGS if ENV_PREFIX + s in environ}


def _resolves(host: str) -> bool:
  """Whether `host` has an address in this pod's DNS (a Service's short name resolves
  through the pod's search path)."""
  try:
    return bool(socket.getaddrinfo(host, None))
  except (OSError, UnicodeError):
    return False


def kfp_minio_endpoint(environ: Mapping[str, str],
                       resolves: Optional[Callable[[str], bool]] = None) -> str:
  """KFP's default endpoint for its ``minio://`` root as a URL (HTTP, as its
  ``disableSSL`` true), for a step without the launcher's session (no input artifact,
  e.g. the ingest): ``$MINIO_SERVICE_SERVICE_HOST:PORT`` when the Service is in this
  namespace; else ``minio-service.kubeflow:9000`` when that name resolves (the launcher's
  default up to 2.15, config.go 2.15.0:29; on Kubeflow 1.11 it fronts SeaweedFS, whose
  own ``seaweedfs`` Service there has no port 9000: kubeflow/manifests v1.11.0
  ``.../third-party/seaweedfs/base/seaweedfs/seaweedfs-service.yaml``); else
  ``seaweedfs.kubeflow:9000`` when that name resolves (the default from 2.16,
  kubeflow/pipelines backend/src/v2/objectstore/config.go 2.16.0:29, 2.17.0:29; 2.16
  ships no ``minio-service``); else ``minio-service.kubeflow:9000``."""
  host, port = environ.get("MINIO_SERVICE_SERVICE_HOST"), environ.get("MINIO_SERVICE_SERVICE_PORT")
  if host and port:
    return f"http://{host}:{port}"
  resolves = resolves or _resolves
  if (not resolves(KFP_MINIO_SERVICE.split(":")[0])
      and resolves(KFP_SEAWEEDFS_SERVICE.split(":")[0])):
    return "http://" + KFP_SEAWEEDFS_SERVICE
  return "http://" + KFP_MINIO_SERVICE


def from_uris(uris: Mapping[str, str], environ: Mapping[str, str]) -> ObjectStore:
  """The store of the job's files, `uris` {what: URI}. Raises ObjectStoreError naming
  the URI or the ``TFX_PARALLEL_S3_*`` setting: a pod-local path, two schemes or two
  buckets, an unknown setting, a malformed endpoint, S3 settings for a gs:// root."""
  settings = _settings(environ)
  schemes = {what: _scheme(uri, what) for what, uri in sorted(uris.items())}
  if len(set(schemes.values())) > 1:
    raise ObjectStoreError("The job's files must be on one object store. Received: " +
                           ", ".join(f"{w}={uris[w]!r}" for w in sorted(uris)))
  scheme = next(iter(schemes.values()))
  if not scheme:  # A shared volume: kubeflow/entrypoint.py never hands KFP's local copies.
    return ObjectStore(scheme)
  buckets = {uri[len(scheme):].split("/", 1)[0] for uri in uris.values()}
  if len(buckets) > 1:  # One secret, one endpoint: the KFP launcher's session per root.
    raise ObjectStoreError(f"The job's files must be in one bucket. Received buckets "
                           f"{sorted(buckets)} in: " +
                           ", ".join(f"{w}={uris[w]!r}" for w in sorted(uris)))
  if scheme == "gs://":
    if settings:
      raise ObjectStoreError(f"{ENV_PREFIX}{sorted(settings)[0]}: an S3 setting, but the "
                             f"job's files are on gs:// ({next(iter(uris.values()))!r})")
    return ObjectStore(scheme)
  endpoint = settings.get("ENDPOINT") or kfp_minio_endpoint(environ)
  host = endpoint.split("://", 1)[-1]
  if not endpoint.startswith(("http://", "https://")) or not host or "/" in host.rstrip("/"):
    raise ObjectStoreError(f"{ENV_PREFIX}ENDPOINT must be http://host[:port] or "
                           f"https://host[:port]. Received: {endpoint!r}")
  verify = settings.get("VERIFY_SSL", "1")
  if verify not in ("0", "1"):
    raise ObjectStoreError(f"{ENV_PREFIX}VERIFY_SSL must be 0 or 1. Received: {verify!r}")
  for key in ("SECRET", "ACCESS_KEY_KEY", "SECRET_KEY_KEY", "REGION"):
    if key in settings and not settings[key].strip():
      raise ObjectStoreError(f"{ENV_PREFIX}{key} is empty; unset it for the default")
  return ObjectStore(scheme, endpoint=endpoint.rstrip("/"),
                     region=settings.get("REGION", KFP_MINIO_REGION),
                     secret=settings.get("SECRET", KFP_MINIO_SECRET),
                     access_key_key=settings.get("ACCESS_KEY_KEY", "accesskey"),
                     secret_key_key=settings.get("SECRET_KEY_KEY", "secretkey"),
                     verify_ssl=verify == "1")


def read_credentials(store: ObjectStore, namespace: str, api_client) -> Tuple[str, str]:
  """(access key id, secret access key) from the store's secret in `namespace`, read as
  the kubelet resolves the replicas' ``secretKeyRef``. Raises ObjectStoreError naming
  the secret, key, namespace or missing permission."""
  from kubernetes import client  # pylint: disable=g-import-not-at-top
  from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
  where = f"secret {namespace}/{store.secret} ({ENV_PREFIX}SECRET)"
  try:
    secret = client.CoreV1Api(api_client).read_namespaced_secret(store.secret, namespace)
  except ApiException as e:
    if e.status == 403:
      raise ObjectStoreError(f"{where}: this step's service account may not `get secrets` "
                             f"in {namespace}; grant it (the KFP launcher in this pod needs "
                             f"the same)") from None
    if e.status == 404:
      raise ObjectStoreError(f"{where} does not exist; the replicas' secretKeyRef would "
                             f"keep their pods from starting (CreateContainerConfigError)"
                             ) from None
    raise
  data = secret.data or {}
  values = []
  for setting, key in (("ACCESS_KEY_KEY", store.access_key_key),
                       ("SECRET_KEY_KEY", store.secret_key_key)):
    if key not in data:
      raise ObjectStoreError(f"{where} has no key {key!r} ({ENV_PREFIX}{setting}). Keys: "
                             f"{sorted(data)}")
    values.append(base64.b64decode(data[key]).decode())
  return values[0], values[1]


def process_env(store: ObjectStore, credentials: Optional[Tuple[str, str]],
                environ: Mapping[str, str]) -> Dict[str, str]:
  """The variables this process must have for `store`. Raises ObjectStoreError naming a
  variable the pod already has with another value (the client would use that one)."""
  wanted = dict(store.plain_env())
  if credentials:
    wanted[AWS_ACCESS_KEY_ID], wanted[AWS_SECRET_ACCESS_KEY] = credentials
  for name, value in sorted(wanted.items()):
    if environ.get(name) not in (None, value):
      shown = value if name != AWS_SECRET_ACCESS_KEY else "<from the secret>"
      raise ObjectStoreError(f"{name} is already set in this pod to another value than the "
                             f"object store's ({shown}); the replicas would use one, the "
                             f"executor the other. Unset it, or set {ENV_PREFIX}* instead")
  return wanted


def register(store: ObjectStore) -> None:
  """Makes TensorFlow open the store's URIs in this process (``s3``: tensorflow-io)."""
  if store.is_s3:
    # Optional and slow to load: only an s3:// store needs it; importing registers s3://.
    import tensorflow_io  # pylint: disable=g-import-not-at-top,unused-import


def register_uri(uri: str) -> None:
  """A replica's :func:`register`: its job file's scheme names the store."""
  if uri.startswith("s3://"):
    register(ObjectStore("s3://"))


def probe(directory: str, store: ObjectStore) -> None:
  """Writes, reads back and deletes an object in `directory` with TensorFlow's
  filesystem, as the replicas will. Raises ObjectStoreError naming the directory, the
  endpoint and the setting to check."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  register(store)
  uri = f"{directory.rstrip('/')}/_probe-{uuid.uuid4().hex}"
  text = "tfx-parallel object store probe"
  try:
    with tf.io.gfile.GFile(uri, "w") as f:
      f.write(text)
    with tf.io.gfile.GFile(uri) as f:
      read = f.read()
    tf.io.gfile.remove(uri)
  except (tf.errors.OpError, OSError) as e:
    where = (f"the S3 API at {store.endpoint} ({ENV_PREFIX}ENDPOINT), region "
             f"{store.region!r}, credentials of secret {store.secret!r} "
             f"({ENV_PREFIX}SECRET)" if store.is_s3 else "Cloud Storage")
    raise ObjectStoreError(f"The multi-node job's replicas could not use {directory!r}: "
                           f"writing and reading {uri!r} through {where} failed: "
                           f"{type(e).__name__}: {str(e).strip()}") from None
  if read != text:
    raise ObjectStoreError(f"{uri!r}: read back {read!r}, wrote {text!r}")


def _setup(store: ObjectStore, namespace: str, api_client,
           environ: MutableMapping[str, str]) -> None:
  """Puts the store's variables (credentials from its secret in `namespace`) into
  `environ` (the process environment: before TensorFlow opens an s3:// file)."""
  credentials = read_credentials(store, namespace, api_client) if store.is_s3 else None
  environ.update(process_env(store, credentials, environ))
  register(store)


# The pod's namespace, as the service account's token mount has it (Kubernetes
# "Accessing the API from a Pod"); tfjob.py reads the same file.
_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def job_namespace(environ: Mapping[str, str]) -> str:
  """The namespace of the replicas' secret: ``TFX_PARALLEL_TFJOB_NAMESPACE``, else this
  pod's (tfjob.settings_from_env's rule)."""
  if environ.get("TFX_PARALLEL_TFJOB_NAMESPACE"):
    return environ["TFX_PARALLEL_TFJOB_NAMESPACE"]
  try:
    with open(_NAMESPACE_FILE) as f:
      return f.read().strip() or "default"
  except OSError:
    return "default"


def session_settings(session_info: str) -> Dict[str, str]:
  """``TFX_PARALLEL_S3_*`` settings from the KFP launcher's own session for the bucket:
  the ``store_session_info`` custom property it records with every output artifact and
  hands back in the input artifacts' metadata (kubeflow/pipelines
  ``backend/src/v2/metadata/client.go`` ``RecordArtifact``; ``objectstore.SessionInfo``
  ``{"Provider", "Params": {"endpoint", "region", "disableSSL", "fromEnv", "secretName",
  "accessKeyKey", "secretKeyKey"}}``, from the ``kfp-launcher`` ConfigMap's providers or
  the MinIO defaults: ``minio-service.kubeflow:9000`` up to 2.15, ``seaweedfs.kubeflow:9000``
  from 2.16: ``backend/src/v2/objectstore/config.go`` 2.15.0:29, 2.16.0:29). {} for
  another provider (gs) or unreadable info."""
  try:
    session = json.loads(session_info)
    params = session.get("Params") or {}
  except (TypeError, ValueError, AttributeError):
    return {}
  if session.get("Provider") not in ("minio", "s3") or not isinstance(params, dict):
    return {}
  out = {}
  if params.get("endpoint"):
    endpoint = params["endpoint"]
    if "://" not in endpoint:
      endpoint = ("http://" if params.get("disableSSL") == "true" else "https://") + endpoint
    out["ENDPOINT"] = endpoint
  for setting, key in (("REGION", "region"), ("SECRET", "secretName"),
                       ("ACCESS_KEY_KEY", "accessKeyKey"), ("SECRET_KEY_KEY", "secretKeyKey")):
    if params.get(key):
      out[setting] = params[key]
  return out


def prepare_executor(uris: Mapping[str, str], environ: MutableMapping[str, str],
                     api_client=None, session_info: str = "") -> ObjectStore:
  """The entry point's set-up of the executor's process for a multi-node step: the
  store of the step's artifacts (`uris` {what: URI}, their remote names), its settings
  and credentials in `environ`, the s3 filesystem registered. Before the executor runs,
  so that its own reads of the Examples work; raises ObjectStoreError.

  `session_info`: an input artifact's ``store_session_info`` (:func:`session_settings`);
  it fills the ``TFX_PARALLEL_S3_*`` settings the step's env does not set, in `environ`,
  where the executor's check before the job (:func:`check_for_replicas`) reads them."""
  _settings(environ)  # Unknown names first, before they could be shadowed.
  if any(uri.startswith("s3://") for uri in uris.values()):
    for setting, value in session_settings(session_info).items():
      environ.setdefault(ENV_PREFIX + setting, value)
  store = from_uris(uris, environ)
  _setup(store, job_namespace(environ),
         api_client if api_client is not None or not store.is_s3 else default_api_client(),
         environ)
  return store


def run_and_exit(main: Callable[[], Optional[int]]) -> None:
  """Runs `main` and ends the process with its status without the interpreter's
  teardown: tensorflow-io 0.37.1's S3 client is destroyed after the AWS SDK it needs
  there ("pure virtual method called", SIGABRT, exit 134), and a TFJob/JobSet would take
  134 (>= 128) for a retryable crash and restart a replica that had succeeded.

  An error that escapes `main` ends the process with its class's code
  (failures.exit_code): >= 128 for a resumable one (the operator restarts the replica),
  else 1-127 (the job fails at once)."""
  status = 1
  try:
    status = main() or 0
  except SystemExit as e:
    status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
  except BaseException as e:  # pylint: disable=broad-except  # Reported, then its class's code.
    traceback.print_exc()
    status = failures.exit_code(e) if isinstance(e, Exception) else 1
  finally:
    if not isinstance(status, int) or not 0 <= status <= 255:
      # An exit status is 8 bits: sys.exit(256) would end as 0 (success) and 384 as a
      # retryable 128. Out of range is a code error: permanent.
      print(f"[trainer] ERROR: exit status {status!r} is not 0-255; exiting "
            f"{failures.NOT_RESUMABLE_EXIT_CODE}", file=sys.stderr)
      status = failures.NOT_RESUMABLE_EXIT_CODE
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # pylint: disable=protected-access


def job_uris(job, job_uri: str) -> Dict[str, str]:
  """{what: URI} of every file a replica opens (a train.Job's directories)."""
  uris = {"job file": job_uri, "examples_uri": job.examples_uri, "model_dir": job.model_dir,
          "model_run_dir": job.model_run_dir, "history_dir": job.history_dir,
          "checkpoint_dir": job.checkpoint_dir}
  for optional in ("transform_graph_uri", "base_model_dir"):  # Warm start: the base.
    if getattr(job, optional, None):
      uris[optional] = getattr(job, optional)
  return uris


def check_for_replicas(job, job_uri: str, namespace: str, api_client,
                       environ: MutableMapping[str, str]) -> Dict[str, Any]:
  """Before any pod: the job's files are on one object store the replicas can reach
  (the secret they will mount exists in `namespace` with both keys, and agrees with the
  credentials this process has; this process, set up as they will be, writes and reads
  a probe object beside the job file). Returns the env the replicas need (values, and
  the credentials as ``secretKeyRef``). Raises ObjectStoreError."""
  store = from_uris(job_uris(job, job_uri), environ)
  _setup(store, namespace, api_client, environ)
  if store.scheme:  # A volume's path: the executor writes the job file there next.
    probe(os.path.dirname(job_uri), store)
  return store.replica_env()
