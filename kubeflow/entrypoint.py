"""The container entry point of every compiled step (open-source KFP and Vertex AI).

    python -m tfx_parallel.kubeflow.entrypoint --executor_class_path C \\
        --json_serialized_invocation_args '{{$}}' --json_serialized_inputs_spec_args S [beam args]

It takes the same arguments as TFX's ``kubeflow_v2_run_executor`` and runs it, after
adapting what the open-source KFP v2 driver and launcher hand over
(kubeflow/pipelines ``backend/src/v2/driver``, ``backend/src/v2/component/launcher_v2.go``):

* **Input artifact types.** The driver reads input artifacts back from ML Metadata with
  an empty ``instanceSchema`` (``OutputArtifact.Schema`` is never filled), which TFX's
  parser cannot read (``yaml.safe_load('')`` is None), and KFP may name a type by a
  ``system.*`` title (``system.Model``), which TFX cannot import. Such an artifact gets
  the type its component declares in ``--json_serialized_inputs_spec_args``.
* **Artifact files.** The launcher downloads each input artifact to, and uploads each
  output artifact from, ``LocalPathForURI(uri)``: ``gs://b/p`` -> ``/gcs/b/p``,
  ``minio://b/p`` -> ``/minio/b/p``, ``s3://b/p`` -> ``/s3/b/p``. The executors get those
  local paths as URIs (TensorFlow cannot open ``minio://`` at all), and the executor
  output names the original URIs again, so that ML Metadata records remote URIs and the
  launcher uploads from the local paths. Writing locally also avoids the zero-byte GCS
  "directory" objects that break the launcher's download of nested outputs such as a
  Model's ``Format-Serving/`` (kubeflow/pipelines#13476); an output written at its remote
  URI has them deleted once the executor is done (kubeflow/dir_markers.py). On Vertex AI
  ``/gcs/`` is the Cloud Storage FUSE mount, so the same paths work there.
* **One split for a step that reads one** (kubeflow/split_outputs.py): ``--split_output
  KEY=SOURCE:SPLIT`` makes output KEY, TFX's executor never sees it, from
  ``Split-<SPLIT>`` of output SOURCE once the executor is done; ``--ref_output
  KEY=SOURCE`` makes KEY a reference to SOURCE. An input that is a reference is handed to
  TFX at the URI it names (only with remote artifact paths: the pod has no copy).
* **Outputs the backend adds.** From backend 2.5.0 the driver runs with
  ``--publish_logs=true`` by default (``backend/src/v2/cmd/driver/main.go``) and adds an
  output ``executor-logs`` typed ``{schemaTitle: system.Artifact}`` to every ExecutorInput
  (``driver/driver.go`` ``provisionOutputs``); the launcher writes that file itself and
  ignores it in the executor output (``launcher_v2.go`` ``uploadOutputArtifacts``). TFX
  would try to import ``system.Artifact`` as a class, so every output typed ``system.*``
  is kept out of what TFX sees (our and TFX's outputs have importable titles).
* **Results the KFP UI draws** (kubeflow/ui_outputs.py): ``--ui_outputs SOURCE`` makes
  the evaluator's ``system.Metrics`` / ``ClassificationMetrics`` / ``HTML`` outputs from
  the files TFX's executor wrote in output SOURCE.
* **Placement for the cache.** ``--placement JSON`` (accelerator, node selector, env) is
  in the args only so that the driver's cache fingerprint, which covers image, command
  and args but not resources or env (``driver/cache.go`` ``getFingerPrint``), changes
  with them; it is logged and otherwise unused.
* **Model ids in a blessing.** A ModelBlessing records ``current_model_id`` (and
  ``baseline_model_id``): the Model's ML Metadata id. In the pod TFX knows only a hash of
  the artifact's KFP name as its id (tensorflow/tfx v1.16.0 ``kubeflow_v2_entrypoint_utils
  .py``:68-76 ``_get_hashed_id``) and maps it back only for the stock Evaluator
  (``kubeflow_v2_run_executor.py``:142-147 ``refactor_model_blessing``), so our evaluator
  would record a sha256 near 1e18. The id is set again from the input artifact whose URI
  the blessing names (``current_model``): its KFP name, which is its ML Metadata id
  (``backend/src/v2/metadata/converter.go``:187 ``toRuntimeArtifact``), as a number.
* **Metadata values the launcher cannot record** (``null``: ``StructValueToMLMDValue``
  rejects it) are left out of the executor output.
* **Exit.** The process ends with ``os._exit`` once the executor output is written: the
  interpreter's shutdown can hang on non-daemon threads (Beam, Dask) or crash in
  protobuf/MLMD destructors, and the launcher waits for the process to end.

* **Beam runners whose workers run outside the pod** (Dataflow, Flink, Spark, a portable
  job server, Dask on a remote scheduler: ``runners.runs_outside`` reads the step's Beam
  args). Their workers cannot write to the pod's ``/minio/...``: the files would land on
  their own disks, the commit would find nothing, and the launcher would upload nothing
  with only a warning (``launcher_v2.go`` ``uploadOutputArtifacts``: "Local filepath
  %q does not exist"). Such a step gets the remote URIs, as the workers' Beam
  filesystems read them: ``gs://`` and ``s3://`` as they are, and ``minio://b/k`` as
  ``s3://b/k`` (Beam's S3 filesystem, pointed at MinIO by ``--s3_endpoint_url`` and
  the ``--s3_access_key_id``/``--s3_secret_access_key`` Beam args). The launcher then
  finds no local file to upload and the object is already where the next step's
  launcher downloads it from. In-pod runners (DirectRunner, PrismRunner, a local Dask
  cluster) keep the local paths.
* **Checkpoints that outlive the pod.** A KFP retry re-runs only the executor pod, with
  the same ExecutorInput (the driver is not re-run: ``argocompiler/container.go`` puts
  the retryStrategy on the executor template, from 2.4.1), on a fresh disk. So the
  trainer's checkpoints must not stay in the pod: :func:`checkpoint_root` names a
  durable directory keyed by run and task, the output URIs' task root
  ``<pipeline root>/<pipeline>/<run>/<task>`` (``driver/driver.go``:
  ``GenerateOutputURI(pipelineRoot, [taskName, outputURISalt, name])``, the salt
  dropped), and hands it to the executor as ``TFX_PARALLEL_CHECKPOINT_ROOT``: on the
  volume named by ``TFX_PARALLEL_CHECKPOINT_VOLUME`` (the compiled
  ``checkpoint_volume``), else the remote task root itself when TensorFlow can write it
  (``gs://``; ``s3://`` and ``minio://`` as ``s3://`` through tensorflow-io, this process
  set up from KFP's secret and probed), else nothing (the executor keeps them beside its
  local output). A volume this process cannot write fails the step before training,
  naming the fix (:func:`check_volume`).

``TFX_PARALLEL_MOUNT_ROOT`` (default ``/``) is where the launcher's ``/gcs``, ``/minio``
and ``/s3`` directories are; tests point it at a temporary directory.
A step whose files other pods must reach (the DistributedTrainer submitting a multi-node
job: ``TFX_PARALLEL_TFJOB_IMAGE`` is set) gets the remote URIs instead, as TensorFlow
names them (``minio://b/k`` as ``s3://b/k``), and this process is set up to read them
(credentials from KFP's secret, the S3 variables, tensorflow-io's s3 filesystem:
components/distributed_trainer/kube/object_store.py) before the executor runs.
``TFX_PARALLEL_ARTIFACT_PATHS`` (local or remote) need not be set.
"""
import argparse
import copy
import json
import logging
import os
import sys
import traceback
from typing import Any, Dict, List, Mapping, MutableMapping, Optional, Sequence, Tuple

