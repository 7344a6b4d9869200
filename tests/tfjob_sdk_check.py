"""Checks TFJob manifests with the operator's own Python SDK (kubeflow-training 1.9.x).

Runs in an isolated venv (tests/test_kubeflow_tfjob.py creates .venv-tfjob): the SDK
needs a newer `kubernetes` client than TFX 1.16's environment pins. Two checks per
manifest:

* strict schema: every field name and type against the SDK's models
  (``openapi_types``/``attribute_map`` of ``KubeflowOrgV1TFJob`` and what it nests,
  ``V1PodTemplateSpec`` and the rest from the Kubernetes OpenAPI). The SDK is generated
  from the operator's OpenAPI spec (hack/python-sdk/swagger.json), which comes from the
  same Go types as the TFJob CRD's openAPIV3Schema; an unknown field is what the API
  server would prune silently, a wrong type what it would reject.
* round trip: ``ApiClient().deserialize`` into ``KubeflowOrgV1TFJob`` and
  ``sanitize_for_serialization`` back must give the manifest unchanged.

Usage: python tfjob_sdk_check.py manifests.json  (a JSON object label -> manifest).
Prints a JSON object label -> list of errors; exits 1 if any.
"""
import json
import re
import sys

_SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object,
            "datetime": str, "date": str}


def strict(value, klass, where, errors):
  from kubeflow.training import models  # pylint: disable=g-import-not-at-top
  if klass.startswith("list["):
    if not isinstance(value, list):
      errors.append(f"{where}: expected a list, got {value!r}")
      return
    for i, item in enumerate(value):
      strict(item, klass[5:-1], f"{where}[{i}]", errors)
  elif klass.startswith("dict("):
    inner = re.match(r"dict\(([^,]*), (.*)\)", klass).group(2)
    if not isinstance(value, dict):
      errors.append(f"{where}: expected an object, got {value!r}")
      return
    for key, item in value.items():
      strict(item, inner, f"{where}.{key}", errors)
  elif klass in _SCALARS:
    ok = isinstance(value, _SCALARS[klass]) and not (klass == "int" and isinstance(value, bool))
    if not ok:
      errors.append(f"{where}: expected {klass}, got {value!r}")
  else:
    cls = getattr(models, klass)
    if not isinstance(value, dict):
      errors.append(f"{where}: expected an object ({klass}), got {value!r}")
      return
    by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    for key, item in value.items():
      if key not in by_json:
        errors.append(f"{where}: unknown field {key!r} in {klass}")
      else:
        strict(item, cls.openapi_types[by_json[key]], f"{where}.{key}", errors)


class _Response:  # What ApiClient.deserialize reads.

  def __init__(self, data):
    self.data = data


def round_trip(manifest, errors):
  from kubeflow.training import ApiClient  # pylint: disable=g-import-not-at-top
  api = ApiClient()
  try:
    obj = api.deserialize(_Response(json.dumps(manifest)), "KubeflowOrgV1TFJob")
  except Exception as e:  # pylint: disable=broad-except
    errors.append(f"deserialize: {type(e).__name__}: {e}")
    return
  back = api.sanitize_for_serialization(obj)
  if back != manifest:
    errors.append("round trip changed the manifest: " + json.dumps(back, sort_keys=True))


def main(path):
  with open(path) as f:
    manifests = json.load(f)
  report = {}
  for label, manifest in manifests.items():
    errors = []
    strict(manifest, "KubeflowOrgV1TFJob", "TFJob", errors)
    round_trip(manifest, errors)
    report[label] = errors
  print(json.dumps(report, indent=1))
  return 1 if any(report.values()) else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1]))
