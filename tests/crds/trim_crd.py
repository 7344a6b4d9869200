"""Trims an upstream CRD to the parts tests/fake_kube.py uses, for a fixture in this folder.

    python tests/crds/trim_crd.py REPO_GIT_DIR TAG PATH OUT ORIGIN

(e.g. /work/.mirror/kubeflow+trainer/repo v2.3.0 manifests/base/crds/
trainer.kubeflow.org_trainjobs.yaml tests/crds/trainjobs-v2.3.0.yaml kubeflow/trainer)

keeps the CRD's served version's ``openAPIV3Schema`` (the structural schema the API server
prunes with: apiextensions-apiserver pkg/apiserver/schema/pruning/algorithm.go) and its
top-level ``x-kubernetes-validations``, without descriptions, and collapses every embedded
core/v1 type (a PodSpec, a Container, an Affinity, ...) into
``{x-kubernetes-preserve-unknown-fields: true, x-fake-model: V1...}``: the fake prunes those
against the `kubernetes` client's model of the same Go type. Nothing else is changed, so a
field a release does not have is absent here as it is upstream.
"""
import subprocess
import sys

import yaml

# An object schema is a core type when it has all of a signature's properties.
_MODELS = (
    ("V1PodSpec", {"containers", "restartPolicy", "volumes"}),
    ("V1Container", {"image", "livenessProbe", "name"}),
    ("V1Volume", {"name", "emptyDir", "persistentVolumeClaim"}),
    ("V1Affinity", {"nodeAffinity", "podAffinity"}),
    ("V1PodSecurityContext", {"fsGroup", "runAsUser"}),
    ("V1SecurityContext", {"privileged", "runAsUser"}),
    ("V1ResourceRequirements", {"limits", "requests"}),
    ("V1EnvVar", {"name", "value", "valueFrom"}),
    ("V1Toleration", {"key", "operator", "tolerationSeconds"}),
    ("V1VolumeMount", {"mountPath", "name"}),
    ("V1PodSchedulingGate", {"name"}),  # Only under schedulingGates (see below).
)


def _collapse(node, key=""):
  if isinstance(node, list):
    return [_collapse(v) for v in node]
  if not isinstance(node, dict):
    return node
  props = set((node.get("properties") or {}))
  for model, signature in _MODELS:
    if model == "V1PodSchedulingGate" and key != "schedulingGates-item":
      continue
    if props and signature <= props:
      return {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
              "x-fake-model": model}
  out = {}
  for k, v in node.items():
    if k == "description":
      continue
    if k == "properties":
      out[k] = {name: _collapse(sub, name) for name, sub in v.items()}
    elif k == "items":
      out[k] = _collapse(v, f"{key}-item")
    else:
      out[k] = _collapse(v, k)
  return out


def trim(text):
  crd = yaml.safe_load(text)
  spec = crd["spec"]
  versions = []
  for version in spec["versions"]:
    schema = version["schema"]["openAPIV3Schema"]
    top = {k: v for k, v in schema.items() if k not in ("properties", "description")}
    top["properties"] = {k: (_collapse(v, k) if k not in ("metadata",) else v)
                         for k, v in schema["properties"].items()}
    versions.append({"name": version["name"], "served": version["served"],
                     "storage": version["storage"],
                     "schema": {"openAPIV3Schema": top}})
  return {"apiVersion": crd["apiVersion"], "kind": crd["kind"],
          "metadata": {"name": crd["metadata"]["name"]},
          "spec": {"group": spec["group"], "names": spec["names"], "scope": spec["scope"],
                   "versions": versions}}


def main(argv):
  repo, tag, path, out, origin = argv[1:6]
  text = subprocess.run(["git", "--git-dir", repo, "show", f"{tag}:{path}"], check=True,
                        capture_output=True, text=True).stdout
  with open(out, "w") as f:
    f.write(f"# Trimmed from {origin} {tag} {path} by tests/crds/trim_crd.py:\n"
            "# descriptions dropped, embedded core/v1 types collapsed to x-fake-model.\n")
    yaml.safe_dump(trim(text), f, sort_keys=False, width=100)


if __name__ == "__main__":
  main(sys.argv)