import yaml

from tfx_parallel.components.common import tfenv
from tfx_parallel.components.convergence_evaluator import lookup
from tfx_parallel.components.distributed_trainer.kube import object_store
from tfx_parallel.components.partitioned_example_gen import runners
from tfx_parallel.kubeflow import dir_markers, split_outputs, ui_outputs

MOUNT_ROOT_ENV = "TFX_PARALLEL_MOUNT_ROOT"
ARTIFACT_PATHS_ENV = "TFX_PARALLEL_ARTIFACT_PATHS"
ARTIFACT_PATHS = ("local", "remote")
# backend/src/v2/component/launcher_v2.go LocalPathForURI (oci:// is for model cars).
_LOCAL_PREFIXES = (("gs://", "gcs"), ("minio://", "minio"), ("s3://", "s3"))


# Read by the DistributedTrainer executor (executor.CHECKPOINT_ROOT_ENV); set by
# kubeflow/resources.py (CHECKPOINT_VOLUME_ENV).
CHECKPOINT_ROOT_ENV = "TFX_PARALLEL_CHECKPOINT_ROOT"
CHECKPOINT_VOLUME_ENV = "TFX_PARALLEL_CHECKPOINT_VOLUME"
# KFP executor containers have these: the host and port from metadata-grpc-configmap (an
# optional envFrom: absent where the namespace has no such ConfigMap), the pod name from the
# downward API (argocompiler/container.go 2.5.0:437-438, 2.17.0:566-567; common.go
# 2.17.0:32-48).
MLMD_HOST_ENV = lookup.MLMD_HOST_ENV  # "METADATA_GRPC_SERVICE_HOST"
MLMD_PORT_ENV = lookup.MLMD_PORT_ENV
INPUT_IDS_ENV = lookup.INPUT_IDS_ENV
POD_NAME_ENV = "KFP_POD_NAME"
# Roots under whose task directory the trainer keeps its checkpoints: gs:// (TensorFlow's
# own filesystem), s3:// and minio:// (as s3://: tensorflow-io's filesystem, this process
# set up from KFP's secret as for a multi-node step, kube/object_store.py).
DURABLE_ROOTS = ("gs://", "s3://", "minio://")
# The one executor that writes checkpoints (kubeflow/package.py _checkpoint_notes).
TRAINER_EXECUTOR_PREFIX = "tfx_parallel.components.distributed_trainer."
# The executor that may read a Model no launcher downloaded (evaluator.baseline:
# latest_blessed, components/convergence_evaluator/lookup.py): :func:`baseline_store`.
EVALUATOR_EXECUTOR_PREFIX = "tfx_parallel.components.convergence_evaluator."
LATEST_BLESSED = "latest_blessed"  # convergence_evaluator/baseline.py LATEST_BLESSED.


class EntrypointError(ValueError):
  """The ExecutorInput cannot be adapted; the message names the artifact."""


def beam_uri(uri: str) -> str:
  """`uri` as Beam's filesystems name it: ``minio://b/k`` is ``s3://b/k`` (KFP's MinIO
  speaks the S3 API); other URIs unchanged."""
  return "s3://" + uri[len("minio://"):] if uri.startswith("minio://") else uri


