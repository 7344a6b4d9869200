"""End to end: the compiled package, validated by the current KFP SDK in its own venv.

The newer resource fields exist only in kfp-pipeline-spec >= 0.4 (protobuf >= 4.21),
which cannot be installed beside TFX 1.16, so this test creates (once, cached in
.venv-kfp, gitignored) a venv with current `kfp` and `kfp-kubernetes` and runs
kubeflow/validate_package.py there: strict proto parsing of both documents,
`kfp.components.load_component_from_file`, and a comparison with what the KFP SDK
and kfp-kubernetes emit for the same resources, node selector and tolerations.
Delete .venv-kfp to pick up newer KFP releases; set TFX_PARALLEL_KFP_PYTHON to choose
the interpreter.

The backends the docs claim (open-source KFP 2.1.0 and later) are each checked too: the
drivers through 2.4.0 parse the Kubernetes executor config strictly, against the
``kubernetes_executor_config.proto`` their go.mod pins. Those protos are vendored in
tests/kfp_backend_protos/<commit>/ and compiled with protoc in a second cached venv
(.venv-kfp-protoc, ``grpcio-tools``). No kfp-kubernetes release carries 2.1.0's pin
(1.1.0 has no ``tolerations``, 1.2.0 has fields 19a24e3 lacks), hence the pinned files.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from kubeflow_util import FIXTURE_CONFIG, REPO, platform_executors

KFP_VENV = os.path.join(REPO, ".venv-kfp")
KFP_REQUIREMENTS = ("kfp>=2.7", "kfp-kubernetes")
VALIDATOR = os.path.join(REPO, "kubeflow", "validate_package.py")
_PYTHON_VERSIONS = ("3.11", "3.12", "3.10", "3.13")


def _python_version(exe):
  try:
    out = subprocess.run([exe, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired):
    return None
  return out.stdout.strip() if out.returncode == 0 else None


def find_python():
  """An interpreter with venv for current KFP (3.10-3.13), or None."""
  candidates = [os.environ.get("TFX_PARALLEL_KFP_PYTHON")]
  candidates += [shutil.which(f"python{v}") for v in _PYTHON_VERSIONS]
  for v in _PYTHON_VERSIONS:
    candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}*/bin/python{v}")))
  candidates += [shutil.which("python3")]
  for exe in filter(None, candidates):
    if _python_version(exe) in _PYTHON_VERSIONS:
      return exe
  return None


def kfp_python():
  """The cached venv's python, creating the venv on first use (~1 min with PyPI)."""
  return isolated_python(KFP_VENV, KFP_REQUIREMENTS)


def isolated_python(venv_dir, requirements):
  """The python of a cached venv at `venv_dir` with `requirements`, made on first use."""
  python = os.path.join(venv_dir, "bin", "python")
  stamp = os.path.join(venv_dir, ".installed")
  wanted = "\n".join(requirements)
  if os.path.exists(stamp) and open(stamp).read() == wanted:
    return python
  base = find_python()
  if base is None:
    pytest.skip("no python3.10-3.13 with venv found for the KFP validation venv "
                "(set TFX_PARALLEL_KFP_PYTHON)")
  building = f"{venv_dir}.building-{os.getpid()}"
  shutil.rmtree(building, ignore_errors=True)
  subprocess.run([base, "-m", "venv", building], check=True, timeout=300)
  install = subprocess.run(
      [os.path.join(building, "bin", "python"), "-m", "pip", "install", "-q",
       "--disable-pip-version-check", *requirements],
      capture_output=True, text=True, timeout=900)
  if install.returncode != 0:
    shutil.rmtree(building, ignore_errors=True)
    pytest.fail(f"pip install {' '.join(requirements)} failed (PyPI reachable?):\n"
                f"{install.stderr[-3000:]}")
  with open(os.path.join(building, ".installed"), "w") as f:
    f.write(wanted)
  shutil.rmtree(venv_dir, ignore_errors=True)
  os.rename(building, venv_dir)  # A venv's bin/python works after a move.
  return python


