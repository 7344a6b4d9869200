"""`tfx-parallel compile`: the TFX pipeline as a KFP v2 package for GPU nodes.

    tfx-parallel compile [--config kubeflow.yaml] [--output pipeline.yaml] [--target vertex]

Builds the same ``create_pipeline(config, pipeline_root)`` the local runner runs,
compiles it with TFX's KubeflowV2DagRunner and writes a KFP v2 package (PipelineSpec
+ Kubernetes PlatformSpec) that open-source Kubeflow Pipelines accepts and runs
(``--target kfp``, the default), or the PipelineSpec alone for Vertex AI Pipelines
(``--target vertex``). See docs/kubeflow.md.
"""
import argparse
import logging
import os
import sys
from typing import List, Optional

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.partitioned_example_gen.config import SYNTHETIC, TAXI
from tfx_parallel.kubeflow import config as config_lib
from tfx_parallel.pipeline import settings

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
                             uncached=result.uncached, notes=result.notes)
  return result


def compile_file(config_path: str, output_path: str, target: str = "kfp",
                 config: Optional[config_lib.KubeflowConfig] = None) -> "package.Package":
  """Reads the YAML config (unless given, as read from it), compiles, writes the
  package to `output_path`."""
  result = compile_package(config or config_lib.load(config_path), target)
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
  parser.add_argument("--verbose", action="store_true",
                      help="print every log line of TFX and KFP on the console (default: "
                           "only errors and warnings of this project; the rest goes to a "
                           "log file in the temporary directory)")


def warnings_of(config: config_lib.KubeflowConfig) -> List[str]:
  """What compiles but will not run on a cluster as it stands, named by YAML path: the
  placeholder image or bucket of kubeflow/default_config.yaml, and a data source that is
  a path on this machine (the pods read their own file system)."""
  import yaml  # pylint: disable=g-import-not-at-top
  with open(DEFAULT_CONFIG) as f:
    placeholder = yaml.safe_load(f)
  image = placeholder["components"][config_lib.DEFAULT_SECTION]["image"]
  bucket = "/".join(placeholder["pipeline_root"].split("/")[:3])  # gs://your-bucket
  out = []
  if config.pipeline_root == bucket or config.pipeline_root.startswith(bucket + "/"):
    out.append(f"pipeline_root {config.pipeline_root!r} is the placeholder of "
               f"kubeflow/default_config.yaml: set it to a bucket the pods can write "
               f"(gs://, s3://, minio://)")
  names = sorted(n for n, p in config.components.items() if p.image == image)
  if names:
    keys = ", ".join(f"components.{n}.image" for n in names)
    out.append(f"{keys}: {image!r} is the placeholder of kubeflow/default_config.yaml: "
               f"set components.default.image to your image built from kubeflow/Dockerfile")
  source = config.pipeline.example_gen.source
  if source not in (SYNTHETIC, TAXI) and "://" not in source:
    import glob  # pylint: disable=g-import-not-at-top
    local = glob.glob(source)
    if local or not os.path.isabs(source):
      where = (f"matches {len(local)} file(s) on this machine" if local
               else "is relative to this machine's working directory")
      out.append(f"pipeline.example_gen.source {source!r} {where}; the pods read their "
                 f"own file system: use a bucket URI (gs://, s3://) or a path mounted in "
                 f"the pods (components.PartitionedExampleGen.pvc_mounts)")
  return out


def run(args: argparse.Namespace) -> int:
  """Compiles with a quiet console (pipeline/console.py: library noise goes to a log
  file); returns 0, or 2 after printing a config error that names the key. Prints one
  warning line for each of warnings_of."""
  import tempfile  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import console as console_lib  # pylint: disable=g-import-not-at-top
  home = os.path.join(tempfile.gettempdir(), "tfx-parallel")
  with console_lib.Console(home, "compile", verbose=getattr(args, "verbose", False)) as console:
    try:
      config = config_lib.load(args.config)
      for warning in warnings_of(config):
        print(f"tfx-parallel compile: warning: {warning}", file=sys.stderr, flush=True)
      result = compile_file(args.config, args.output, args.target, config)
    except ConfigError as e:
      print(f"tfx-parallel compile: invalid config: {e.key}: "
            f"{settings.COMPILE.message(e.message)}", file=sys.stderr, flush=True)
      return 2
    except Exception as e:  # pylint: disable=broad-except
      logging.getLogger(__name__).error("compile failed", exc_info=True,
                                        extra={"file_only": True})
      print(f"tfx-parallel compile: failed: {type(e).__name__}: {e}\n"
            f"tfx-parallel compile: the traceback and every log line are in "
            f"{console.log_path}", file=sys.stderr, flush=True)
      return 1
  for note in result.notes:
    print(f"tfx-parallel compile: note: {note}", file=sys.stderr, flush=True)
  executors = result.pipeline_spec["deploymentSpec"]["executors"]
  print(f"Wrote Kubeflow pipeline package {args.output} "
        f"({len(executors)} components, pipeline root "
        f"{result.pipeline_spec['defaultPipelineRoot']}). Upload it in the KFP UI or with "
        f"kfp.Client().upload_pipeline({args.output!r}).")
  for task, reason in sorted(result.uncached.items()):
    print(f"tfx-parallel compile: note: {task}: {reason} (docs/kubeflow.md, \"Caching\").")
  return 0