def local_path(uri: str, mount_root: Optional[str] = "/") -> str:
  """The launcher's local path for `uri` under `mount_root`; other URIs unchanged.

  `mount_root` None keeps every URI as it is (``TFX_PARALLEL_ARTIFACT_PATHS=remote``).
  """
  if mount_root is None:
    return uri
  for scheme, directory in _LOCAL_PREFIXES:
    if uri.startswith(scheme):
      return os.path.join(mount_root, directory, uri[len(scheme):])
  return uri


def _title(artifact_type: Optional[Mapping[str, Any]]) -> str:
  """The schema title of an ArtifactTypeSchema (JSON); '' when there is none."""
  if not artifact_type:
    return ""
  if artifact_type.get("schemaTitle"):
    return artifact_type["schemaTitle"]
  schema = yaml.safe_load(artifact_type.get("instanceSchema") or "") or {}
  return schema.get("title", "") if isinstance(schema, dict) else ""


def _typed(key: str, artifact: Dict[str, Any], declared: Optional[Mapping[str, Any]]) -> None:
  """Gives `artifact` its declared type when it has none or a system.* title."""
  title = _title(artifact.get("type"))
  if title and not title.startswith("system."):
    return
  if not declared or not _title(declared):
    raise EntrypointError(
        f"input artifact {key!r} has type {title or 'none'!r} and the inputs spec "
        "(--json_serialized_inputs_spec_args) declares no type for it; recompile the "
        "package with `tfx-parallel compile`")
  artifact["type"] = copy.deepcopy(dict(declared))


def backend_outputs(executor_input: Mapping[str, Any]) -> List[str]:
  """Keys of the outputs typed ``system.*`` (added by the backend, e.g. executor-logs)."""
  return sorted(key for key, artifacts in
                executor_input.get("outputs", {}).get("artifacts", {}).items()
                if any(_title(a.get("type")).startswith("system.")
                       for a in artifacts.get("artifacts", [])))


def step_uri(uri: str, mount_root: Optional[str] = "/", outside: bool = False) -> str:
  """The URI the step's executor gets for artifact `uri`: the launcher's local path, or
  with `outside` (a Beam runner whose workers run elsewhere) the remote URI as Beam's
  filesystems name it; with `mount_root` None, `uri` itself."""
  return beam_uri(uri) if outside else local_path(uri, mount_root)


def adapt(executor_input: Dict[str, Any], inputs_spec: Optional[Mapping[str, Any]],
          mount_root: Optional[str] = "/", outside: bool = False,
          made_here: Sequence[str] = (), target_ids: Optional[Mapping[str, int]] = None
          ) -> Tuple[Dict[str, Any], Dict[str, List[str]]]:
  """The ExecutorInput TFX's entry point can run, and {output key: original URIs}.

  Outputs typed ``system.*`` (:func:`backend_outputs`) and the outputs this entry point
  makes itself (`made_here`: kubeflow/split_outputs.py) are left out of both. A reference
  input becomes the artifact it names, with its id from `target_ids` ({input key: ML
  Metadata id}, :func:`link_references`) where there is one.
  """
  adapted = copy.deepcopy(executor_input)
  for key in backend_outputs(adapted):
    logging.info("Output %r is typed system.*; the KFP launcher writes it, TFX does not see it",
                 key)
    del adapted["outputs"]["artifacts"][key]
  for key in made_here:
    adapted["outputs"]["artifacts"].pop(key, None)
  declared = (inputs_spec or {}).get("artifacts", {})
  for key, artifacts in adapted.get("inputs", {}).get("artifacts", {}).items():
    for artifact in artifacts.get("artifacts", []):
      _typed(key, artifact, declared.get(key, {}).get("artifactType"))
      split_outputs.dereference(artifact, key, mount_root is None or outside,
                                (target_ids or {}).get(key))
      artifact["uri"] = step_uri(artifact.get("uri", ""), mount_root, outside)
  remote = {}
  for key, artifacts in adapted.get("outputs", {}).get("artifacts", {}).items():
    remote[key] = [a.get("uri", "") for a in artifacts.get("artifacts", [])]
    for artifact in artifacts.get("artifacts", []):
      if not _title(artifact.get("type")):
        raise EntrypointError(f"output artifact {key!r} has no type in the ExecutorInput")
      artifact["uri"] = step_uri(artifact.get("uri", ""), mount_root, outside)
  return adapted, remote


def link_references(executor_input: Mapping[str, Any], environ: Mapping[str, str],
                    connect=None) -> Dict[str, int]:
  """{input key: the ML Metadata id of the artifact a reference input names}, resolved and
  recorded with :func:`split_outputs.link_target` in KFP's ML Metadata
  (``METADATA_GRPC_SERVICE_HOST``/``_PORT``); empty where no input is a reference. A
  store that cannot be reached is said in one line and the step goes on: the reference
  still names the files by URI. `connect`: (host, port) -> MetadataStore.
  """
  refs = {key: a["name"] for key, artifacts in
          executor_input.get("inputs", {}).get("artifacts", {}).items()
          for a in artifacts.get("artifacts", [])
          if (a.get("metadata") or {}).get(split_outputs.REF_URI)
          and str(a.get("name", "")).isdigit()}
  if not refs:
    return {}
  host, port = environ.get(MLMD_HOST_ENV), environ.get(MLMD_PORT_ENV, "8080")
  if not host:
    logging.warning("%s is not set: the reference inputs %s are not resolved to their "
                    "artifacts' ML Metadata ids (lineage stops at the reference)",
                    MLMD_HOST_ENV, sorted(refs))
    return {}
  result = {}
  try:
    store = (connect or _grpc_store)(host, int(port))
    for key, ref_id in sorted(refs.items()):
      target = split_outputs.link_target(store, int(ref_id), key,
                                         environ.get(POD_NAME_ENV, ""))
      if target is not None:
        result[key] = target
  except Exception as e:  # pylint: disable=broad-except  # Lineage only; the data is named.
    logging.warning("ML Metadata at %s:%s could not resolve the reference inputs %s "
                    "(%s: %s); lineage stops at the reference, the step reads the files "
                    "it names", host, port, sorted(refs), type(e).__name__, e)
  return result


