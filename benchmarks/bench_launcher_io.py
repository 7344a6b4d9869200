"""Bytes of Examples each KFP step's launcher downloads, before and after split_outputs.

    .venv/bin/python benchmarks/bench_launcher_io.py [--rows 200000] [--features 16]

Runs the compiled package's PartitionedExampleGen step in the launcher stand-in
(tests/kubeflow_launcher.py: its own "pod", its outputs uploaded to the object store),
then downloads, as the launcher's ``downloadArtifacts`` does for each downstream task
(kubeflow/pipelines ``launcher_v2.go`` master:927-1004: every object of every input
artifact), the Examples input of

* the ConvergenceEvaluator: before, ``examples`` (every split); after, ``eval_examples``;
* the DistributedTrainer with ``TFX_PARALLEL_ARTIFACT_PATHS=remote`` (its replicas read
  the Examples at their remote URI): before, ``examples``; after, ``examples_ref``.

The "before" wiring is the same run's ``examples`` output, so both sides are measured on
the same files. Each figure is also given for a 1 GB ``examples`` artifact: a split's
bytes scaled by its share of ``examples`` (which does not depend on size), a reference
as it is (its one file names a URI).
Model and TrainingHistory downloads are not counted (they do not depend on the data).
"""
import argparse
import copy
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

from kubeflow_launcher import Launcher  # noqa: E402  pylint: disable=g-import-not-at-top
from kubeflow_util import compile_mapping, fixture_mapping  # noqa: E402  pylint: disable=g-import-not-at-top

PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"
GB = 1e9


def _config(rows: int, features: int):
  data = copy.deepcopy(fixture_mapping())
  data["pipeline_root"] = PIPELINE_ROOT
  data["pipeline"]["example_gen"] = {"rows": rows, "num_features": features}
  data["pipeline"]["trainer"] = {"layout": "single", "epochs": 1, "batch_size": 64}
  data["components"]["PartitionedExampleGen"]["beam_pipeline_args"] = []
  data["components"]["DistributedTrainer"] = dict(
      data["components"].get("DistributedTrainer") or {},
      env={"TFX_PARALLEL_ARTIFACT_PATHS": "remote"})
  return data


def measure(rows: int, features: int, workdir: str):
  package = compile_mapping(_config(rows, features)).pipeline_spec
  launcher = Launcher(package, workdir, PIPELINE_ROOT)
  print(f"bench_launcher_io: ExampleGen step, {rows} rows x {features} features",
        file=sys.stderr, flush=True)
  launcher.run_task("PartitionedExampleGen")
  outputs = launcher.mlmd["PartitionedExampleGen"]
  tasks = package["root"]["dag"]["tasks"]

  def downloaded(key):
    target = os.path.join(workdir, "download", key)
    size = launcher.download(outputs[key]["uri"], target)
    shutil.rmtree(target)
    return size

  full = downloaded("examples")
  rows_out = []
  for task in ("ConvergenceEvaluator", "DistributedTrainer"):
    key = tasks[task]["inputs"]["artifacts"]["examples"]["taskOutputArtifact"][
        "outputArtifactKey"]
    after = downloaded(key)
    # A reference's size does not grow with the data; a split's share does not change.
    at_1gb = after if key.endswith("_ref") else after / full * GB
    rows_out.append({"task": task, "input": key, "before_bytes": full, "after_bytes": after,
                     "before_bytes_at_1gb": GB, "after_bytes_at_1gb": at_1gb})
  return {"rows": rows, "features": features, "examples_bytes": full, "tasks": rows_out}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--rows", type=int, default=200000)
  parser.add_argument("--features", type=int, default=16)
  args = parser.parse_args()
  workdir = tempfile.mkdtemp(prefix="bench-launcher-io-")
  try:
    result = measure(args.rows, args.features, workdir)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  print(json.dumps(result, indent=2))
  print(f"\n| step | Examples input | before (bytes) | after (bytes) | at 1 GB of Examples: "
        f"before -> after |\n|---|---|---|---|---|")
  for row in result["tasks"]:
    print(f"| {row['task']} | {row['input']} | {row['before_bytes']:,} | "
          f"{row['after_bytes']:,} | 1 GB -> {row['after_bytes_at_1gb'] / GB:.3f} GB "
          f"({row['after_bytes_at_1gb']:,.0f} bytes) |")


if __name__ == "__main__":
  main()
