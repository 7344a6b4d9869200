"""Strictly validates a compiled package with the current KFP SDK (a separate venv).

    python kubeflow/validate_package.py pipeline.yaml [--compare-with-kfp]

Run with an interpreter that has current ``kfp`` and ``kfp-kubernetes`` (the newer
resource fields need kfp-pipeline-spec >= 0.4, which cannot be installed beside TFX
1.16); tests/test_kubeflow_kfp.py creates such a venv in .venv-kfp. Standalone: it
imports nothing from tfx_parallel. Checks:

0. the KFP API server's upload rules (``NewV2SpecTemplate`` in kubeflow/pipelines
   ``backend/src/apiserver/template/v2_template.go``): exactly one PipelineSpec
   document, ``schemaVersion`` 2.1.0, a ``pipelineInfo.name`` of lower case
   alphanumerics, '-' or '.', starting and ending alphanumeric, a ``root``; at most one
   PlatformSpec document with a ``kubernetes`` platform; each parsed strictly
   (``protojson.Unmarshal``); any other document is rejected here (the server ignores it);
1. document 1 parses into ``pipeline_spec_pb2.PipelineSpec`` with unknown fields
   rejected; document 2 into ``PlatformSpec``, and each executor's config into
   kfp-kubernetes' ``KubernetesExecutorConfig``, likewise strictly;
2. every platform executor exists in the PipelineSpec;
3. ``kfp.components.load_component_from_file`` loads the package;
3b. every task input wired to another task's output artifact is declared with that
   output's type (schema title), and each executor's ``--json_serialized_inputs_spec_args``
   declares its component's input types: the KFP SDK refuses a pipeline that wires
   types apart (``kfp/dsl/types/type_utils.py`` ``verify_type_compatibility``), while
   KFP's driver never checks (``driver/resolve.go`` 2.17.0:543-566) and the step would
   get an artifact of a type its executor does not expect (the ``tfx_parallel.ExamplesRef``
   reference and ``tfx.Examples``, kubeflow/split_outputs.py);
4. with --compare-with-kfp: for each executor, compiles a one-task KFP pipeline with
   the same resources, env, PVC mounts, node selector and tolerations through the KFP
   SDK and kfp-kubernetes, and requires identical ``resources``, ``env`` and executor
   config (less kfp-kubernetes' ``pvcNameParameter``, see platform_spec.py).

Prints a JSON summary; exits 1 with the first difference on failure.
"""
import argparse
import json
import os
import re
import sys
import tempfile

import yaml
from google.protobuf import json_format
from kfp import compiler, components, dsl
from kfp.pipeline_spec import pipeline_spec_pb2
# kfp-kubernetes is imported where it is used: the wiring check (wiring_types) also runs
# with the kfp that TFX's venv has.


def _strict(data, message):
  return json_format.ParseDict(data, message, ignore_unknown_fields=False)


def _kfp_reference(container, k8s_config):
  """(resources, env, executor config) the KFP SDK emits for the same settings."""
  from kfp import kubernetes  # pylint: disable=g-import-not-at-top
  res = container.get("resources", {})
  env = container.get("env", [])
  selector = k8s_config.get("nodeSelector", {}).get("labels", {})
  tolerations = k8s_config.get("tolerations", [])
  pvc_mounts = k8s_config.get("pvcMount", [])

  @dsl.container_component
  def probe():
    return dsl.ContainerSpec(image=container["image"], command=["true"])

  @dsl.pipeline(name="reference")
  def reference():
    task = probe()
    for key, setter in (("resourceCpuLimit", task.set_cpu_limit),
                        ("resourceCpuRequest", task.set_cpu_request),
                        ("resourceMemoryLimit", task.set_memory_limit),
                        ("resourceMemoryRequest", task.set_memory_request)):
      if key in res:
        setter(res[key])
    if "accelerator" in res:
      task.set_accelerator_type(res["accelerator"]["resourceType"])
      task.set_accelerator_limit(res["accelerator"]["resourceCount"])
    for variable in env:
      task.set_env_variable(variable["name"], variable["value"])
    for mount in pvc_mounts:
      kubernetes.mount_pvc(task, pvc_name=mount["constant"], mount_path=mount["mountPath"])
    for key, value in selector.items():
      kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for t in tolerations:
      kubernetes.add_toleration(
          task, key=t.get("key"), operator=t.get("operator", "Equal"), value=t.get("value"),
          effect=t.get("effect"),
          toleration_seconds=int(t["tolerationSeconds"]) if "tolerationSeconds" in t else None)

  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "reference.yaml")
    compiler.Compiler().compile(reference, path)
    with open(path) as f:
      docs = list(yaml.safe_load_all(f))
  ref_container = next(iter(docs[0]["deploymentSpec"]["executors"].values()))["container"]
  ref_k8s = {}
  if len(docs) > 1:
    ref_k8s = next(iter(docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
                        .values()))
  for mount in ref_k8s.get("pvcMount", []):
    # kfp-kubernetes also writes pvcNameParameter, which backends 2.1.0-2.4.0 reject
    # (strict parse, their pinned proto has no such field); ours has only `constant`.
    mount.pop("pvcNameParameter", None)
  return ref_container.get("resources", {}), ref_container.get("env", []), ref_k8s


