"""`tfx-parallel compile`: the TFX pipeline as a KFP v2 package for GPU nodes.

    tfx-parallel compile [--config kubeflow.yaml] [--output pipeline.yaml]

Builds the same ``create_pipeline(config, pipeline_root)`` the local runner runs,
compiles it with TFX's KubeflowV2DagRunner and writes a KFP v2 package (PipelineSpec
+ Kubernetes PlatformSpec) that the KFP UI/API upload and
``kfp.components.load_component_from_file`` accept. See docs/KUBEFLOW.md.
"""
import argparse
import os
import sys

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.kubeflow import config as config_lib

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "default_config.yaml")
DEFAULT_OUTPUT = "pipeline.yaml"


def compile_package(config: config_lib.KubeflowConfig) -> "package.Package":
  """Builds the pipeline from `config` and compiles it; raises ConfigError naming the key."""
  from tfx_parallel.pipeline import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  pipeline = pipeline_lib.create_pipeline(config.pipeline, config.pipeline_root)
  from tfx_parallel.kubeflow import package  # pylint: disable=g-import-not-at-top  # TFX: slow
  return package.build(config, pipeline)


def compile_file(config_path: str, output_path: str) -> "package.Package":
  """Reads the YAML config, compiles, writes the package to `output_path`."""
  result = compile_package(config_lib.load(config_path))
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


def run(args: argparse.Namespace) -> int:
  """Compiles; returns 0, or 2 after printing a config error that names the key."""
  try:
    result = compile_file(args.config, args.output)
  except ConfigError as e:
    print(f"tfx-parallel compile: invalid config: {e}", file=sys.stderr)
    return 2
  executors = result.pipeline_spec["deploymentSpec"]["executors"]
  print(f"Wrote Kubeflow pipeline package {args.output} "
        f"({len(executors)} components, pipeline root "
        f"{result.pipeline_spec['defaultPipelineRoot']}). Upload it in the KFP UI or with "
        f"kfp.Client().upload_pipeline({args.output!r}).")
  return 0
