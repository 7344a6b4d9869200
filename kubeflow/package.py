"""Builds the KFP v2 package: TFX's PipelineSpec, completed, plus the PlatformSpec.

TFX's KubeflowV2DagRunner compiles the pipeline (images, DAG) in schema 2.1.0
(``use_pipeline_spec_2_1``: ``runtimeValue.constant`` parameters, ``parameterType``,
``--json_serialized_inputs_spec_args``), with our entry point as every container's
command (kubeflow/entrypoint.py). What it lacks is added here, per executor: resources
in both KFP schema generations (for every component, ExampleGen included: TFX ignores
platform_config there, tensorflow/tfx#6146), the environment, per-component Beam args,
importable schema titles for our artifact types (also in the inputs spec argument),
the default pipeline root; and the Kubernetes PlatformSpec (node selectors,
tolerations) as a second YAML document. Inputs are narrowed to what a step reads, since
the launcher downloads every input in full (kubeflow/split_outputs.py: the evaluator's
one-split Examples, a remote-path trainer's reference). :func:`check_open_source` then
refuses a spec open-source KFP would reject.
"""
import dataclasses
import json
import logging
from typing import Any, Dict, List, Mapping, Tuple

import yaml
from tfx import v1 as tfx
from tfx.dsl.components.base import base_beam_component

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.common import keys
from tfx_parallel.components.convergence_evaluator.component import ConvergenceEvaluator
from tfx_parallel.components.distributed_trainer.component import DistributedTrainer
from tfx_parallel.kubeflow import (artifact_types, cache, platform_spec, resources, split_outputs,
                                   ui_outputs)
from tfx_parallel.kubeflow.config import DEFAULT_SECTION, ComponentPlacement, KubeflowConfig
from tfx_parallel.kubeflow.entrypoint import DURABLE_ROOTS, artifact_paths

# Opts the trainer into a TFJob (components/distributed_trainer/kube/settings.py ENV_IMAGE).
_TFJOB_IMAGE_ENV = "TFX_PARALLEL_TFJOB_IMAGE"
# tfx/orchestration/kubeflow/v2/pipeline_builder.DEFAULT_IMAGE_PATH_KEY.
_DEFAULT_IMAGE_KEY = "default_image_path"
# Every container runs our entry point (kubeflow/entrypoint.py), which adapts what the
# open-source KFP driver and launcher hand over, then runs TFX's kubeflow_v2_run_executor.
ENTRYPOINT_COMMAND = ("python", "-m", "tfx_parallel.kubeflow.entrypoint")


@dataclasses.dataclass(frozen=True)
class Package:
  """A compiled pipeline: the bare PipelineSpec and the Kubernetes PlatformSpec, and
  {task: why KFP's cache is off for it} (kubeflow/cache.py); notes for the person
  compiling (what the package cannot do on their setup)."""
  pipeline_spec: Dict[str, Any]
  platform_spec: Dict[str, Any]
  uncached: Dict[str, str] = dataclasses.field(default_factory=dict)
  notes: Tuple[str, ...] = ()

  def documents(self) -> List[Dict[str, Any]]:
    return [self.pipeline_spec] + ([self.platform_spec] if self.platform_spec else [])

  def to_yaml(self) -> str:
    header = (f"# PIPELINE DEFINITION\n# Name: {self.pipeline_spec['pipelineInfo']['name']}\n"
              "# Compiled by `tfx-parallel compile` from a TFX pipeline.\n")
    return header + yaml.safe_dump_all(self.documents(), sort_keys=True)


def check_component_ids(config: KubeflowConfig, nodes: Mapping[str, Any]) -> None:
  """Rejects config sections for components the pipeline does not have."""
  for name in config.components:
    if name != DEFAULT_SECTION and name not in nodes:
      raise ConfigError(f"components.{name}", f"the pipeline has no component {name!r}; "
                        f"its components are {sorted(nodes)} (or use '{DEFAULT_SECTION}')")


def _beam_args(config: KubeflowConfig, node_id: str, node) -> List[str]:
  placement = config.placement(node_id)
  if isinstance(node, base_beam_component.BaseBeamComponent):
    return list(placement.beam_pipeline_args)
  inherited = config.components[DEFAULT_SECTION].beam_pipeline_args
  if placement.beam_pipeline_args != inherited:
    raise ConfigError(f"components.{node_id}.beam_pipeline_args",
                      f"{node_id} is not a Beam component; only Beam components "
                      "(PartitionedExampleGen) take Beam args")
  return []


