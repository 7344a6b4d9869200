"""``evaluator.baseline = "latest_blessed"``: the latest blessed model of the same pipeline,
found in ML Metadata by the executor itself (no resolver node: the Argo compiler rejects
them), locally and on Kubeflow Pipelines.

The pipeline is the candidate Model's pipeline context, found from the candidate's ML
Metadata id:

* locally (TFX's LocalDagRunner), context type ``pipeline`` (tfx 1.16
  ``dsl/compiler/constants.py``:23 ``PIPELINE_CONTEXT_TYPE_NAME``) named after the
  pipeline; TFX links every output artifact with every context of its execution
  (``orchestration/portable/mlmd/execution_lib.py``:276-340 ``put_execution``, called by
  ``orchestration/portable/execution_publish_utils.py``);
* on KFP, context type ``system.Pipeline`` (``backend/src/v2/metadata/client.go``:54),
  the ``pipelineCtx`` of ``GetPipeline``; ``PublishExecution`` puts every output artifact
  with the pipeline and pipeline-run contexts (client.go 2.17.0:558-610: ``Contexts:
  pipelineCtx, pipelineRunCtx``), so ML Metadata attributes them to both. The launcher
  records each output's metadata as custom properties (client.go ``RecordArtifact``),
  every number as a double: ``blessed`` is 1.0 there, 1 locally.

In that context, the latest (create time, then id) ModelBlessing whose ``blessed`` is 1 and
whose ``current_model_id`` names another Model than the candidate gives the baseline.
Blessings of the stock Evaluator count too (same properties, tfx evaluator/constants.py).
"""
import dataclasses
from typing import Iterable, Optional

from absl import logging
from google.protobuf import json_format
from ml_metadata import errors
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

PIPELINE_CONTEXT_TYPES = ("pipeline", "system.Pipeline")
BLESSING_TYPES = ("ModelBlessing", "tfx.ModelBlessing")
MODEL_TYPES = ("Model", "tfx.Model")
RUN_CONTEXT_TYPES = ("system.PipelineRun",)
NAMESPACE = "namespace"
BLESSED = "blessed"
CURRENT_MODEL_ID = "current_model_id"
CURRENT_MODEL = "current_model"


@dataclasses.dataclass(frozen=True)
class Found:
  """The baseline: the blessed Model's URI and ML Metadata id, and its blessing's id;
  ``model`` the Model as ML Metadata holds it (its task properties say how to read it)."""
  uri: str
  model_id: int
  blessing_id: int
  pipeline: str
  model: Optional[metadata_store_pb2.Artifact] = None


def _number(value) -> Optional[float]:
  kind = value.WhichOneof("value")
  if kind in ("int_value", "double_value"):
    return float(getattr(value, kind))
  if kind == "string_value":
    try:
      return float(value.string_value)
    except ValueError:
      return None
  return None


def _type_names(store, type_ids: Iterable[int], getter) -> dict:
  ids = sorted(set(type_ids))
  return {t.id: t.name for t in getter(ids)} if ids else {}


def pipeline_context(store, model_id: int):
  """The pipeline context the candidate Model (``model_id``) belongs to; None when the
  store has no such artifact or it is in no pipeline context."""
  if not store.get_artifacts_by_id([model_id]):  # E.g. a hashed id (no such artifact).
    return None
  try:
    contexts = store.get_contexts_by_artifact(model_id)
  except errors.NotFoundError:  # In no context.
    return None
  names = _type_names(store, [c.type_id for c in contexts], store.get_context_types_by_id)
  for context in contexts:
    if names.get(context.type_id) in PIPELINE_CONTEXT_TYPES:
      return context
  return None


def run_namespace(store, artifact_id: int) -> Optional[str]:
  """The Kubernetes namespace of the KFP run that made the artifact: the ``namespace``
  custom property of its ``system.PipelineRun`` context (client.go 2.4.1:312,1212 and
  2.16.0:367 ``GetPipeline``: KFP keys the ``system.Pipeline`` context by the pipeline's
  name alone, so two profiles' pipelines of one name share it); None locally."""
  try:
    contexts = store.get_contexts_by_artifact(artifact_id)
  except errors.NotFoundError:
    return None
  names = _type_names(store, [c.type_id for c in contexts], store.get_context_types_by_id)
  for context in contexts:
    if (names.get(context.type_id) in RUN_CONTEXT_TYPES
        and NAMESPACE in context.custom_properties):
      return context.custom_properties[NAMESPACE].string_value
  return None