SCHEMA_VERSION = "2.1.0"  # v2_template.go SCHEMA_VERSION_2_1_0
# v2_template.go's pattern, anchored (the server's regexp.MatchString is not).
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _parses(data, message):
  try:
    _strict(data, message)
    return True
  except json_format.ParseError:
    return False


def upload_rules(docs):
  """The API server's checks of an uploaded v2 package; raises ValueError like it would."""
  pipeline_specs, platform_specs = [], []
  for i, doc in enumerate(docs):
    if doc is None:
      continue
    spec = pipeline_spec_pb2.PipelineSpec()
    if _parses(doc, spec) and spec.pipeline_info.name and spec.HasField("root"):
      pipeline_specs.append(spec)
      if len(pipeline_specs) > 1:
        raise ValueError("multiple pipeline specs provided")
      if spec.schema_version != SCHEMA_VERSION:
        raise ValueError(f"KFP only supports schema version {SCHEMA_VERSION}, but the "
                         f"pipeline spec has version {spec.schema_version}")
      if not _NAME_RE.match(spec.pipeline_info.name):
        raise ValueError("invalid v2 pipeline spec: name should consist of lower case "
                         "alphanumeric characters, '-' or '.', and must start and end with "
                         f"an alphanumeric character. Received: {spec.pipeline_info.name!r}")
      continue
    platform = pipeline_spec_pb2.PlatformSpec()
    if _parses(doc, platform) and "kubernetes" in platform.platforms:
      platform_specs.append(platform)
      if len(platform_specs) > 1:
        raise ValueError("multiple platform specs provided")
      continue
    # Name the reason: parse it again without catching the error.
    if "pipelineInfo" in doc or "root" in doc or "schemaVersion" in doc:
      _strict(doc, pipeline_spec_pb2.PipelineSpec())
      raise ValueError(f"document {i + 1}: invalid v2 pipeline spec: "
                       + ("name is empty" if not spec.pipeline_info.name
                          else "root component is empty"))
    _strict(doc, pipeline_spec_pb2.PlatformSpec())
    raise ValueError(f"document {i + 1} is neither a PipelineSpec nor a PlatformSpec with "
                     "a kubernetes platform")
  if not pipeline_specs:
    raise ValueError("no pipeline spec is provided")
  return pipeline_specs[0]


def type_title(artifact_type):
  """The schema title of an ArtifactTypeSchema (JSON): schemaTitle or instanceSchema's."""
  if artifact_type.get("schemaTitle"):
    return artifact_type["schemaTitle"]
  schema = yaml.safe_load(artifact_type.get("instanceSchema") or "") or {}
  return schema.get("title", "") if isinstance(schema, dict) else ""


_INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"


