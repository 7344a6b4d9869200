"""Plays the open-source KFP v2 driver and launcher for a compiled package, on this machine.

What each part does is copied from kubeflow/pipelines ``backend/src/v2`` (KFP 2.x):

* **Driver** (``driver/driver.go``, ``driver/resolve.go``): a task's parameters come only
  from ``runtimeValue.constant`` (anything else: "param runtime value spec of type %T not
  implemented"), are checked against the component's ``inputDefinitions`` and handed over
  as ``parameterValues``; input artifacts are the upstream task's outputs as ML Metadata
  returns them (``toRuntimeArtifact``: name = MLMD id, uri, metadata, and an *empty*
  ``instanceSchema``); each output artifact gets ``<root>/<task>/<salt>/<key>`` and its
  declared type; ``outputFile`` is ``LocalPathForURI(<root>/<task>/<salt>)/
  output_metadata.json``. Resolver tasks fail ("resolver not implemented yet").
* **Launcher** (``component/launcher_v2.go``): downloads each input artifact from the
  object store to ``LocalPathForURI(uri)`` (files only: an object store has no empty
  directories), creates only the *parent* directory of each output's local path,
  replaces ``{{$}}`` in the container's command and args with the ExecutorInput JSON,
  runs the command, reads ``outputFile``, merges each output artifact
  (``mergeRuntimeArtifacts``: the executor's uri if non-empty, metadata fields), uploads
  its local path to the object store and records it in ML Metadata
  (``StructValueToMLMDValue``: null is rejected, bool becomes int, a list becomes
  ``{"list": ...}``, a struct ``{"struct": ...}``).

Tags named below are kubeflow/pipelines tags; "master" is 7b70c7b. Options pick the
backend generation:

* ``publish_logs`` (default True, ``backend/src/v2/cmd/driver/main.go``:101
  ``flag.String("publish_logs", "true", ...)``; ``argocompiler/container.go``:144
  ``publishLogsArg`` reads ``PUBLISH_LOGS``, "true" in ``manifests/kustomize/base/pipeline/
  ml-pipeline-apiserver-deployment.yaml``:114), from
  2.5.0: the driver adds an output ``executor-logs`` typed ``{schemaTitle:
  system.Artifact}`` (``driver/driver.go``:747-759 ``provisionOutputs``); the launcher
  suffixes its URI with the retry index ``-0`` (``launcher_v2.go``:538-597
  ``qualifyExecutorLogsURI``), tees the step's stdout and stderr into its local path
  (``launcher_v2.go``:632-653 ``getLogWriter``), never merges the executor's entry for
  it (``launcher_v2.go``:802-808), uploads and records it;
* ``output_file``: ``"task_root"`` (2.15.0 and later, ``driver/driver.go``:791-799:
  ``LocalPathForURI(<root>/<task>/<salt>)/output_metadata.json``) or ``"legacy"``
  (through 2.14.x: ``component.OutputMetadataFilepath`` =
  ``/tmp/kfp_outputs/output_metadata.json``, ``launcher_v2.go``:526).

Also followed: the executor output is parsed with ``protojson.Unmarshal``
(``launcher_v2.go``:1208-1235 ``getExecutorOutputFile``): unknown fields, duplicate
keys and NaN/Infinity (not JSON) are errors. Each output is recorded with the custom
properties ``display_name`` (the output key) and ``store_session_info`` (the bucket's
session, JSON) unless the executor set them (``metadata/client.go``:1234-1249
``RecordArtifact``; the default MinIO session is ``config/env.go``:177-193), and so they
come back in the metadata of downstream input artifacts (``metadata/converter.go``:181
``toRuntimeArtifact`` copies every custom property). :func:`fingerprint` is the
driver's cache key (``driver/cache.go``:87-129 ``getFingerPrint``,
``cacheutils/cache.go``:151-229 ``GenerateCacheKey`` and ``GenerateFingerPrint``); a task
whose fingerprint is in :attr:`Launcher.cache` is not run, its recorded outputs are
reused.

ML Metadata is a real ``ml_metadata`` store (SQLite) written as the KFP metadata client
writes the cluster's (:class:`KfpMetadata`, ``backend/src/v2/metadata/client.go`` and
``converter.go``): artifact types named by schema title (``tfx.Examples``,
``tfx_parallel.components.common.artifacts.ConvergenceMetrics``), every metadata key a
custom property, every number a double, lists and structs wrapped, contexts
``system.Pipeline`` / ``system.PipelineRun``. Doubles keep 6 decimals there as on the
cluster's server: both are ml-metadata's ``QueryConfigExecutor::Bind(double)``
(google/ml-metadata ``ml_metadata/metadata_store/query_config_executor.cc``,
``std::to_string``, i.e. ``%f``). The driver reads input artifacts back from that store.
A task whose ``cachingOptions.enableCache`` is false is never looked up in the cache
(``driver/cache.go``:133 at master, ``driver/driver.go``:1648 at 2.1.0). PVC names are
part of the fingerprint only from 2.15.0 (``pvc_cache_key``; commit 1b3decdc81).

* ``retries`` (default True; 2.4.1 and later): a task's ``retryPolicy.maxRetryCount``
  is honoured as the Argo compiler does (``argocompiler/container.go`` 2.4.1:236,275 and
  473-498 ``getTaskRetryStrategy``: the ``retryStrategy`` sits on the *executor*
  template; 2.1.0-2.4.0 have no retry code): a failed attempt runs again in a fresh pod with the same ExecutorInput
  (the driver does not run again), its executor-logs URI suffixed with the attempt
  index (``launcher_v2.go`` 2.17.0:538-567 ``qualifyExecutorLogsURI``, from
  ``KFP_RETRY_INDEX``). Backoff waits are not emulated. ``interrupt(task, attempt,
  pod)`` is polled while a step runs; True SIGKILLs the pod's processes, as a preempted
  node would.
* ``pvcMount`` of the PlatformSpec: the claim's directory (``<workdir>/pvc/<claim>``,
  kept across pods and retries) appears at ``mountPath`` in every pod of the executor
  (``driver/k8s.go`` ``makeVolumeMountPatch``). A new claim's root is root:root 0755, as
  a fresh volume's is (KFP sets no ``fsGroup``).
* ``run_as`` (a uid; tests running as root): the step runs as that user, as an image
  with a non-root user does; what the launcher made in the pod (downloads, output
  folders, ``HOME``) is that user's (it runs in the same container: from 2.1/2.2 it
  creates ``/minio`` etc. as the image's user), the claims stay root's. The venv's
  interpreter is under /root (0700) here, so the step runs this venv's packages under a
  world-readable copy of the interpreter and standard library (:func:`step_python`);
  the venv is not changed. The workdir must be searchable by others.

* ``download_prefix`` (:data:`DOWNLOAD_PREFIXES`): "under" for 2.17.0 and later, "raw"
  for 2.16.0 and before, in both stores below.
* ``s3`` (a boto3 S3 client, e.g. of moto's server): the object store is that S3 API
  (``minio://b/k`` and ``s3://b/k`` are bucket ``b``, key ``k``, as KFP's MinIO serves
  them) instead of a directory. Its download is ``DownloadBlob`` (``objectstore/
  object_store.go`` master:176-205 with ``sanitizeDownloadPath`` and ``downloadFile``):
  every listed key becomes a file at its cleaned relative path, a zero-byte "directory"
  object ``k/d/`` too, so a key below it then fails in ``os.MkdirAll`` with "not a
  directory" (kubeflow/pipelines#13476). :attr:`Launcher.downloaded` counts the bytes each task's
  launcher downloaded (``downloadArtifacts`` copies every input artifact in full:
  ``launcher_v2.go`` master:927-1004).

Every task runs in its own "pod": a fresh directory that stands for ``/`` (the
container's ``TFX_PARALLEL_MOUNT_ROOT``), so a step can only read what the launcher
downloaded for it. The bucket is a directory of files keyed by object name.
Stricter than the real launcher on purpose: an output URI the launcher cannot map to a
local path fails here (the real one logs a warning and records an unusable URI), and so
does a missing executor output file (``getExecutorOutputFile`` at master treats it as an
empty output: every output would be recorded with its planned URI and no metadata).
"""
import copy
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