@pytest.mark.slow
@pytest.mark.parametrize("config", ["fixture", "default"])
def test_package_passes_strict_kfp_validation(tmp_path, config):
  from tfx_parallel.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  config_path = FIXTURE_CONFIG if config == "fixture" else compiler.DEFAULT_CONFIG
  package = tmp_path / "pipeline.yaml"
  compiler.compile_file(config_path, str(package))
  python = kfp_python()
  result = subprocess.run([python, VALIDATOR, str(package), "--compare-with-kfp"],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr[-4000:]
  assert '"loaded_component": "YamlComponent"' in result.stdout
  assert '"schema_version": "2.1.0"' in result.stdout
  assert '"upload_rules": "passed"' in result.stdout
  assert '"platform_executors": ["DistributedTrainer_executor"]' in result.stdout
  assert result.stdout.count("_executor") >= 6, result.stdout  # 3 executors, 3 compared.


def _documents(text):
  """The package text's YAML documents, without the comment header."""
  return text.split("\n---\n")


@pytest.mark.slow
def test_validator_rejects_unknown_fields_and_what_the_api_server_rejects(tmp_path):
  """The strict parse is real: a misspelt field in either document fails; and so does
  each upload rule of the KFP API server (v2_template.go)."""
  from tfx_parallel.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  package = tmp_path / "pipeline.yaml"
  compiler.compile_file(FIXTURE_CONFIG, str(package))
  text = package.read_text()
  spec, platform = _documents(text)
  python = kfp_python()
  cases = [
      (text.replace("resourceCpuLimit:", "resourceCpuLimits:", 1), "resourceCpuLimits"),
      (text.replace("tolerations:", "toleration:", 1), "toleration"),
      (text.replace("schemaVersion: 2.1.0", "schemaVersion: 2.0.0"),
       "KFP only supports schema version 2.1.0, but the pipeline spec has version 2.0.0"),
      (text.replace("name: tfx-parallel-fixture", "name: Tfx_Parallel"),
       "name should consist of lower case alphanumeric characters"),
      (spec + "\n---\n" + spec, "multiple pipeline specs provided"),
      (text + "\n---\n" + platform, "multiple platform specs provided"),
      (platform, "no pipeline spec is provided"),
      (text.replace("\nroot:\n", "\nnot_root:\n", 1), "not_root"),
  ]
  assert all(case != text for case, _ in cases)
  for i, (bad_text, needle) in enumerate(cases):
    bad = tmp_path / f"bad{i}.yaml"
    bad.write_text(bad_text)
    result = subprocess.run([python, VALIDATOR, str(bad)], capture_output=True, text=True,
                            timeout=300, cwd=str(tmp_path))
    assert result.returncode == 1 and needle in result.stderr, (needle, result.stderr)


PROTOC_VENV = os.path.join(REPO, ".venv-kfp-protoc")
PROTOS = os.path.join(REPO, "tests", "kfp_backend_protos")
# Open-source KFP backend tags -> the kubernetes_platform commit their go.mod pins
# (kubeflow/pipelines go.mod at each tag; from 2.5.0 a `replace` to the tree's own copy).
STRICT_BACKENDS = {"2.1.0": "19a24e3e99db", "2.2.0": "8b2a099e8c9f",
                   "2.3.0 to 2.4.0": "d911c8b73b49"}
UNSUPPORTED_BACKENDS = {"2.0.0 to 2.0.5": "bd9f74e34de6"}  # No `tolerations` field.


@pytest.mark.slow
def test_kubernetes_config_parses_strictly_on_every_claimed_backend(tmp_path):
  """Each claimed backend that parses the config strictly accepts every executor config
  of the fixture and of kubeflow/gpu.yaml (PVC mount, node selector, tolerations); 2.0.x,
  not claimed, rejects `tolerations` (the check is real)."""
  from tfx_parallel.kubeflow import compiler, platform_spec  # pylint: disable=g-import-not-at-top
  from kubeflow_util import compile_mapping  # pylint: disable=g-import-not-at-top
  import yaml  # pylint: disable=g-import-not-at-top
  assert platform_spec.OLDEST_BACKEND == "2.1.0" == min(STRICT_BACKENDS)
  configs = {}
  for name, path in (("fixture", FIXTURE_CONFIG),
                     ("gpu", os.path.join(REPO, "kubeflow", "gpu.yaml")),
                     ("default", compiler.DEFAULT_CONFIG)):
    with open(path) as f:
      documents = compile_mapping(yaml.safe_load(f)).documents()
    for label, config in platform_executors(documents).items():
      configs[f"{name}/{label}"] = config
  assert any("pvcMount" in c and "tolerations" in c for c in configs.values()), configs
  configs_path = tmp_path / "configs.json"
  configs_path.write_text(json.dumps(configs))
  python = isolated_python(PROTOC_VENV, ("grpcio-tools",))

  def parse(commit):
    result = subprocess.run([python, os.path.join(PROTOS, "strict_parse.py"),
                             os.path.join(PROTOS, commit), str(configs_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)

  for backend, commit in STRICT_BACKENDS.items():
    assert parse(commit) == {label: "ok" for label in configs}, backend
  for backend, commit in UNSUPPORTED_BACKENDS.items():
    errors = parse(commit)
    assert all('no field named "tolerations"' in errors[label]
               for label, config in configs.items() if "tolerations" in config), errors


if __name__ == "__main__":
  print(kfp_python(), file=sys.stderr)