def _grpc_store(host: str, port: int):
  from ml_metadata import metadata_store  # pylint: disable=g-import-not-at-top
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  return metadata_store.MetadataStore(metadata_store_pb2.MetadataStoreClientConfig(
      host=host, port=port, client_timeout_sec=60))


def local_to_remote(executor_input: Mapping[str, Any],
                    mount_root: Optional[str] = "/", outside: bool = False) -> Dict[str, str]:
  """{the step's path (:func:`step_uri`): remote URI} of every input and output artifact
  whose path differs from its remote URI."""
  result = {}
  for side in ("inputs", "outputs"):
    for artifacts in executor_input.get(side, {}).get("artifacts", {}).values():
      for artifact in artifacts.get("artifacts", []):
        uri = artifact.get("uri", "")
        if step_uri(uri, mount_root, outside) != uri:
          result[step_uri(uri, mount_root, outside)] = uri
  return result


def _remote_value(value: Any, paths: Mapping[str, str]) -> Any:
  """`value` with a leading local artifact path replaced by its remote URI."""
  if not isinstance(value, str):
    return value
  for local in sorted(paths, key=len, reverse=True):
    if value == local or value.startswith(local + "/"):
      return paths[local] + value[len(local):]
  return value


# A ModelBlessing's {URI property: id property} (tfx/components/evaluator/constants.py).
_MODEL_ID_PROPERTIES = (("current_model", "current_model_id"),
                        ("baseline_model", "baseline_model_id"))


def input_ids(executor_input: Mapping[str, Any]) -> Dict[str, Any]:
  """{remote URI: ML Metadata id} of the input artifacts: the KFP name, a number on
  open-source KFP (an id); kept as the name where it is not one (Vertex AI)."""
  result = {}
  for artifacts in executor_input.get("inputs", {}).get("artifacts", {}).values():
    for artifact in artifacts.get("artifacts", []):
      name = artifact.get("name", "")
      if artifact.get("uri") and name:
        result[artifact["uri"]] = int(name) if name.isdigit() else name
  return result


def input_ids_by_key(executor_input: Mapping[str, Any]) -> Dict[str, int]:
  """{input key: ML Metadata id} of the single-artifact inputs whose KFP name is an id
  (open-source KFP: the driver's ``toRuntimeArtifact`` names a runtime artifact by its
  MLMD id, ``backend/src/v2/metadata/converter.go``)."""
  result = {}
  for key, artifacts in executor_input.get("inputs", {}).get("artifacts", {}).items():
    listed = artifacts.get("artifacts", [])
    if len(listed) == 1 and str(listed[0].get("name", "")).isdigit():
      result[key] = int(listed[0]["name"])
  return result


def _model_ids(metadata: Dict[str, Any], ids: Mapping[str, Any]) -> None:
  """Sets a blessing's model id properties from the inputs the URI properties name."""
  for uri_key, id_key in _MODEL_ID_PROPERTIES:
    if id_key in metadata and metadata.get(uri_key) in ids:
      metadata[id_key] = ids[metadata[uri_key]]


def restore(executor_output: Dict[str, Any], remote: Mapping[str, List[str]],
            paths: Mapping[str, str] = None,
            ids: Mapping[str, Any] = None) -> Dict[str, Any]:
  """The executor output with remote URIs again, ML Metadata ids for model ids, and
  without null metadata values.

  Args:
    executor_output: ExecutorOutput JSON as TFX's entry point wrote it.
    remote: {output key: the original URIs}, from :func:`adapt`.
    paths: {local path: remote URI} (:func:`local_to_remote`), for metadata values
      that name an artifact's files, e.g. a blessing's ``current_model``.
    ids: {remote URI: ML Metadata id} of the inputs (:func:`input_ids`), for a
      blessing's ``current_model_id`` and ``baseline_model_id``.
  """
  restored = copy.deepcopy(executor_output)
  for key, artifacts in restored.get("artifacts", {}).items():
    uris = remote.get(key, [])
    for i, artifact in enumerate(artifacts.get("artifacts", [])):
      if i < len(uris) and uris[i]:
        artifact["uri"] = uris[i]
      metadata = artifact.get("metadata") or {}
      for name in list(metadata):
        if metadata[name] is None:
          logging.info("Output %s: metadata %r is null, left out (KFP cannot record null)",
                       key, name)
          del metadata[name]
        else:
          metadata[name] = _remote_value(metadata[name], paths or {})
      _model_ids(metadata, ids or {})
  return restored