# LocalPathForURI, launcher_v2.go.
_LOCAL_PREFIXES = (("gs://", "gcs"), ("minio://", "minio"), ("s3://", "s3"))
MOUNT_ROOT_ENV = "TFX_PARALLEL_MOUNT_ROOT"
EXECUTOR_LOGS = "executor-logs"  # driver/driver.go:753
LEGACY_OUTPUT_FILE = "/tmp/kfp_outputs/output_metadata.json"  # launcher_v2.go:526
OUTPUT_FILES = ("task_root", "legacy")
# DownloadBlob's listing: "under" (2.17.0 and later: isBlobKeyUnderPrefix, object_store.go
# 2.17.0:171-174,192) or "raw" (2.16.0 and before: every key the raw prefix lists,
# object_store.go 2.16.0:127-154, at filepath.Join(localDir, filepath.Rel(blobDir, key)),
# so a sibling ".../examples_ref/x" of ".../examples" lands at "<local>/../examples_ref/x").
DOWNLOAD_PREFIXES = ("under", "raw")
# config/env.go:177-193 getDefaultMinioSessionInfo, as json.Marshal writes it (sorted keys).
MINIO_SESSION_INFO = json.dumps({"Provider": "minio", "Params": {
    "accessKeyKey": "accesskey", "disableSSL": "true", "endpoint": "seaweedfs.kubeflow:9000",
    "fromEnv": "false", "maxRetries": "5", "region": "minio", "secretKeyKey": "secretkey",
    "secretName": "mlpipeline-minio-artifact"}}, separators=(",", ":"), sort_keys=True)


def _ancestors(path: str) -> List[str]:
  parts, path = [], os.path.abspath(path)
  while path != os.path.dirname(path):
    parts.append(path)
    path = os.path.dirname(path)
  return parts[::-1]


def _chown_tree(path: str, uid: int) -> None:
  os.chown(path, uid, uid, follow_symlinks=False)
  for parent, dirs, files in os.walk(path):
    for name in dirs + files:
      os.chown(os.path.join(parent, name), uid, uid, follow_symlinks=False)


def step_python() -> Tuple[str, str]:
  """(python, its library directory) for a step run as another user: this venv's
  packages under a copy of its interpreter and standard library that every user can
  read (the venv's own interpreter lives under /root, 0700, here), made once per
  machine in the temp directory. The venv itself is not changed."""
  import tempfile  # pylint: disable=g-import-not-at-top
  base = os.path.realpath(os.path.join(sys.base_prefix))
  version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
  tag = hashlib.sha256(f"{base}|{sys.prefix}".encode()).hexdigest()[:12]
  top = os.path.join(tempfile.gettempdir(), f"tfx-parallel-step-python-{tag}")
  python = os.path.join(top, "venv", "bin", "python")
  library = os.path.join(top, "interp", "lib")
  if os.path.exists(os.path.join(top, ".complete")):
    return python, library
  building = f"{top}.building-{os.getpid()}"
  shutil.rmtree(building, ignore_errors=True)
  interp = os.path.join(building, "interp")
  os.makedirs(os.path.join(interp, "bin"))
  os.makedirs(os.path.join(interp, "lib"))
  shutil.copy2(os.path.join(base, "bin", version), os.path.join(interp, "bin", version))
  lib = os.path.join(base, "lib")
  for name in os.listdir(lib):
    if name.startswith("libpython"):  # Its RUNPATH names the original: LD_LIBRARY_PATH.
      shutil.copy2(os.path.join(lib, name), os.path.join(interp, "lib", name),
                   follow_symlinks=False)
  shutil.copytree(os.path.join(lib, version), os.path.join(interp, "lib", version),
                  symlinks=True, ignore=shutil.ignore_patterns(
                      "site-packages", "test", "__pycache__"))
  venv = os.path.join(building, "venv")
  os.makedirs(os.path.join(venv, "bin"))
  os.makedirs(os.path.join(venv, "lib", version))
  os.symlink(os.path.join(sys.prefix, "lib", version, "site-packages"),
             os.path.join(venv, "lib", version, "site-packages"))
  os.symlink(os.path.join(top, "interp", "bin", version), os.path.join(venv, "bin", "python"))
  with open(os.path.join(venv, "pyvenv.cfg"), "w") as f:
    f.write(f"home = {os.path.join(top, 'interp', 'bin')}\n"
            "include-system-site-packages = false\n")
  for parent, _, files in os.walk(building):
    os.chmod(parent, 0o755)
    for name in files:
      path = os.path.join(parent, name)
      if not os.path.islink(path):
        os.chmod(path, os.stat(path).st_mode | 0o444)
  open(os.path.join(building, ".complete"), "w").close()
  try:
    os.rename(building, top)
  except OSError:  # Another process made it first.
    shutil.rmtree(building, ignore_errors=True)
  return python, library