def retry_policy(placement: ComponentPlacement) -> Dict[str, Any]:
  """``PipelineTaskSpec.RetryPolicy`` as proto JSON, with every field written, as the KFP
  SDK's ``RetryPolicy.to_proto`` does (kfp/dsl/structures.py); {} for no retries."""
  retry = placement.retry
  if not retry.max_retry_count:
    return {}
  return {"maxRetryCount": retry.max_retry_count,
          "backoffDuration": f"{retry.backoff_seconds}s",
          "backoffFactor": float(retry.backoff_factor),
          "backoffMaxDuration": f"{retry.backoff_max_seconds}s"}


def _checkpoint_notes(config: KubeflowConfig, nodes: Mapping[str, Any]) -> List[str]:
  """Rejects checkpoint_volume outside the trainer; notes a trainer whose retries would
  restart from step 0 (its checkpoints cannot leave the pod)."""
  notes = []
  for node_id, node in sorted(nodes.items()):
    placement = config.placement(node_id)
    if not isinstance(node, DistributedTrainer):
      if placement.checkpoint_volume is not None:
        section = node_id if node_id in config.components else DEFAULT_SECTION
        raise ConfigError(f"components.{section}.checkpoint_volume",
                          f"only DistributedTrainer writes checkpoints; set it in "
                          f"components.DistributedTrainer. Received it for {node_id}")
      continue
    if placement.checkpoint_volume is not None and _TFJOB_IMAGE_ENV in placement.env:
      raise ConfigError(f"components.{node_id}.checkpoint_volume",
                        f"the TFJob's replicas ({_TFJOB_IMAGE_ENV} is set) do not mount "
                        f"{node_id}'s volumes and write the checkpoints themselves: use a "
                        f"gs://, s3:// or minio:// pipeline_root (they keep them beside "
                        f"the run's artifacts). Received: {placement.checkpoint_volume!r}")
    if (placement.retry.max_retry_count and placement.checkpoint_volume is None
        and not config.pipeline_root.startswith(DURABLE_ROOTS)):
      notes.append(
          f"components.{node_id}.checkpoint_volume is not set and pipeline_root "
          f"{config.pipeline_root} is not one of {', '.join(DURABLE_ROOTS)} (where the "
          f"step keeps its checkpoints under the task's root): they stay in the pod, "
          f"so a retried {node_id} (retry.max_retry_count "
          f"{placement.retry.max_retry_count}) trains again from step 0. Mount a "
          f"PersistentVolumeClaim (pvc_mounts) and set checkpoint_volume to its path.")
  return notes


def tfx_pipeline_spec(pipeline: tfx.dsl.Pipeline, images: Dict[str, str]) -> Dict[str, Any]:
  """The bare PipelineSpec (JSON dict) TFX's KubeflowV2DagRunner compiles."""
  runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
      tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
          default_image=dict(images), default_commands=list(ENTRYPOINT_COMMAND),
          use_pipeline_spec_2_1=True))
  with artifact_types.kfp_type_names(artifact_types.custom_types(pipeline.components)) as titles:
    job = runner.run(pipeline, write_out=False)
  spec = job["pipelineSpec"]
  artifact_types.retitle(spec, titles)
  return spec


_INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"


def _inputs_spec_arg(container: Dict[str, Any], input_definitions: Dict[str, Any]) -> None:
  """Rewrites the inputs spec TFX put in the args with the (retitled) component inputs."""
  args = container.get("args", [])
  if _INPUTS_SPEC_FLAG not in args or args.index(_INPUTS_SPEC_FLAG) + 1 >= len(args):
    raise ValueError(f"TFX compiled no {_INPUTS_SPEC_FLAG} (use_pipeline_spec_2_1 off?): "
                     f"{args!r}")
  args[args.index(_INPUTS_SPEC_FLAG) + 1] = json.dumps(input_definitions, indent=2,
                                                       sort_keys=True)


def _complete_executor(container: Dict[str, Any], placement: ComponentPlacement,
                       beam_args: List[str]) -> None:
  container_resources = resources.container_resources(placement)
  if container_resources:
    container["resources"] = container_resources
  container["env"] = resources.container_env(placement)
  container["args"] = (list(container.get("args", []))
                       + ["--placement", resources.cache_placement(placement)] + beam_args)


OPEN_SOURCE_SCHEMA_VERSION = "2.1.0"  # The only one the KFP API server accepts.


