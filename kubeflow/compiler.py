"""`tfx-parallel compile`: the TFX pipeline as a KFP v2 package for GPU nodes.

    tfx-parallel compile [--config kubeflow.yaml] [--output pipeline.yaml] [--target vertex]

Builds the same ``create_pipeline(config, pipeline_root)`` the local runner runs,
compiles it with TFX's KubeflowV2DagRunner and writes a KFP v2 package (PipelineSpec
+ Kubernetes PlatformSpec) that open-source Kubeflow Pipelines accepts and runs
(``--target kfp``, the default), or the PipelineSpec alone for Vertex AI Pipelines
(``--target vertex``). See docs/KUBEFLOW.md.
"""
import argparse
import os
import sys

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.kubeflow import config as config_lib

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "default_config.yaml")
DEFAULT_OUTPUT = "pipeline.yaml"
TARGETS = ("kfp", "vertex")


def compile_package(config: config_lib.KubeflowConfig,
                    target: str = "kfp") -> "package.Package":
  """Builds the pipeline from `config` and compiles it; raises ConfigError naming the key.

  target "kfp": PipelineSpec + Kubernetes PlatformSpec for open-source KFP; "vertex":
  the PipelineSpec alone, after checking that the config has nothing Vertex AI cannot
  use (config.check_vertex).
  """
  if target not in TARGETS:
    raise ConfigError("--target", f"must be one of {TARGETS}. Received: {target!r}")
  if target == "vertex":
    config_lib.check_vertex(config)
  from tfx_parallel.pipeline import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  pipeline = pipeline_lib.create_pipeline(config.pipeline, config.pipeline_root)
  from tfx_parallel.kubeflow import package  # pylint: disable=g-import-not-at-top  # TFX: slow
  result = package.build(config, pipeline)
  if target == "vertex":
    result = package.Package(pipeline_spec=result.pipeline_spec, platform_spec={},
                             notes=result.notes)
  return result


def compile_file(config_path: str, output_path: str, target: str = "kfp") -> "package.Package":
  """Reads the YAML config, compiles, writes the package to `output_path`."""
  result = compile_package(config_lib.load(config_path), target)
  directory = os.path.dirname(os.path.abspath(output_path))
  os.makedirs(directory, exist_ok=True)
  with open(output_path, "w") as f:
    f.write(result.to_yaml())
  return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--config", default=DEFAULT_CONFIG,
                      help="Kubeflow config YAML: pipeline_root, pipeline settings and "
                           "per-component image, resources, GPUs, node selector, "
                           "tolerations, Beam args (default: the packaged "
                           "kubeflow/default_config.yaml)")
  parser.add_argument("--output", default=DEFAULT_OUTPUT,
                      help=f"KFP v2 package to write (default {DEFAULT_OUTPUT})")
  parser.add_argument("--target", choices=TARGETS, default="kfp",
                      help="kfp: open-source Kubeflow Pipelines (PipelineSpec + Kubernetes "
                           "PlatformSpec); vertex: Vertex AI Pipelines (PipelineSpec only; "
                           "no node selectors or tolerations, gs:// root, accelerator types "
                           "such as NVIDIA_TESLA_T4). Default kfp")


def run(args: argparse.Namespace) -> int:
  """Compiles; returns 0, or 2 after printing a config error that names the key."""
  try:
    result = compile_file(args.config, args.output, args.target)
  except ConfigError as e:
    print(f"tfx-parallel compile: invalid config: {e}", file=sys.stderr)
    return 2
  for note in result.notes:
    print(f"tfx-parallel compile: note: {note}", file=sys.stderr)
  executors = result.pipeline_spec["deploymentSpec"]["executors"]
  print(f"Wrote Kubeflow pipeline package {args.output} "
        f"({len(executors)} components, pipeline root "
        f"{result.pipeline_spec['defaultPipelineRoot']}). Upload it in the KFP UI or with "
        f"kfp.Client().upload_pipeline({args.output!r}).")
  return 0