def wiring_types(spec):
  """Raises ValueError naming the task, input and both types where a task's input artifact
  is declared with another type than the output wired to it, or where an executor's
  inputs spec argument declares other types than its component."""
  components_ = spec["components"]
  for name, task in spec["root"]["dag"]["tasks"].items():
    component = components_[task["componentRef"]["name"]]
    declared = component.get("inputDefinitions", {}).get("artifacts", {})
    for key, source in task.get("inputs", {}).get("artifacts", {}).items():
      upstream = source.get("taskOutputArtifact")
      if upstream is None:
        continue
      producer = spec["root"]["dag"]["tasks"][upstream["producerTask"]]
      output = components_[producer["componentRef"]["name"]]["outputDefinitions"][
          "artifacts"][upstream["outputArtifactKey"]]
      theirs = type_title(output["artifactType"])
      ours = type_title(declared.get(key, {}).get("artifactType", {}))
      if ours != theirs:
        raise ValueError(f"task {name!r} input {key!r} is declared {ours!r} but wired to "
                         f"{upstream['producerTask']}.{upstream['outputArtifactKey']} of "
                         f"type {theirs!r}")
    args = spec["deploymentSpec"]["executors"][component["executorLabel"]].get(
        "container", {}).get("args", [])
    if _INPUTS_SPEC_FLAG in args:
      argued = json.loads(args[args.index(_INPUTS_SPEC_FLAG) + 1]).get("artifacts", {})
      for key, definition in declared.items():
        ours = type_title(definition.get("artifactType", {}))
        theirs = type_title(argued.get(key, {}).get("artifactType", {}))
        if ours != theirs:
          raise ValueError(f"executor {component['executorLabel']!r}: {_INPUTS_SPEC_FLAG} "
                           f"declares input {key!r} as {theirs!r}, its component as "
                           f"{ours!r}")


def validate(path, compare_with_kfp):
  from kfp.kubernetes import kubernetes_executor_config_pb2  # pylint: disable=g-import-not-at-top
  with open(path) as f:
    docs = list(yaml.safe_load_all(f))
  upload_rules(docs)
  docs = [d for d in docs if d is not None]
  if len(docs) not in (1, 2):
    raise ValueError(f"expected 1 or 2 YAML documents, found {len(docs)}")
  spec = _strict(docs[0], pipeline_spec_pb2.PipelineSpec())
  # PipelineSpec.deployment_spec is a Struct: parse it into its real message, strictly.
  _strict(docs[0]["deploymentSpec"], pipeline_spec_pb2.PipelineDeploymentConfig())
  executors = docs[0]["deploymentSpec"]["executors"]
  platform_executors = {}
  if len(docs) == 2:
    _strict(docs[1], pipeline_spec_pb2.PlatformSpec())
    deployment = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]
    for label, config in deployment.get("executors", {}).items():
      if label not in executors:
        raise ValueError(f"platform executor {label!r} is not in the PipelineSpec "
                         f"(executors: {sorted(executors)})")
      _strict(config, kubernetes_executor_config_pb2.KubernetesExecutorConfig())
      platform_executors[label] = config
  wiring_types(docs[0])
  component = components.load_component_from_file(path)
  summary = {"pipeline": spec.pipeline_info.name, "schema_version": spec.schema_version,
             "upload_rules": "passed", "wiring_types": "passed",
             "executors": sorted(executors),
             "platform_executors": sorted(platform_executors),
             "loaded_component": type(component).__name__, "compared_with_kfp": []}
  if compare_with_kfp:
    for label, executor in docs[0]["deploymentSpec"]["executors"].items():
      container = executor["container"]
      k8s = platform_executors.get(label, {})
      ref_resources, ref_env, ref_k8s = _kfp_reference(container, k8s)
      for what, ours, theirs in (("resources", container.get("resources", {}), ref_resources),
                                 ("env", container.get("env", []), ref_env),
                                 ("kubernetes executor config", k8s, ref_k8s)):
        if ours != theirs:
          raise ValueError(f"{label}: {what} differ from what the KFP SDK emits.\n"
                           f"  ours: {json.dumps(ours, sort_keys=True)}\n"
                           f"  kfp:  {json.dumps(theirs, sort_keys=True)}")
      summary["compared_with_kfp"].append(label)
  return summary


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("package")
  parser.add_argument("--compare-with-kfp", action="store_true")
  args = parser.parse_args(argv)
  try:
    summary = validate(args.package, args.compare_with_kfp)
  except Exception as e:  # pylint: disable=broad-except
    print(f"INVALID {args.package}: {type(e).__name__}: {e}", file=sys.stderr)
    return 1
  print(json.dumps(summary, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