def check_open_source(spec: Dict[str, Any]) -> None:
  """Raises ValueError if open-source KFP would reject or fail to run `spec`.

  Its API server accepts schema 2.1.0 only (backend/src/apiserver/template/
  v2_template.go), its driver resolves only ``runtimeValue.constant``
  (driver/resolve.go), and its Argo compiler has no resolver nodes (argocompiler/argo.go).
  """
  if spec.get("schemaVersion") != OPEN_SOURCE_SCHEMA_VERSION:
    raise ValueError(f"schemaVersion is {spec.get('schemaVersion')!r}; open-source KFP "
                     f"accepts only {OPEN_SOURCE_SCHEMA_VERSION}")
  for task_id, task in spec["root"]["dag"]["tasks"].items():
    for name, parameter in task.get("inputs", {}).get("parameters", {}).items():
      runtime = parameter.get("runtimeValue")
      if runtime is not None and set(runtime) != {"constant"}:
        raise ValueError(f"task {task_id} parameter {name}: runtimeValue {sorted(runtime)}; "
                         "the open-source KFP driver resolves only 'constant'")
  for label, executor in spec["deploymentSpec"]["executors"].items():
    if "resolver" in executor:
      raise ValueError(f"executor {label} is a resolver; open-source KFP's Argo compiler "
                       "rejects resolver nodes ('resolver not implemented yet')")


def build(config: KubeflowConfig, pipeline: tfx.dsl.Pipeline) -> Package:
  """Compiles `pipeline` and applies `config`'s placements; ConfigError names the key."""
  nodes = {node.id: node for node in pipeline.components}
  check_component_ids(config, nodes)
  images = {_DEFAULT_IMAGE_KEY: config.components[DEFAULT_SECTION].image}
  images.update({node_id: config.placement(node_id).image for node_id in nodes})
  beam_args = {node_id: _beam_args(config, node_id, node) for node_id, node in nodes.items()}
  spec = tfx_pipeline_spec(pipeline, images)
  spec["defaultPipelineRoot"] = config.pipeline_root
  executors = spec["deploymentSpec"]["executors"]
  placements = {}
  for task_id, task in spec["root"]["dag"]["tasks"].items():
    component = spec["components"][task["componentRef"]["name"]]
    label = component["executorLabel"]
    placement = config.placement(task_id)
    _inputs_spec_arg(executors[label]["container"], component.get("inputDefinitions", {}))
    _complete_executor(executors[label]["container"], placement, beam_args[task_id])
    if retry_policy(placement):
      task["retryPolicy"] = retry_policy(placement)
    placements[label] = placement
  for note in split_outputs.rewire(spec, {  # The launcher downloads inputs in full.
      node_id: (keys.EXAMPLES_KEY, json.loads(node.exec_properties[keys.CONFIG_KEY])["split"])
      for node_id, node in nodes.items() if isinstance(node, ConvergenceEvaluator)}):
    logging.info("%s", note)
  for node_id, node in nodes.items():  # Results the KFP UI draws (kubeflow/ui_outputs.py).
    if isinstance(node, ConvergenceEvaluator):
      ui_outputs.declare(spec, node_id, keys.METRICS_KEY)
  remote_steps = {  # Their replicas read the Examples at the remote URI themselves.
      task_id: keys.EXAMPLES_KEY for task_id, task in spec["root"]["dag"]["tasks"].items()
      if isinstance(nodes.get(task_id), DistributedTrainer)
      and artifact_paths({e["name"]: e.get("value", "") for e in executors[
          spec["components"][task["componentRef"]["name"]]["executorLabel"]][
              "container"].get("env", [])}) == "remote"}
  for note in split_outputs.rewire_refs(spec, remote_steps):
    logging.info("%s", note)
  for task_id in remote_steps:  # Their inputs spec argument declares the reference type.
    component = spec["components"][spec["root"]["dag"]["tasks"][task_id]["componentRef"]["name"]]
    _inputs_spec_arg(executors[component["executorLabel"]]["container"],
                     component.get("inputDefinitions", {}))
  uncached = cache.uncached(pipeline.components) if pipeline.enable_cache else {}
  cache.switch_off(spec, uncached)
  notes = _checkpoint_notes(config, nodes)
  check_open_source(spec)
  return Package(pipeline_spec=spec, platform_spec=platform_spec.platform_spec(placements),
                 uncached=uncached, notes=tuple(notes))
