"""Reading a custom property back as it was set, on every orchestrator.

A later step reads what an earlier one recorded (the Examples' ``label_key``,
``true_bias``, the Model's ``task`` and ``num_classes``). How the value arrives depends on
the orchestrator:

* **Locally** (LocalDagRunner) it is the ML Metadata ``Value`` the producer set:
  ``int_value``, ``double_value`` or ``string_value``.
* **On Kubeflow Pipelines v2** TFX's entry point rebuilds every input artifact from the
  ExecutorInput's ``metadata`` and stores each untyped key as a ``struct_value``
  (tensorflow/tfx v1.16.0 ``tfx/orchestration/kubeflow/v2/container/
  kubeflow_v2_entrypoint_utils.py``:325-332 ``_parse_raw_artifact``); numbers come back
  as floats (ints too: the launcher records every number as a double, kubeflow/pipelines
  ``backend/src/v2/metadata/converter.go``:149-150 ``StructValueToMLMDValue``).

TFX's ``Artifact.get_custom_property`` returns a struct value only when it is truthy
(``tfx/types/artifact.py``:745-766, ``if json_value: return json_value``) and then finds
no int, double or string field, so 0, 0.0 and "" read back as None on Kubeflow.
:func:`value` returns them as set.
"""
from typing import Any


def value(artifact, key: str) -> Any:
  """The custom property ``key`` of a TFX artifact as set (0, 0.0 and "" included);
  None only when the artifact has no such property."""
  if not artifact.has_custom_property(key):
    return None
  mlmd_value = artifact.mlmd_artifact.custom_properties.get(key)
  if mlmd_value is None or mlmd_value.HasField("struct_value"):
    return artifact.get_json_value_custom_property(key)  # Falsy values too.
  kind = mlmd_value.WhichOneof("value")
  return getattr(mlmd_value, kind) if kind else None


def number(artifact, key: str, where: str) -> Any:
  """:func:`value` of a numeric property as a float (None when absent). A string is
  parsed, so that a number recorded as text at full precision (ML Metadata keeps 6
  decimals of a double) reads back exactly. ValueError names ``where`` and ``key``."""
  raw = value(artifact, key)
  if raw is None:
    return None
  try:
    return float(raw)
  except (TypeError, ValueError):
    raise ValueError(f"{where}: custom property {key!r} must be a number. "
                     f"Received: {raw!r}") from None