class LauncherError(RuntimeError):
  """The driver or launcher would fail here; the message says which task and why."""


def local_path_for_uri(uri: str) -> str:
  """``LocalPathForURI``: the path (relative to the pod's /) of a remote URI."""
  for scheme, directory in _LOCAL_PREFIXES:
    if uri.startswith(scheme):
      return os.path.join(directory, uri[len(scheme):])
  raise LauncherError(f"failed to generate local path for URI {uri}: unsupported storage "
                      "scheme")


def _mkdir_all(path: str, failed: str) -> None:
  """Go's ``os.MkdirAll(path, 0755)`` as ``downloadFile`` calls it (``object_store.go``
  master:176-205): an existing non-directory on the way is "not a directory"."""
  parts = os.path.abspath(path).split(os.sep)
  for i in range(2, len(parts) + 1):
    prefix = os.sep.join(parts[:i])
    if os.path.exists(prefix) and not os.path.isdir(prefix):
      raise LauncherError(f"{failed}failed to create local directory {path!r}: mkdir "
                          f"{prefix}: not a directory")
  os.makedirs(path, exist_ok=True)


def topological_order(tasks: Mapping[str, Any]) -> List[str]:
  """Task names so that every task comes after the tasks it depends on."""
  deps = {}
  for name, task in tasks.items():
    upstream = set(task.get("dependentTasks", []))
    for spec in task.get("inputs", {}).get("artifacts", {}).values():
      if "taskOutputArtifact" in spec:
        upstream.add(spec["taskOutputArtifact"]["producerTask"])
    deps[name] = upstream
  order = []
  while deps:
    ready = sorted(n for n, d in deps.items() if not d - set(order))
    if not ready:
      raise LauncherError(f"the DAG has a cycle among {sorted(deps)}")
    order.extend(ready)
    for name in ready:
      del deps[name]
  return order


def resolve_parameters(task_name: str, task: Mapping[str, Any],
                       component: Mapping[str, Any]) -> Dict[str, Any]:
  """The driver's ``resolveInputs`` for constant parameters: ``parameterValues``."""
  values = {}
  for name, spec in task.get("inputs", {}).get("parameters", {}).items():
    runtime = spec.get("runtimeValue")
    if runtime is None:
      raise LauncherError(f"{task_name}: parameter {name!r}: only runtimeValue parameters "
                          f"are resolved in this test, got {sorted(spec)}")
    if "constant" not in runtime:
      kind = next(iter(runtime), "none")
      raise LauncherError(f"{task_name}: parameter {name!r}: param runtime value spec of "
                          f"type {kind} not implemented")
    values[name] = runtime["constant"]
  for name, spec in component.get("inputDefinitions", {}).get("parameters", {}).items():
    if name not in values:
      if spec.get("isOptional"):
        continue
      if "defaultValue" not in spec:
        raise LauncherError(f"{task_name}: neither value nor default value provided for "
                            f"non-optional parameter {name!r}")
      values[name] = spec["defaultValue"]
    kind = spec.get("parameterType")
    if kind is None:
      raise LauncherError(f"{task_name}: parameter {name!r} has no parameterType (legacy "
                          "`type` schema, before 2.1.0)")
    if kind == "STRING" and not isinstance(values[name], str):
      values[name] = json.dumps(values[name])
  return values


def to_mlmd_value(key: str, value: Any) -> metadata_store_pb2.Value:
  """``StructValueToMLMDValue`` (``metadata/converter.go``:138-171): a string stays a
  string, every number becomes a double, a bool an int, a list ``{"list": [...]}`` and a
  struct ``{"struct": {...}}`` (struct values); null is rejected."""
  result = metadata_store_pb2.Value()
  if value is None:
    raise LauncherError(f"metadata {key!r}: unknown/unsupported value type "
                        "*structpb.Value_NullValue")
  if isinstance(value, bool):
    result.int_value = int(value)
  elif isinstance(value, (int, float)):
    result.double_value = float(value)
  elif isinstance(value, str):
    result.string_value = value
  elif isinstance(value, list):
    json_format.ParseDict({"list": value}, result.struct_value)
  elif isinstance(value, dict):
    json_format.ParseDict({"struct": value}, result.struct_value)
  else:
    raise LauncherError(f"metadata {key!r}: unknown/unsupported value type "
                        f"{type(value).__name__}")
  return result


def to_metadata_value(value: metadata_store_pb2.Value) -> Any:
  """``toRuntimeArtifact``'s ``propertiesToMetadata`` (``converter.go``:194-212): the JSON
  value a downstream ExecutorInput gets (ints as numbers, structs as they are stored)."""
  kind = value.WhichOneof("value")
  if kind == "string_value":
    return value.string_value
  if kind == "double_value":
    return value.double_value
  if kind == "int_value":
    return float(value.int_value)
  if kind == "struct_value":
    return json_format.MessageToDict(value.struct_value)
  raise LauncherError(f"unknown property type in MLMD artifact: {kind}")


def schema_title(artifact_type: Mapping[str, Any]) -> str:
  """``SchemaToArtifactType`` (``client.go``:1199-1211 at master): the type's name is the
  schema title (``schemaTitle``, else the ``title`` of the instance schema YAML)."""
  if artifact_type.get("schemaTitle"):
    return artifact_type["schemaTitle"]
  import yaml  # pylint: disable=g-import-not-at-top
  title = (yaml.safe_load(artifact_type.get("instanceSchema") or "") or {}).get("title")
  if not title:
    raise LauncherError("No title specified")  # glog.Fatal in the launcher.
  return title