def checkpoint_root(executor_input: Mapping[str, Any], environ: Mapping[str, str]
                    ) -> Optional[str]:
  """The durable directory, keyed by run and task, for this step's checkpoints; None
  when there is none (no remote output, or a store TensorFlow cannot write and no
  volume). The task root is ``dirname(dirname(output URI))``: ``<root>/<pipeline>/
  <run>/<task>`` from backend 2.4.0 (the output URI is ``<task>/<salt>/<key>``:
  ``driver/driver.go`` 2.4.0:1588), ``<root>/<pipeline>/<run>`` on 2.3 (no salt,
  ``driver.go`` 2.3.0:1242; 2.3 does not retry)."""
  uris = sorted(artifacts["artifacts"][0].get("uri", "") for key, artifacts in
                executor_input.get("outputs", {}).get("artifacts", {}).items()
                if key not in backend_outputs(executor_input) and artifacts.get("artifacts"))
  remote = [u for u in uris if local_path(u, "/") != u]
  if not remote:
    return None
  task_root = remote[0].rstrip("/").rsplit("/", 2)[0]
  volume = environ.get(CHECKPOINT_VOLUME_ENV)
  if volume:
    mounted = os.path.join(environ.get(MOUNT_ROOT_ENV, "/"), volume.lstrip("/"))
    return os.path.join(mounted, local_path(task_root, "/").lstrip("/"))
  if task_root.startswith(DURABLE_ROOTS):
    return beam_uri(task_root)  # minio:// as s3://, the name TensorFlow opens.
  return None


def check_volume(root: str, environ: Mapping[str, str]) -> None:
  """Raises EntrypointError, naming the volume and the fix, when this process cannot
  create `root` (the checkpoints' directory on ``checkpoint_volume``) or a file in it:
  KFP sets no ``fsGroup`` (kubeflow/pipelines backend/src/v2/compiler/argocompiler/
  argo.go: only runAsUser/runAsGroup/runAsNonRoot), so a new claim's root is usually
  ``root:root 0755``; every retry would meet the same wall, after its set-up."""
  volume = environ.get(CHECKPOINT_VOLUME_ENV, "")
  probe = os.path.join(root, f".tfx-parallel-write-probe-{os.getpid()}")
  try:
    os.makedirs(root, exist_ok=True)
    with open(probe, "w") as f:
      f.write("probe")
    os.remove(probe)
  except OSError as e:
    mounted = os.path.join(environ.get(MOUNT_ROOT_ENV, "/"), volume.lstrip("/"))
    try:
      st = os.stat(mounted)
      owner = f"owned by uid {st.st_uid} gid {st.st_gid}, mode {st.st_mode & 0o7777:o}"
    except OSError:
      owner = "not mounted"
    raise EntrypointError(
        f"checkpoint_volume {volume} ({mounted}: {owner}) is not writable by this step's "
        f"user (uid {os.getuid()} gid {os.getgid()}): {type(e).__name__}: {e}. KFP sets no "
        f"fsGroup on its pods, so a new claim's root is usually root:root 0755. Fix: a "
        f"StorageClass whose volumes this uid can write (or an fsGroup in the pod's "
        f"securityContext where the platform allows it), or `chmod 1777` the volume's "
        f"root once from a pod running as root (docs/KUBEFLOW.md, \"Checkpoints\")"
    ) from None


def s3_checkpoints(root: str, executor_input: Mapping[str, Any],
                   store: Optional[object_store.ObjectStore]) -> Optional[str]:
  """`root` (an s3:// task root) once this process can write it through tensorflow-io:
  the store of the step's artifacts (`store`, a multi-node step's), else set up here as
  for one (the endpoint from the input artifacts' store session, the keys from KFP's
  secret, read at run time) and probed. None, after one warning line saying so, when the
  store cannot be set up: the checkpoints stay in the pod."""
  try:
    if store is None or not store.is_s3:
      store = object_store.prepare_executor({"checkpoint root": root}, os.environ,
                                            session_info=session_info(executor_input))
    object_store.probe(root, store)
    return root
  except Exception as e:  # pylint: disable=broad-except  # Said, then local checkpoints.
    print(f"[entrypoint] WARNING: the checkpoints stay in this pod, so a retry trains again "
          f"from step 0: {root} cannot be written through tensorflow-io's s3 "
          f"({type(e).__name__}: {str(e).strip()[:500]})", file=sys.stderr, flush=True)
    return None


def looks_up_baseline(executor_class_path: str, executor_input: Mapping[str, Any]) -> bool:
  """Whether the step is a ConvergenceEvaluator whose config (the ``config`` parameter,
  JSON) says ``baseline: latest_blessed``."""
  if not executor_class_path.startswith(EVALUATOR_EXECUTOR_PREFIX):
    return False
  raw = executor_input.get("inputs", {}).get("parameterValues", {}).get("config")
  try:
    config = json.loads(raw) if isinstance(raw, str) else raw
  except ValueError:
    return False
  return isinstance(config, dict) and config.get("baseline") == LATEST_BLESSED


def _output_root(executor_input: Mapping[str, Any]) -> Optional[str]:
  """The URI of one of the step's own outputs (under the run's pipeline root)."""
  uris = sorted(artifacts["artifacts"][0].get("uri", "") for key, artifacts in
                executor_input.get("outputs", {}).get("artifacts", {}).items()
                if key not in backend_outputs(executor_input) and artifacts.get("artifacts"))
  return uris[0] if uris else None


