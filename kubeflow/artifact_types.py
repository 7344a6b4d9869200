"""Our custom artifact types (TrainingHistory, ConvergenceMetrics) in a KFP v2 spec.

TFX's v2 compiler accepts a custom type only if its TYPE_NAME looks like a KFP
schema title, ``module.Class`` (``compiler_utils._SCHEMA_TITLE_RE``), and its container
entrypoint later imports the class *by that title*
(``kubeflow_v2_entrypoint_utils._retrieve_class_path``). Our TYPE_NAMEs are plain
("TrainingHistory": the name users query in ML Metadata), so:

* :func:`kfp_type_names` gives such types a valid TYPE_NAME only while the TFX
  compiler runs, and restores it afterwards (single-threaded compile; nothing else
  reads it meanwhile);
* :func:`retitle` then writes each type's import path
  (``tfx_parallel.components.common.artifacts.TrainingHistory``) as the schema title,
  which is what the entrypoint in the pod needs to import the class.
"""
import contextlib
import re
from typing import Dict, Iterable, Iterator, List, Type

import yaml
from tfx import types
from tfx.orchestration.kubeflow.v2 import compiler_utils

# Copied from tfx/orchestration/kubeflow/v2/compiler_utils._SCHEMA_TITLE_RE (private).
_SCHEMA_TITLE_RE = re.compile(r"^[a-z][a-z0-9-_]{2,20}[.][A-Z][a-zA-Z0-9-_]{2,49}$")
_COMPILE_MODULE = "tfx_parallel"
_GENERIC_TITLE = "tfx.Artifact"  # compiler_utils.get_artifact_title of non-standard types.


def custom_types(nodes: Iterable) -> List[Type[types.Artifact]]:
  """Artifact types of the nodes' channels that TFX has no built-in schema for."""
  found = {}
  for node in nodes:
    for channel in list(node.inputs.values()) + list(node.outputs.values()):
      if compiler_utils.get_artifact_title(channel.type) == _GENERIC_TITLE:
        found[f"{channel.type.__module__}.{channel.type.__qualname__}"] = channel.type
  return [found[path] for path in sorted(found)]


@contextlib.contextmanager
def kfp_type_names(artifact_types: Iterable[Type[types.Artifact]]) -> Iterator[Dict[str, str]]:
  """While open, custom types have TYPE_NAMEs TFX's v2 compiler accepts.

  Yields {TYPE_NAME during compilation: import path of the class}.
  """
  titles, restore = {}, []
  try:
    for cls in artifact_types:
      name = cls.TYPE_NAME
      if not _SCHEMA_TITLE_RE.fullmatch(name):
        name = f"{_COMPILE_MODULE}.{cls.__name__}"
        if name in titles or not _SCHEMA_TITLE_RE.fullmatch(name):
          raise ValueError(f"Cannot give artifact type {cls.__module__}.{cls.__qualname__} "
                           f"a KFP schema title; rename the class. Tried: {name!r}")
        restore.append((cls, "TYPE_NAME" in vars(cls), cls.TYPE_NAME))
        cls.TYPE_NAME = name
      titles[name] = f"{cls.__module__}.{cls.__qualname__}"
    yield titles
  finally:
    for cls, own, original in reversed(restore):
      if own:
        cls.TYPE_NAME = original
      else:
        del cls.TYPE_NAME


def _retitle_schema(artifact_type: Dict[str, str], titles: Dict[str, str]):
  schema = artifact_type.get("instanceSchema")
  if not schema:
    return
  data = yaml.safe_load(schema)
  if data.get("title") in titles:
    data["title"] = titles[data["title"]]
    artifact_type["instanceSchema"] = yaml.dump(data, sort_keys=False)


def retitle(spec: Dict, titles: Dict[str, str]) -> None:
  """Rewrites, in place, the schema titles in `spec` from compile names to import paths."""
  definitions = [spec.get("root", {})] + list(spec.get("components", {}).values())
  for definition in definitions:
    for side in ("inputDefinitions", "outputDefinitions"):
      for artifact in definition.get(side, {}).get("artifacts", {}).values():
        _retitle_schema(artifact.get("artifactType", {}), titles)