class KfpMetadata:
  """An ML Metadata store written the way the KFP v2 driver and launcher write the
  cluster's (kubeflow/pipelines ``backend/src/v2/metadata/client.go`` at master 7b70c7b;
  the same at 2.1.0 apart from line numbers), in a real ``ml_metadata`` SQLite store."""

  PIPELINE = "system.Pipeline"  # client.go:54
  PIPELINE_RUN = "system.PipelineRun"  # client.go:55
  CONTAINER_EXECUTION = "system.ContainerExecution"  # client.go:96

  def __init__(self, path: str):
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    self.path = path
    self.store = metadata_store.MetadataStore(config)
    self._server = None
    self._port = 0

  def _type_id(self, put, message_cls, name: str) -> int:
    return put(message_cls(name=name))  # Schemaless types (client.go:100-115).

  def _context(self, type_name: str, name: str, properties: Mapping[str, str]) -> int:
    """``getOrInsertContext`` (client.go:1390)."""
    type_id = self._type_id(self.store.put_context_type, metadata_store_pb2.ContextType,
                            type_name)
    found = self.store.get_context_by_type_and_name(type_name, name)
    if found is not None:
      return found.id
    context = metadata_store_pb2.Context(type_id=type_id, name=name)
    for key, value in properties.items():
      context.custom_properties[key].string_value = value
    return self.store.put_contexts([context])[0]

  def pipeline(self, pipeline_name: str, run_id: str, pipeline_root: str) -> List[int]:
    """``GetPipeline`` (client.go:410-470): [pipeline context, run context], the run a
    child of the pipeline."""
    pipeline_id = self._context(self.PIPELINE, pipeline_name, {})
    run_id_ = self._context(self.PIPELINE_RUN, run_id, {
        "namespace": "kubeflow", "resource_name": f"{pipeline_name}-{run_id}",
        "pipeline_root": f"{pipeline_root.rstrip('/')}/{pipeline_name}/{run_id}",
        "store_session_info": MINIO_SESSION_INFO})
    if not self.store.get_parent_contexts_by_context(run_id_):
      self.store.put_parent_contexts([metadata_store_pb2.ParentContext(
          child_id=run_id_, parent_id=pipeline_id)])
    return [pipeline_id, run_id_]

  def record_artifact(self, output_name: str, artifact_type: Mapping[str, Any],
                      uri: str, metadata: Mapping[str, Any]) -> int:
    """``RecordArtifact`` (client.go:1214-1260): ``toMLMDArtifact`` (converter.go:110-136,
    every metadata key a custom property), the type named by schema title, and
    ``display_name`` / ``store_session_info`` unless the executor set them."""
    type_id = self._type_id(self.store.put_artifact_type, metadata_store_pb2.ArtifactType,
                            schema_title(artifact_type))
    artifact = metadata_store_pb2.Artifact(type_id=type_id, uri=uri,
                                           state=metadata_store_pb2.Artifact.LIVE)
    for key, value in metadata.items():
      if key != "_kfp_workspace":  # converter.go:124
        artifact.custom_properties[key].CopyFrom(to_mlmd_value(key, value))
    if "display_name" not in artifact.custom_properties:
      artifact.custom_properties["display_name"].string_value = output_name
    if "store_session_info" not in artifact.custom_properties:
      artifact.custom_properties["store_session_info"].string_value = MINIO_SESSION_INFO
    return self.store.put_artifacts([artifact])[0]

  def create_execution(self, task_name: str, contexts: Sequence[int],
                       inputs: Optional[Mapping[str, Sequence[int]]] = None) -> int:
    """The driver's ``CreateExecution`` (client.go 2.17.0:638-752): a RUNNING
    ``system.ContainerExecution`` with an INPUT event (path: the input key) per input
    artifact (``config.InputArtifactIDs``, client.go 2.17.0:740-751), put with the
    pipeline's contexts."""
    type_id = self._type_id(self.store.put_execution_type, metadata_store_pb2.ExecutionType,
                            self.CONTAINER_EXECUTION)
    execution = metadata_store_pb2.Execution(
        type_id=type_id, last_known_state=metadata_store_pb2.Execution.RUNNING)
    execution.custom_properties["task_name"].string_value = task_name
    pairs = self._event_pairs(metadata_store_pb2.Event.INPUT,
                              [(name, artifact_id)
                               for name, ids in sorted((inputs or {}).items())
                               for artifact_id in ids])
    contexts_ = self.store.get_contexts_by_id(list(contexts))
    execution_id, _, _ = self.store.put_execution(execution, pairs, contexts_,
                                                  reuse_context_if_already_exist=True)
    return execution_id

  def pre_publish(self, execution_id: int, pod_name: str, pod_uid: str = "",
                  namespace: str = "kubeflow") -> None:
    """The launcher's ``prePublish`` before the command runs (launcher_v2.go
    2.17.0:355-371, 2.5.0:300-316; ``PrePublishExecution``, client.go 2.17.0:779-796,
    2.5.0:673-690): the pod's name (``$(KFP_POD_NAME)``, the downward API's
    metadata.name), uid and namespace on the execution, RUNNING."""
    [execution] = self.store.get_executions_by_id([execution_id])
    execution.custom_properties["pod_name"].string_value = pod_name
    execution.custom_properties["pod_uid"].string_value = pod_uid
    execution.custom_properties["namespace"].string_value = namespace
    execution.last_known_state = metadata_store_pb2.Execution.RUNNING
    self.store.put_executions([execution])

  def publish_execution(self, execution_id: int, contexts: Sequence[int],
                        outputs: Mapping[str, int], cached: bool = False) -> int:
    """``PublishExecution`` (client.go 2.17.0:558-610): an OUTPUT event (path: the output
    key) per output artifact, put with the pipeline's contexts (ML Metadata then
    attributes the artifacts to them), the state COMPLETE. A cache hit is published
    CACHED with the earlier outputs (``driver/container.go``:234 at master)."""
    [execution] = self.store.get_executions_by_id([execution_id])
    execution.last_known_state = (metadata_store_pb2.Execution.CACHED if cached
                                  else metadata_store_pb2.Execution.COMPLETE)
    pairs = self._event_pairs(metadata_store_pb2.Event.OUTPUT, sorted(outputs.items()))
    contexts_ = self.store.get_contexts_by_id(list(contexts))
    execution_id, _, _ = self.store.put_execution(execution, pairs, contexts_,
                                                  reuse_context_if_already_exist=True)
    return execution_id

  def _event_pairs(self, kind, named_ids):
    """(artifact, event) pairs of ``kind`` (INPUT or OUTPUT), each event's path the
    input's or output's key, as the driver and the launcher write them."""
    pairs = []
    for name, artifact_id in named_ids:
      event = metadata_store_pb2.Event(type=kind, artifact_id=artifact_id)
      event.path.steps.add().key = name
      pairs.append((self.store.get_artifacts_by_id([artifact_id])[0], event))
    return pairs

  def serve(self) -> int:
    """Serves this store over ML Metadata's gRPC API on localhost, as the cluster's
    ``metadata-grpc-service`` serves its own (the pods reach it through
    ``METADATA_GRPC_SERVICE_HOST``/``_PORT``); returns the port. Every RPC is the
    store's own call, one at a time (SQLite)."""
    if self._server is None:
      import grpc  # pylint: disable=g-import-not-at-top
      from concurrent import futures  # pylint: disable=g-import-not-at-top
      from ml_metadata.proto import metadata_store_service_pb2  # pylint: disable=g-import-not-at-top
      service = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"]

      def handler(method):
        request_cls = getattr(metadata_store_service_pb2, method.input_type.name)
        response_cls = getattr(metadata_store_service_pb2, method.output_type.name)

        def call(request, context):  # pylint: disable=unused-argument
          response = response_cls()
          self.store._call(method.name, request, response)  # pylint: disable=protected-access
          return response
        return grpc.unary_unary_rpc_method_handler(
            call, request_deserializer=request_cls.FromString,
            response_serializer=response_cls.SerializeToString)
      self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
      self._server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
          service.full_name, {m.name: handler(m) for m in service.methods})])
      self._port = self._server.add_insecure_port("127.0.0.1:0")
      self._server.start()
    return self._port

  def close(self) -> None:
    if self._server is not None:
      self._server.stop(None)
      self._server = None

  def runtime_artifact(self, artifact_id: int) -> Dict[str, Any]:
    """``toRuntimeArtifact`` (converter.go:181-221): name = the id, uri, and every
    property and custom property as metadata."""
    artifact = self.store.get_artifacts_by_id([artifact_id])[0]
    metadata = {k: to_metadata_value(v) for k, v in artifact.properties.items()}
    metadata.update({k: to_metadata_value(v) for k, v in artifact.custom_properties.items()})
    return {"name": str(artifact.id), "uri": artifact.uri, "metadata": metadata}