def baseline_store(executor_input: Mapping[str, Any], environ: MutableMapping[str, str]
                   ) -> Optional[object_store.ObjectStore]:
  """Sets this process up to read a looked-up baseline Model at the URI ML Metadata
  records for it (``minio://b/k`` read as ``s3://b/k``), as the KFP launcher reads an
  input of its pipeline root's bucket. That Model is no input of the step, so no
  launcher downloaded it (``downloadArtifacts`` copies the ExecutorInput's inputs only:
  ``backend/src/v2/component/launcher_v2.go`` 2.5.0:619-688, 2.16.0:767-844, each to
  ``LocalPathForURI``, 2.5.0:882-893, 2.16.0:1079-1090). The launcher opens its run's
  bucket with the pipeline's ``store_session_info`` (2.5.0:211-220, 2.16.0:220-241), and
  an input elsewhere in the same bucket with the same session (``fetchNonDefaultBuckets``,
  2.5.0:714-722, 2.16.0:870-878); this process does the same through TensorFlow:

  * ``minio://`` (KFP's MinIO or SeaweedFS; the default root, ``config/env.go``
    2.5.0:37, 2.16.0:38) and ``s3://`` with an endpoint from the session or
    ``TFX_PARALLEL_S3_ENDPOINT``: the endpoint, region and the keys of the session's
    secret, read now (object_store.prepare_executor, as for a multi-node step);
  * ``s3://`` otherwise (AWS S3; the launcher's ``fromEnv`` session, ``config/s3.go``
    2.5.0:86, 2.16.0:91, opens the bucket with the ambient credentials): the AWS SDK's
    own chain (e.g. IRSA), only the filesystem registered;
  * ``gs://``: nothing to do (TensorFlow's own GCS filesystem, the pod's credentials,
    as the launcher's default session).

  Returns the store, or None (nothing to set up, or after one warning line saying why
  it could not be: the evaluator then fails naming the baseline it cannot read)."""
  root = _output_root(executor_input)
  if not root or not root.startswith(("minio://", "s3://")):
    return None
  info = session_info(executor_input)
  ambient = (root.startswith("s3://") and object_store.ENV_PREFIX + "ENDPOINT" not in environ
             and "ENDPOINT" not in object_store.session_settings(info))
  try:
    if ambient:
      store = object_store.ObjectStore("s3://")
      object_store.register(store)
    else:
      store = object_store.prepare_executor({"pipeline root": beam_uri(root)}, environ,
                                            session_info=info)
  except Exception as e:  # pylint: disable=broad-except  # Said; the evaluator names the fix.
    print(f"[entrypoint] WARNING: a baseline looked up in ML Metadata (evaluator.baseline: "
          f"latest_blessed) cannot be read from this step: {beam_uri(root)}'s store could "
          f"not be set up ({type(e).__name__}: {str(e).strip()[:500]})",
          file=sys.stderr, flush=True)
    return None
  logging.info("Baseline lookup: the step reads a looked-up Model at its object store URI "
               "(%s)", store.endpoint or "the AWS SDK's endpoint and credentials")
  return store


# Beam's S3 filesystem options (apache_beam/options/pipeline_options.py S3Options).
_BEAM_S3_FLAGS = ("--s3_endpoint_url", "--s3_access_key_id", "--s3_secret_access_key",
                  "--s3_region_name")


def beam_s3_args(executor_input: Mapping[str, Any], beam_args: Sequence[str],
                 environ: Mapping[str, str], api_client=None) -> List[str]:
  """Beam's S3 options for a step whose runner's workers run outside the pod and write
  its ``minio://``/``s3://`` outputs themselves, made at run time: the endpoint from the
  input artifacts' store session (the KFP launcher's own for the bucket) unless
  ``TFX_PARALLEL_S3_*`` says otherwise; a step without inputs (the ingest) has none, and
  a ``minio://`` root gets KFP's store (object_store.kfp_minio_endpoint: SeaweedFS's
  ``seaweedfs.kubeflow:9000`` from 2.16, ``minio-service.kubeflow:9000`` before); the
  keys read now from KFP's secret (the one the launcher in this pod reads). Nothing of it
  is in the compiled package. [] when the step names any ``--s3_*`` option itself, or
  writes no s3 output, or has an ``s3://`` root that no session or setting places
  elsewhere (AWS S3, ambient credentials, as KFP's launcher), or (after one warning line
  naming the secret or setting) when the store's settings cannot be read: Beam's S3
  filesystem then uses its own defaults (the AWS SDK's ambient credentials, e.g. IRSA)."""
  if any(a.split("=", 1)[0] in _BEAM_S3_FLAGS for a in beam_args):
    return []
  raw = {f"outputs.{key}": artifacts["artifacts"][0].get("uri", "")
         for key, artifacts in executor_input.get("outputs", {}).get("artifacts", {}).items()
         if key not in backend_outputs(executor_input) and artifacts.get("artifacts")}
  outputs = {k: beam_uri(u) for k, u in raw.items() if beam_uri(u).startswith("s3://")}
  if not outputs:
    return []
  settings = dict(environ)
  for setting, value in object_store.session_settings(session_info(executor_input)).items():
    settings.setdefault(object_store.ENV_PREFIX + setting, value)
  if (not any(u.startswith("minio://") for u in raw.values())
      and object_store.ENV_PREFIX + "ENDPOINT" not in settings):
    # An s3:// root that no session or setting places elsewhere is AWS S3 with the
    # ambient credentials, as for the KFP launcher (its s3 session without a providers
    # config is fromEnv: backend/src/v2/config/s3.go 2.16.0:87-96): not KFP's MinIO.
    print(f"[entrypoint] Beam's S3 options are left to Beam's defaults (the AWS SDK's "
          f"endpoint and ambient credentials) for {sorted(set(outputs.values()))[0]}: no "
          f"store session and no {object_store.ENV_PREFIX}ENDPOINT name another store.",
          file=sys.stderr, flush=True)
    return []
  try:
    store = object_store.from_uris(outputs, settings)
    access_key, secret_key = object_store.read_credentials(
        store, object_store.job_namespace(environ),
        api_client if api_client is not None else object_store.default_api_client())
  except Exception as e:  # pylint: disable=broad-except  # Said; Beam's defaults then.
    print(f"[entrypoint] WARNING: Beam's S3 options for the runner's workers are not set "
          f"({type(e).__name__}: {str(e).strip()[:500]}); they use Beam's defaults.",
          file=sys.stderr, flush=True)
    return []
  return [f"--s3_endpoint_url={store.endpoint}", f"--s3_access_key_id={access_key}",
          f"--s3_secret_access_key={secret_key}", f"--s3_region_name={store.region}"]


