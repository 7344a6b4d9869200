"""The evaluator's results where the KFP UI shows them (KFP only).

The run page's "Visualizations" tab draws only artifacts typed ``system.Metrics``
(a table of the custom properties), ``system.ClassificationMetrics`` (``confusionMatrix``,
``confidenceMetrics``), ``system.HTML`` and ``system.Markdown`` (the file at the artifact
URI), and each only with a ``display_name`` custom property (kubeflow/pipelines
``frontend/src/components/viewers/MetricsVisualizations.tsx``:238-333, identical from
2.4.1 to 2.16.0; HTML read with ``Apis.readFile`` of the URI itself: :872-896). TFX's
ConvergenceMetrics is none of these, so the compiled evaluator gets three more outputs
of those system types (:data:`OUTPUTS`; flag ``--ui_outputs SOURCE`` on its args), which
TFX's executor never sees (kubeflow/entrypoint.py keeps ``system.*`` outputs from it).
Once the executor is done the entry point makes them from the files it wrote beside
``metrics.json`` (components/convergence_evaluator/report.py): the metadata goes into
the executor output, which the launcher merges into the output artifact
(``launcher_v2.go`` ``mergeRuntimeArtifacts``: 2.4.1:439-441, 2.5.0:551-553,
2.15.0:627-629, 2.16.0:695-701) and records as custom properties, with
``display_name`` the output key (``metadata/client.go`` 2.4.1:1031-1033,
2.5.0:1038-1040, 2.15.0:1090-1092, 2.16.0:1117-1119; lists and structs wrapped as
``{"list": ...}`` / ``{"struct": ...}``, ``converter.go`` 2.4.1:133-167,
2.15.0 and 2.16.0:138-172, which is what the UI unwraps); the report file is written at
the HTML output's local path, which the launcher uploads as one object
(``objectstore/object_store.go`` ``UploadBlob`` 2.4.1:89, 2.5.0:88, 2.15.0 and
2.16.0:92-99: a file, not a directory). Kubeflow v1.10.0 ships KFP 2.4.1 and v1.11.0
ships 2.15.0 (kubeflow/manifests ``apps/pipeline/upstream/base/pipeline/
kustomization.yaml``:39-49 at v1.10.0, ``applications/pipeline/upstream/base/pipeline/
kustomization.yaml``:39-49 at v1.11.0).
"""
import json
import os
from typing import Any, Dict, Mapping, Optional

from tfx_parallel.components.convergence_evaluator import report

FLAG = "--ui_outputs"
METRICS = "ui_metrics"
CLASSIFICATION = "ui_classification_metrics"
REPORT = "ui_report"
# The SDK's schema titles and versions (sdk-2.5.0 sdk/python/kfp/dsl/types/
# artifact_types.py:153, 173, 454; schema_version 0.0.1 on every class).
OUTPUTS = {METRICS: "system.Metrics", CLASSIFICATION: "system.ClassificationMetrics",
           REPORT: "system.HTML"}
SCHEMA_VERSION = "0.0.1"
REPORT_FILE_NAME = report.REPORT_FILE_NAME
KFP_METRICS_FILE_NAME = report.KFP_METRICS_FILE_NAME


class UiOutputError(ValueError):
  """The UI outputs cannot be made; the message names the output and the fix."""


def declare(spec: Dict[str, Any], task: str, source: str) -> None:
  """Adds :data:`OUTPUTS` to `task`'s component and ``--ui_outputs source`` to its
  container args (before ``--placement`` and the Beam args), in place."""
  component = spec["components"][spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
  outputs = component.setdefault("outputDefinitions", {}).setdefault("artifacts", {})
  if source not in outputs:
    raise UiOutputError(f"task {task!r} has no output {source!r}: {sorted(outputs)}")
  for key, title in OUTPUTS.items():
    outputs[key] = {"artifactType": {"schemaTitle": title, "schemaVersion": SCHEMA_VERSION}}
  container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
  args = list(container.get("args", []))
  at = args.index("--placement") if "--placement" in args else len(args)
  container["args"] = args[:at] + [FLAG, source] + args[at:]


def make(source_path: str, step_paths: Mapping[str, str], uris: Mapping[str, str],
         fileio=None) -> Dict[str, Any]:
  """{output key: ExecutorOutput entry} of the UI outputs present in `uris`, from the
  files at `source_path` (the ConvergenceMetrics output's step path); writes the
  report at the HTML output's step path (a file) and the metrics JSON at the others'.

  `fileio`: ``tfx.dsl.io.fileio`` (local paths and the remote URIs TFX reads).
  """
  if fileio is None:
    from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top,redefined-outer-name
  metrics_file = os.path.join(source_path, KFP_METRICS_FILE_NAME)
  report_file = os.path.join(source_path, REPORT_FILE_NAME)
  for path in (metrics_file, report_file):
    if not fileio.exists(path):
      raise UiOutputError(f"{FLAG}: the evaluator wrote no {path}; the package was "
                          f"compiled for a newer image: rebuild the image from "
                          f"kubeflow/Dockerfile or recompile with `tfx-parallel compile`")
  with fileio.open(metrics_file, "r") as f:
    forms = json.loads(f.read())
  metadata = {METRICS: forms.get("metrics") or {},
              CLASSIFICATION: forms.get("classification") or {}}
  out = {}
  for key in OUTPUTS:
    if key not in uris:
      continue
    path = step_paths[key]
    parent = os.path.dirname(path)
    if parent and not fileio.exists(parent):
      fileio.makedirs(parent)
    if key == REPORT:
      fileio.copy(report_file, path, overwrite=True)
      entry: Dict[str, Any] = {"uri": uris[key]}
    else:
      with fileio.open(path, "w") as f:
        f.write(json.dumps(metadata[key], sort_keys=True))
      entry = {"uri": uris[key], "metadata": metadata[key]}
    out[key] = {"artifacts": [entry]}
  return out


def source_of(values) -> Optional[str]:
  """The ``--ui_outputs`` value (the last one given), or None."""
  return values[-1] if values else None