def _input_ids(executor_input: Mapping[str, Any]) -> Dict[str, List[int]]:
  """{input key: [ML Metadata ids]}: an input artifact's KFP name is its id
  (converter.go:187 ``toRuntimeArtifact``)."""
  return {key: [int(a["name"]) for a in artifacts.get("artifacts") or []]
          for key, artifacts in executor_input.get("inputs", {}).get("artifacts", {}).items()}


def _reject_constant(name: str):
  raise LauncherError(f"invalid JSON token {name!r} (protojson accepts no NaN or Infinity)")


def parse_executor_output(text: str, path: str) -> Dict[str, Any]:
  """``getExecutorOutputFile``: ``protojson.Unmarshal`` into ExecutorOutput, strictly."""
  try:
    json.loads(text, parse_constant=_reject_constant)
    message = json_format.Parse(text, pipeline_spec_pb2.ExecutorOutput(),
                                ignore_unknown_fields=False)
  except (LauncherError, json_format.ParseError, ValueError) as e:
    raise LauncherError(f"failed to unmarshall ExecutorOutput in file {path!r}: {e}") from e
  return json_format.MessageToDict(message)


def _go_json(value: Any) -> str:
  """Go's ``json.Marshal`` of decoded JSON: sorted keys, compact, HTML characters escaped."""
  text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
  for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                        ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
    text = text.replace(char, escaped)
  return text


def fingerprint(executor_input: Mapping[str, Any], container: Mapping[str, Any],
                pvc_names: Sequence[str] = ()) -> str:
  """The driver's cache fingerprint of a task (``driver/cache.go``:87-129).

  ``GenerateCacheKey`` (``cacheutils/cache.go``:173-229): input artifact names (their
  ML Metadata ids), input parameter values, each output artifact without its URI, output
  parameter types, and ``ContainerSpec{image, cmdArgs: command + args as in the package,
  pvcNames: sorted, deduplicated}``; then ``GenerateFingerPrint`` (:151-171): sha256 of
  the protojson of that CacheKey, re-marshalled by encoding/json. Env, resources, node
  selector and tolerations are not part of it. Computed from the same fields; that the
  hex digest equals Go's byte for byte is not checked here (no Go toolchain).
  """
  inputs, outputs = executor_input["inputs"], executor_input["outputs"]
  key: Dict[str, Any] = {}
  names = {k: {"artifactNames": [a["name"] for a in v["artifacts"]]}
           for k, v in inputs.get("artifacts", {}).items()}
  if names:
    key["inputArtifactNames"] = names
  specs = {}
  for name, artifacts in outputs.get("artifacts", {}).items():
    if artifacts["artifacts"]:
      artifact = artifacts["artifacts"][0]
      specs[name] = {k: artifact[k] for k in ("name", "type", "metadata") if artifact.get(k)}
  if specs:
    key["outputArtifactsSpec"] = specs
  if outputs.get("parameters"):
    raise LauncherError("output parameters are not emulated (the package has none)")
  container_spec = {"image": container["image"],
                    "cmdArgs": list(container["command"]) + list(container.get("args", []))}
  if pvc_names:
    container_spec["pvcNames"] = sorted(set(pvc_names))
  key["containerSpec"] = container_spec
  if inputs.get("parameterValues"):
    key["inputParameterValues"] = inputs["parameterValues"]
  return hashlib.sha256(_go_json(key).encode("utf-8")).hexdigest()