def artifact_paths(environ: Mapping[str, str]) -> str:
  """"local" (the launcher's copies) or "remote" (the artifacts' URIs): remote when the
  step submits a multi-node job (object_store.remote_mode), whose replicas cannot see
  this pod's files. ``TFX_PARALLEL_ARTIFACT_PATHS`` may say the same; "local" for a
  multi-node step is refused."""
  implied = "remote" if object_store.remote_mode(environ) else "local"
  paths = environ.get(ARTIFACT_PATHS_ENV, implied)
  if paths not in ARTIFACT_PATHS:
    raise EntrypointError(f"{ARTIFACT_PATHS_ENV} must be one of {ARTIFACT_PATHS}. "
                          f"Received: {paths!r}")
  if paths == "local" and implied == "remote":
    raise EntrypointError(f"{ARTIFACT_PATHS_ENV}=local: TFX_PARALLEL_TFJOB_IMAGE is set, so "
                          f"this step's replicas run in other pods, which cannot read this "
                          f"pod's copies; unset {ARTIFACT_PATHS_ENV} (remote is chosen)")
  return paths


def artifact_uris(executor_input: Mapping[str, Any]) -> Dict[str, str]:
  """{"<inputs|outputs>.<key>[i]": URI} of the ExecutorInput's artifacts."""
  return {f"{side}.{key}[{i}]": artifact.get("uri", "")
          for side in ("inputs", "outputs")
          for key, artifacts in executor_input.get(side, {}).get("artifacts", {}).items()
          for i, artifact in enumerate(artifacts.get("artifacts") or [])}


def session_info(executor_input: Mapping[str, Any]) -> str:
  """The first input artifact's ``store_session_info`` (the launcher's session for its
  bucket, recorded with it: object_store.session_settings); "" when there is none."""
  for artifacts in executor_input.get("inputs", {}).get("artifacts", {}).values():
    for artifact in artifacts.get("artifacts") or []:
      info = (artifact.get("metadata") or {}).get("store_session_info")
      if isinstance(info, str) and info:
        return info
  return ""


def _parse(argv: List[str]) -> Tuple[argparse.Namespace, List[str]]:
  """The flags of TFX's kubeflow_v2_run_executor; the rest are Beam args."""
  parser = argparse.ArgumentParser(prog="tfx_parallel.kubeflow.entrypoint")
  parser.add_argument("--executor_class_path", required=True)
  parser.add_argument("--json_serialized_invocation_args", required=True)
  parser.add_argument("--json_serialized_inputs_spec_args", default=None)
  parser.add_argument("--placement", default=None,
                      help="JSON the compiler adds for KFP's cache fingerprint; unused")
  parser.add_argument(split_outputs.FLAG, action="append", default=[],
                      help="KEY=SOURCE:SPLIT: make output KEY from Split-SPLIT of output "
                           "SOURCE (kubeflow/split_outputs.py)")
  parser.add_argument(split_outputs.REF_FLAG, action="append", default=[],
                      help="KEY=SOURCE: make output KEY a reference to output SOURCE "
                           "(kubeflow/split_outputs.py)")
  parser.add_argument(ui_outputs.FLAG, action="append", default=[],
                      help="SOURCE: make the system.* outputs the KFP UI draws from the "
                           "files of output SOURCE (kubeflow/ui_outputs.py)")
  return parser.parse_known_args(argv)