def latest_blessed(store, model_id: int) -> Optional[Found]:
  """The latest blessed Model of the candidate's pipeline other than the candidate
  (module docstring), made in the candidate run's namespace on KFP (``run_namespace``:
  another profile's model is neither this user's baseline nor readable with this
  namespace's keys); None on the first run (nothing blessed yet)."""
  context = pipeline_context(store, model_id)
  if context is None:
    logging.warning("ML Metadata has no pipeline context of the candidate Model (id %d): "
                    "no baseline to look up", model_id)
    return None
  namespace = run_namespace(store, model_id)
  artifacts = store.get_artifacts_by_context(context.id)
  names = _type_names(store, [a.type_id for a in artifacts], store.get_artifact_types_by_id)
  blessings = [a for a in artifacts if names.get(a.type_id) in BLESSING_TYPES
               and BLESSED in a.custom_properties
               and _number(a.custom_properties[BLESSED]) == 1.0
               and CURRENT_MODEL_ID in a.custom_properties]
  for blessing in sorted(blessings, key=lambda a: (a.create_time_since_epoch, a.id),
                         reverse=True):
    baseline_id = _number(blessing.custom_properties[CURRENT_MODEL_ID])
    if baseline_id is None or int(baseline_id) == model_id:
      continue
    found = store.get_artifacts_by_id([int(baseline_id)])
    if not found:
      continue
    model = found[0]
    model_type = _type_names(store, [model.type_id], store.get_artifact_types_by_id)
    if model_type.get(model.type_id) not in MODEL_TYPES:
      continue
    if namespace is not None and run_namespace(store, model.id) != namespace:
      continue  # Another profile's run of a pipeline of the same name.
    return Found(uri=model.uri, model_id=model.id, blessing_id=blessing.id,
                 pipeline=context.name, model=model)
  return None


# Where the executor finds ML Metadata: a connection config given to the component
# (locally: the pipeline's own store, pipeline/pipeline.py passes it), else KFP's
# metadata-grpc-service from the variables every KFP executor pod has (from
# metadata-grpc-configmap; argocompiler/container.go 2.5.0:437-438, as
# kubeflow/entrypoint.py reads them).
MLMD_HOST_ENV = "METADATA_GRPC_SERVICE_HOST"
MLMD_PORT_ENV = "METADATA_GRPC_SERVICE_PORT"
# Set by kubeflow/entrypoint.py on KFP: JSON {input key: ML Metadata id} (the KFP
# runtime artifact's ``name``); TFX's KFP v2 entry point gives the executor hashed ids.
INPUT_IDS_ENV = "TFX_PARALLEL_INPUT_IDS"


def readable_uri(uri: str) -> str:
  """The name TensorFlow opens a looked-up Model's URI by: KFP records ``minio://b/k``,
  which is ``s3://b/k`` to tensorflow-io's filesystem (which kubeflow/entrypoint.py
  ``baseline_store`` sets up with the pipeline root's store; ``gs://`` is TensorFlow's
  own). No launcher downloads it: it is no input of the step."""
  return "s3://" + uri[len("minio://"):] if uri.startswith("minio://") else uri


def open_store(connection_config_json: str, environ):
  """An ML Metadata store: from ``connection_config_json`` (a ConnectionConfig as JSON)
  when set, else KFP's gRPC service; ValueError naming both when neither is there."""
  if connection_config_json:
    config = json_format.Parse(connection_config_json, metadata_store_pb2.ConnectionConfig())
    return metadata_store.MetadataStore(config)
  host = environ.get(MLMD_HOST_ENV)
  if host:
    return metadata_store.MetadataStore(metadata_store_pb2.MetadataStoreClientConfig(
        host=host, port=int(environ.get(MLMD_PORT_ENV, "8080")), client_timeout_sec=60))
  raise ValueError(
      "evaluator.baseline is 'latest_blessed' but ConvergenceEvaluator has no ML Metadata "
      "to look in: pass metadata_connection_config=<the pipeline's> to "
      f"ConvergenceEvaluator (pipeline.create_pipeline does), or run on Kubeflow ({MLMD_HOST_ENV} "
      "set), or pass baseline_model=<channel>, or set evaluator.baseline=null. "
      f"Received: no connection config, {MLMD_HOST_ENV} unset")