class Launcher:
  """Runs a compiled package's tasks in dependency order, as KFP's pods would."""

  def __init__(self, package: Mapping[str, Any], workdir: str, pipeline_root: str,
               run_id: str = "run-1", timeout: int = 900, publish_logs: bool = True,
               output_file: str = "task_root",
               platform_spec: Optional[Mapping[str, Any]] = None,
               pvc_cache_key: bool = True, retries: bool = True,
               interrupt: Optional[Callable[[str, int, str], bool]] = None, s3=None,
               download_prefix: str = "under", run_as: Optional[int] = None):
    if output_file not in OUTPUT_FILES:
      raise ValueError(f"output_file must be one of {OUTPUT_FILES}. Received: {output_file!r}")
    if download_prefix not in DOWNLOAD_PREFIXES:
      raise ValueError(f"download_prefix must be one of {DOWNLOAD_PREFIXES}. Received: "
                       f"{download_prefix!r}")
    self.download_prefix = download_prefix
    if run_as is not None and os.getuid() != 0:
      raise ValueError("run_as needs the tests to run as root (to own the claims and to "
                       "drop to the step's user)")
    self.run_as = run_as
    self.publish_logs = publish_logs
    self.output_file = output_file
    self.pvc_cache_key = pvc_cache_key  # 2.15.0 and later (commit 1b3decdc81).
    self.retries = retries
    self.interrupt = interrupt
    self.s3 = s3
    self.downloaded: Dict[str, int] = {}  # task -> bytes its launcher downloaded
    self.attempts: Dict[str, List[int]] = {}  # task -> each attempt's exit status
    self.k8s = ((platform_spec or {}).get("platforms", {}).get("kubernetes", {})
                .get("deploymentSpec", {}).get("executors", {}))
    self.cache: Dict[str, Dict[str, Dict[str, Any]]] = {}  # fingerprint -> recorded outputs
    self.fingerprints: Dict[str, str] = {}
    self.cached_tasks: List[str] = []
    self.spec = package
    self.workdir = workdir
    self.pipeline_root = pipeline_root
    self.run_id = run_id
    self.root = f"{pipeline_root.rstrip('/')}/{package['pipelineInfo']['name']}/{run_id}"
    self.bucket = os.path.join(workdir, "object-store")
    self.timeout = timeout
    # task -> key -> {"id", "uri", "type", "custom_properties"}: what the store holds,
    # custom properties as toRuntimeArtifact hands them downstream.
    self.mlmd: Dict[str, Dict[str, Dict[str, Any]]] = {}
    self.executor_inputs: Dict[str, Dict[str, Any]] = {}
    self._metadata: Optional[KfpMetadata] = None

  @property
  def metadata(self) -> "KfpMetadata":
    """The run's ML Metadata (``<workdir>/mlmd.sqlite``), opened on first use."""
    if self._metadata is None:
      os.makedirs(self.workdir, exist_ok=True)
      self._metadata = KfpMetadata(os.path.join(self.workdir, "mlmd.sqlite"))
    return self._metadata

  def new_run(self, run_id: str, package: Optional[Mapping[str, Any]] = None,
              platform_spec: Optional[Mapping[str, Any]] = None) -> None:
    """Starts another run of the same pipeline (same store, same cache), of `package`
    when given: another version of the pipeline, e.g. with other settings (its runs
    share the ``system.Pipeline`` context, which GetPipeline keys by the pipeline's
    name: client.go:410-470)."""
    if package is not None:
      if package["pipelineInfo"]["name"] != self.spec["pipelineInfo"]["name"]:
        raise ValueError(f"new_run: another pipeline ({package['pipelineInfo']['name']!r}); "
                         f"this launcher runs {self.spec['pipelineInfo']['name']!r}")
      self.spec = package
      self.k8s = ((platform_spec or {}).get("platforms", {}).get("kubernetes", {})
                  .get("deploymentSpec", {}).get("executors", {}))
    self.run_id = run_id
    self.root = f"{self.pipeline_root.rstrip('/')}/{self.spec['pipelineInfo']['name']}/{run_id}"

  # The object store: files keyed by their path below the scheme.
  def _object_dir(self, uri: str) -> str:
    return os.path.join(self.bucket, local_path_for_uri(uri))

  @staticmethod
  def _bucket_key(uri: str):
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    return bucket, key.rstrip("/")

  def upload(self, local: str, uri: str) -> None:
    if not os.path.exists(local):
      return  # launcher_v2.go: "Local filepath does not exist" is only a warning.
    if self.s3 is not None:
      bucket, key = self._bucket_key(uri)
      files = ([(local, key)] if os.path.isfile(local) else
               [(os.path.join(d, n), key + "/" + os.path.relpath(os.path.join(d, n), local))
                for d, _, names in os.walk(local) for n in names])
      for source, name in files:
        self.s3.upload_file(source, bucket, name)
      return
    if os.path.isfile(local):
      os.makedirs(os.path.dirname(self._object_dir(uri)), exist_ok=True)
      shutil.copy2(local, self._object_dir(uri))
      return
    for directory, _, files in os.walk(local):
      for name in files:
        source = os.path.join(directory, name)
        target = os.path.join(self._object_dir(uri), os.path.relpath(source, local))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(source, target)

  def download(self, uri: str, local: str) -> int:
    """Copies every object of `uri` to `local`; returns the bytes copied."""
    if self.s3 is not None:
      bucket, key = self._bucket_key(uri)
      objects = [o for page in self.s3.get_paginator("list_objects_v2").paginate(
          Bucket=bucket, Prefix=key) for o in page.get("Contents", [])
                 if self._listed(o["Key"], key)]
      if not objects:
        raise LauncherError(f"failed to download input artifact from remote storage URI "
                            f"{uri}: no such object")
      for o in objects:  # In listing order: "a/" before "a/b".
        # sanitizeDownloadPath: filepath.Join(localDir, filepath.Rel(blobDir, key)); Rel
        # cleans the path, so a "directory" key "k/d/" is the file ".../d" and "k/" is
        # `local` itself.
        target = os.path.normpath(os.path.join(local, os.path.relpath(o["Key"], key)))
        failed = (f"failed to download input artifact from remote storage URI {uri}: "
                  f"downloadFile(): unable to complete copying {o['Key']!r} to local "
                  f"storage {target!r}: ")
        _mkdir_all(os.path.dirname(target), failed)
        if os.path.isdir(target):  # os.Create on a directory.
          raise LauncherError(f"{failed}unable to open local file {target!r} for writing: "
                              f"open {target}: is a directory")
        self.s3.download_file(bucket, o["Key"], target)
      return sum(o["Size"] for o in objects)
    source = self._object_dir(uri)
    if self.download_prefix == "raw":  # Siblings whose names start with the key's too.
      copied = 0
      parent, stem = os.path.dirname(source), os.path.basename(source)
      for name in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        if name.startswith(stem) and name != stem:
          sibling = os.path.join(parent, name)
          target = os.path.normpath(os.path.join(local, os.path.relpath(sibling, source)))
          if os.path.isdir(sibling):
            shutil.copytree(sibling, target, dirs_exist_ok=True)
            copied += sum(os.path.getsize(os.path.join(d, n))
                          for d, _, names in os.walk(sibling) for n in names)
          else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(sibling, target)
            copied += os.path.getsize(sibling)
      if copied and not os.path.exists(source):
        return copied
      return copied + self._download_own(source, uri, local)
    return self._download_own(source, uri, local)

  def _listed(self, object_key: str, key: str) -> bool:
    """Whether DownloadBlob downloads `object_key` for the artifact at `key`."""
    if self.download_prefix == "raw":
      return object_key.startswith(key)
    return object_key == key or object_key.startswith(key + "/")

  def _download_own(self, source: str, uri: str, local: str) -> int:
    if os.path.isfile(source):
      os.makedirs(os.path.dirname(local), exist_ok=True)
      shutil.copy2(source, local)
      return os.path.getsize(source)
    elif os.path.isdir(source):
      shutil.copytree(source, local, dirs_exist_ok=True)
      return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(source)
                 for n in names)
    else:
      raise LauncherError(f"failed to download input artifact from remote storage URI {uri}: "
                          "no such object")

  # The driver.
  def _input_artifacts(self, task_name: str, task: Mapping[str, Any]) -> Dict[str, Any]:
    artifacts = {}
    for key, spec in task.get("inputs", {}).get("artifacts", {}).items():
      if "taskOutputArtifact" not in spec:
        raise LauncherError(f"{task_name}: input artifact {key!r}: only taskOutputArtifact "
                            f"inputs are resolved in this test, got {sorted(spec)}")
      producer = spec["taskOutputArtifact"]["producerTask"]
      recorded = self.mlmd[producer][spec["taskOutputArtifact"]["outputArtifactKey"]]
      artifact = (self.metadata.runtime_artifact(recorded["id"]) if self._metadata is not None
                  else {"name": str(recorded["id"]), "uri": recorded["uri"],
                        "metadata": copy.deepcopy(recorded["custom_properties"])})
      artifact["type"] = {"instanceSchema": ""}  # OutputArtifact.Schema is never filled.
      artifacts[key] = {"artifacts": [artifact]}
    return artifacts

  def executor_input(self, task_name: str) -> Dict[str, Any]:
    task = self.spec["root"]["dag"]["tasks"][task_name]
    component = self.spec["components"][task["componentRef"]["name"]]
    executor = self.spec["deploymentSpec"]["executors"].get(component.get("executorLabel"), {})
    if "resolver" in executor:  # argocompiler/argo.go
      raise LauncherError(f"{task_name}: resolver not implemented yet")
    if "container" not in executor:
      raise LauncherError(f"{task_name}: only container executors are run in this test, got "
                          f"{sorted(executor)}")
    task_root = f"{self.root}/{task_name}/salt-{task_name.lower()}"
    declared = dict(component.get("outputDefinitions", {}).get("artifacts", {}))
    if self.publish_logs:  # driver.go:747-759.
      declared[EXECUTOR_LOGS] = {"artifactType": {"schemaTitle": "system.Artifact"}}
    outputs = {
        key: {"artifacts": [{"name": key, "uri": f"{task_root}/{key}",
                             "type": copy.deepcopy(spec["artifactType"])}]}
        for key, spec in declared.items()}
    if self.output_file == "legacy":
      output_file = LEGACY_OUTPUT_FILE
    else:
      output_file = "/" + os.path.join(local_path_for_uri(task_root), "output_metadata.json")
    return {
        "inputs": {"parameterValues": resolve_parameters(task_name, task, component),
                   "artifacts": self._input_artifacts(task_name, task)},
        "outputs": {"artifacts": outputs, "outputFile": output_file}}

  def pvc_names(self, executor_label: str) -> List[str]:
    """Claim names of the executor's PVC mounts (driver/container.go:150-173)."""
    names = []
    for mount in self.k8s.get(executor_label, {}).get("pvcMount", []):
      name = mount.get("pvcNameParameter", {}).get("runtimeValue", {}).get("constant")
      names.append(name or mount["constant"])
    return names

  # The launcher.
  def run_task(self, task_name: str) -> Dict[str, Any]:
    """Runs one task; returns its ExecutorOutput (as written by the step)."""
    task = self.spec["root"]["dag"]["tasks"][task_name]
    component = self.spec["components"][task["componentRef"]["name"]]
    container = self.spec["deploymentSpec"]["executors"][component["executorLabel"]][
        "container"]
    executor_input = self.executor_input(task_name)
    self.executor_inputs[task_name] = executor_input
    key_of_task = fingerprint(
        executor_input, container,
        self.pvc_names(component["executorLabel"]) if self.pvc_cache_key else ())
    self.fingerprints[task_name] = key_of_task
    caching = bool(task.get("cachingOptions", {}).get("enableCache"))
    contexts = self.metadata.pipeline(self.spec["pipelineInfo"]["name"], self.run_id,
                                      self.pipeline_root)
    execution_id = self.metadata.create_execution(task_name, contexts,
                                                  _input_ids(executor_input))
    if caching and key_of_task in self.cache:  # A hit reuses the recorded outputs.
      self.mlmd[task_name] = copy.deepcopy(self.cache[key_of_task])
      self.metadata.publish_execution(
          execution_id, contexts, {k: a["id"] for k, a in self.mlmd[task_name].items()},
          cached=True)
      self.cached_tasks.append(task_name)
      return {}
    max_retries = (int(task.get("retryPolicy", {}).get("maxRetryCount", 0))
                   if self.retries else 0)
    self.attempts[task_name] = []
    for attempt in range(max_retries + 1):
      pod, returncode, log_text = self._attempt(task_name, component["executorLabel"],
                                                container, executor_input, attempt,
                                                execution_id)
      self.attempts[task_name].append(returncode)
      if returncode == 0:
        break
    if returncode != 0:
      raise LauncherError(f"{task_name}: the step exited with {returncode} "
                          f"(attempts: {self.attempts[task_name]}):\n{log_text[-6000:]}")
    if self.publish_logs:  # The last attempt's log is the one recorded.
      executor_input["outputs"]["artifacts"][EXECUTOR_LOGS]["artifacts"][0]["uri"] += (
          f"-{attempt}")
    output_file = pod + executor_input["outputs"]["outputFile"]
    if not os.path.exists(output_file):
      raise LauncherError(f"{task_name}: no executor output at {output_file}:\n"
                          f"{log_text[-3000:]}")
    with open(output_file) as f:
      executor_output = parse_executor_output(f.read(), output_file)
    self.mlmd[task_name] = {}
    for key, artifacts in executor_input["outputs"]["artifacts"].items():
      artifact = copy.deepcopy(artifacts["artifacts"][0])
      produced = executor_output.get("artifacts", {}).get(key, {}).get("artifacts", [])
      if produced and key != EXECUTOR_LOGS:  # mergeRuntimeArtifacts, launcher_v2.go:802.
        if produced[0].get("uri"):
          artifact["uri"] = produced[0]["uri"]
        artifact.setdefault("metadata", {}).update(produced[0].get("metadata", {}))
      local = os.path.join(pod, local_path_for_uri(artifact["uri"]))
      self.upload(local, artifact["uri"])
      artifact_id = self.metadata.record_artifact(key, artifact["type"], artifact["uri"],
                                                  artifact.get("metadata", {}))
      self.mlmd[task_name][key] = {
          "id": artifact_id, "uri": artifact["uri"], "type": artifact["type"],
          "custom_properties": self.metadata.runtime_artifact(artifact_id)["metadata"]}
    self.metadata.publish_execution(execution_id, contexts,
                                    {k: a["id"] for k, a in self.mlmd[task_name].items()})
    if caching:  # launcher_v2.go: a cache entry only for a task with a fingerprint.
      self.cache[key_of_task] = copy.deepcopy(self.mlmd[task_name])
    return executor_output

  def _attempt(self, task_name: str, label: str, container: Mapping[str, Any],
               executor_input: Dict[str, Any], attempt: int, execution_id: int):
    """One executor pod: downloads, runs the command, returns (pod, exit status, log)."""
    executor_input = copy.deepcopy(executor_input)
    if self.publish_logs:  # launcher_v2.go:538-597, the retry index.
      logs = executor_input["outputs"]["artifacts"][EXECUTOR_LOGS]["artifacts"][0]
      logs["uri"] += f"-{attempt}"
    suffix = f"-retry-{attempt}" if attempt else ""
    # Stands for the pod's "/": the same path in every attempt (the executor sees the same
    # /minio/... paths), with a fresh disk (a retry is a new pod).
    pod = os.path.join(self.workdir, "pods", self.run_id, task_name)
    if os.path.exists(pod):
      shutil.rmtree(pod)  # Volumes are symlinks: unlinked, not followed.
    os.makedirs(os.path.join(pod, "home"))
    for mount in self.k8s.get(label, {}).get("pvcMount", []):  # makeVolumeMountPatch.
      name = (mount.get("pvcNameParameter", {}).get("runtimeValue", {}).get("constant")
              or mount["constant"])
      claim = os.path.join(self.workdir, "pvc", name)
      if not os.path.isdir(claim):  # A fresh claim's root: root:root 0755 (no fsGroup).
        os.makedirs(claim)
        os.chmod(claim, 0o755)
      target = os.path.join(pod, mount["mountPath"].lstrip("/"))
      os.makedirs(os.path.dirname(target), exist_ok=True)
      os.symlink(claim, target)
    self.downloaded[task_name] = 0
    for artifacts in executor_input["inputs"]["artifacts"].values():
      for artifact in artifacts["artifacts"]:
        self.downloaded[task_name] += self.download(
            artifact["uri"], os.path.join(pod, local_path_for_uri(artifact["uri"])))
    for artifacts in executor_input["outputs"]["artifacts"].values():
      for artifact in artifacts["artifacts"]:
        local = os.path.join(pod, local_path_for_uri(artifact["uri"]))
        os.makedirs(os.path.dirname(local), exist_ok=True)  # prepareOutputFolders.
    # The pod sees "/minio/..."; this machine sees <pod>/minio/...
    executor_input_json = json.dumps(dict(executor_input, outputs=dict(
        executor_input["outputs"], outputFile=pod + executor_input["outputs"]["outputFile"])))
    command = [a.replace("{{$}}", executor_input_json) for a in container["command"]]
    args = [a.replace("{{$}}", executor_input_json) for a in container.get("args", [])]
    unresolved = [a for a in command + args if "{{$." in a]
    if unresolved:
      raise LauncherError(f"{task_name}: placeholders this test does not fill: {unresolved}")
    if command[0] != "python":
      raise LauncherError(f"{task_name}: the image's python is expected, got {command[0]!r}")
    command[0] = sys.executable  # This venv stands for the image's python.
    extra_env = {}
    if self.run_as is not None:  # The image's user: what the launcher made is its own.
      closed = [d for d in _ancestors(pod) if not os.stat(d).st_mode & 0o001]
      if closed:
        raise LauncherError(f"{task_name}: uid {self.run_as} cannot reach the pod's files: "
                            f"{closed[0]} is not searchable by others (use a workdir "
                            "under a directory with mode 0755)")
      command[0], library = step_python()
      extra_env["LD_LIBRARY_PATH"] = library
      for name in os.listdir(pod):
        if not os.path.islink(os.path.join(pod, name)):  # Claims stay root's.
          _chown_tree(os.path.join(pod, name), self.run_as)
    pod_name = f"{self.run_id}-{task_name}-{attempt}".lower()
    pod_uid = hashlib.sha256(pod_name.encode()).hexdigest()[:32]
    self.metadata.pre_publish(execution_id, pod_name, pod_uid)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.join(pod, "home"),
           "LANG": "C.UTF-8", MOUNT_ROOT_ENV: pod,
           # metadata-grpc-configmap (argocompiler/container.go 2.17.0:566, an optional
           # envFrom, common.go 2.17.0:32-39) and the downward API's pod name (common.go
           # 2.17.0:42-48), this store served on localhost. Not KFP_POD_UID: with it a
           # multi-node step owns its job by this pod, which tests/fake_kube.py would need
           # to know (its garbage collector deletes jobs whose owner pod is absent).
           "METADATA_GRPC_SERVICE_HOST": "127.0.0.1",
           "METADATA_GRPC_SERVICE_PORT": str(self.metadata.serve()),
           "KFP_POD_NAME": pod_name, **extra_env}
    env.update({e["name"]: e["value"] for e in container.get("env", [])})
    log_path = os.path.join(self.workdir, f"{task_name}{suffix}.log")
    with open(log_path, "w") as log:
      # Its own session: the pod's processes (the step and its training children) are
      # killed together, as when the node goes.
      as_user = ({} if self.run_as is None else
                 {"user": self.run_as, "group": self.run_as, "extra_groups": []})
      proc = subprocess.Popen(command + args, env=env, cwd=os.path.join(pod, "home"),
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              **as_user)
      deadline = time.monotonic() + self.timeout
      try:
        while proc.poll() is None:
          if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(command, self.timeout)
          if self.interrupt is not None and self.interrupt(task_name, attempt, pod):
            os.killpg(proc.pid, signal.SIGKILL)
          time.sleep(0.2)
      finally:
        if proc.poll() is None:
          os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        try:  # Children left by the step (the pod's other processes) go with it.
          os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
    with open(log_path) as f:
      log_text = f.read()
    if self.publish_logs:  # getLogWriter: stdout and stderr also go to the log artifact.
      logs = executor_input["outputs"]["artifacts"][EXECUTOR_LOGS]["artifacts"][0]
      shutil.copy2(log_path, os.path.join(pod, local_path_for_uri(logs["uri"])))
    return pod, proc.returncode, log_text

  def run(self) -> List[str]:
    """Runs every task of the root DAG; returns the order they ran in."""
    order = topological_order(self.spec["root"]["dag"]["tasks"])
    for task_name in order:
      print(f"kubeflow_launcher: running {task_name}", file=sys.stderr, flush=True)
      self.run_task(task_name)
    return order

  def object_path(self, uri: str) -> str:
    """Where the object store keeps `uri` (to inspect uploaded outputs)."""
    return self._object_dir(uri)