def run(argv: List[str], environ: Mapping[str, str]) -> None:
  """Adapts the ExecutorInput, runs TFX's executor entry point, restores the URIs."""
  args, beam_args = _parse(argv)
  if args.placement:
    logging.info("Placement: %s", args.placement)
  del args.placement  # Not a TFX flag.
  splits = split_outputs.parse_flags(args.split_output)
  refs = split_outputs.parse_refs(args.ref_output)
  made_here = sorted(splits) + sorted(refs)
  ui_source = ui_outputs.source_of(args.ui_outputs)
  del args.split_output, args.ref_output, args.ui_outputs  # Not TFX flags.
  executor_input = json.loads(args.json_serialized_invocation_args)
  inputs_spec = (json.loads(args.json_serialized_inputs_spec_args)
                 if args.json_serialized_inputs_spec_args else None)
  paths = artifact_paths(environ)
  mount_root = environ.get(MOUNT_ROOT_ENV, "/") if paths == "local" else None
  outside = runners.runs_outside(beam_args) if beam_args else False
  if paths == "remote":  # TensorFlow's names: minio:// as s3:// (object_store.py).
    logging.info("Remote artifact paths: the step's files are read and written at their "
                 "object store URIs, which the multi-node job's replicas reach too")
    outside = True
  if outside:
    logging.info("The Beam runner (%s) runs its workers outside this pod, so the step "
                 "reads and writes its artifacts' remote URIs (minio:// as s3://)",
                 runners.runner_name(beam_args))
  if outside and paths == "local":  # The workers' S3 settings, at run time (not compiled).
    beam_args = list(beam_args) + beam_s3_args(executor_input, beam_args, environ)
  adapted, remote = adapt(executor_input, inputs_spec, mount_root, outside, made_here,
                          link_references(executor_input, environ))
  args.json_serialized_invocation_args = json.dumps(adapted)
  store = None
  if paths == "remote":  # Credentials, S3 variables, the s3 filesystem; checked first.
    store = object_store.prepare_executor(artifact_uris(adapted), os.environ,
                                  session_info=session_info(executor_input))
  if store is None and looks_up_baseline(args.executor_class_path, executor_input):
    baseline_store(executor_input, os.environ)  # Not an input: no launcher downloads it.
  durable = (checkpoint_root(executor_input, environ)
             if args.executor_class_path.startswith(TRAINER_EXECUTOR_PREFIX) else None)
  if durable and environ.get(CHECKPOINT_VOLUME_ENV):
    check_volume(durable, environ)
  elif durable and durable.startswith("s3://"):
    durable = s3_checkpoints(durable, executor_input, store)
  if durable:  # The executor (run in this process) and its training processes read it.
    logging.info("Checkpoints: %s (a retry of this step resumes from them)", durable)
    os.environ[CHECKPOINT_ROOT_ENV] = durable
  # The inputs' ML Metadata ids, for ConvergenceEvaluator's latest-blessed lookup (TFX's
  # entry point gives the executor hashed ids; lookup.py).
  os.environ[INPUT_IDS_ENV] = json.dumps(input_ids_by_key(executor_input), sort_keys=True)
  # Imported here: TFX imports TensorFlow (main has set its environment).
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor  # pylint: disable=g-import-not-at-top
  kubeflow_v2_run_executor._run_executor(args, beam_args)  # pylint: disable=protected-access
  output_file = adapted["outputs"]["outputFile"]
  with fileio.open(output_file, "r") as f:
    executor_output = json.loads(f.read())
  outputs = {key: artifacts["artifacts"][0]["uri"] for key, artifacts in
             executor_input["outputs"]["artifacts"].items()
             if key not in backend_outputs(executor_input) and artifacts.get("artifacts")}
  step_paths = {key: step_uri(uri, mount_root, outside) for key, uri in outputs.items()}
  split_outputs.make_all(splits, executor_output, step_paths, outputs)
  split_outputs.make_refs(refs, executor_output, step_paths, outputs, {
      key: artifacts["artifacts"][0].get("type") for key, artifacts in
      executor_input["outputs"]["artifacts"].items() if artifacts.get("artifacts")})
  remote.update({key: [outputs[key]] for key in made_here if key in outputs})
  if ui_source:  # system.* outputs: not in `outputs` (backend_outputs), made here.
    ui_uris = {key: artifacts["artifacts"][0]["uri"] for key, artifacts in
               executor_input["outputs"]["artifacts"].items()
               if key in ui_outputs.OUTPUTS and artifacts.get("artifacts")}
    made = ui_outputs.make(step_paths[ui_source], {
        key: step_uri(uri, mount_root, outside) for key, uri in ui_uris.items()}, ui_uris)
    executor_output.setdefault("artifacts", {}).update(made)
  # What the step wrote at remote URIs, without "directory" objects (#13476).
  # A multi-node step's S3 is the store set up above (boto3 does not read S3_ENDPOINT).
  s3_store = store if store is not None and store.is_s3 else None
  dir_markers.remove_all(sorted(step_paths.values()), beam_args,
                         s3_endpoint=s3_store.endpoint if s3_store else None,
                         s3_verify=s3_store.verify_ssl if s3_store else True)
  with fileio.open(output_file, "w") as f:
    f.write(json.dumps(restore(executor_output, remote,
                               local_to_remote(executor_input, mount_root, outside),
                               input_ids(executor_input)),
                       indent=2, sort_keys=True, allow_nan=False))  # protojson rejects NaN.
  logging.info("Executor output written to %s", output_file)


def main(argv: Optional[List[str]] = None) -> None:
  """Runs the step, then ends the process at once: 0 on success, 1 on an error."""
  logging.basicConfig(level=logging.INFO)
  tfenv.prepare()  # The container's entry point: before TFX imports TensorFlow.
  status = 1
  try:
    run(sys.argv[1:] if argv is None else argv, os.environ)
    status = 0
  except SystemExit as e:
    status = e.code if isinstance(e.code, int) else 1
  except BaseException:  # pylint: disable=broad-except  # Reported, then exit status 1.
    traceback.print_exc()
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(status)  # pylint: disable=protected-access


if __name__ == "__main__":
  main()
