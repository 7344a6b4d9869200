"""Runs the pipeline locally with TFX's LocalDagRunner and a SQLite ML Metadata store."""
import os

from absl import logging
from tfx import v1 as tfx

from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import pipeline as pipeline_lib


def paths(home: str, pipeline_name: str):
  """(pipeline_root, metadata_path) under the home directory."""
  home = os.path.abspath(home)
  return (os.path.join(home, config_lib.PIPELINE_ROOT_DIR, pipeline_name),
          os.path.join(home, config_lib.METADATA_FILE))


def run(config: config_lib.PipelineConfig, home: str = config_lib.DEFAULT_HOME):
  """Validates, builds and runs the pipeline. Returns the MLMD SQLite path."""
  config.validate()  # Before any directory is created or any component runs.
  pipeline_root, metadata_path = paths(home, config.pipeline_name)
  os.makedirs(os.path.dirname(metadata_path), exist_ok=True)
  pipeline = pipeline_lib.create_pipeline(
      config, pipeline_root,
      tfx.orchestration.metadata.sqlite_metadata_connection_config(metadata_path))
  logging.info("Running %s: pipeline root %s, ML Metadata %s",
               config.pipeline_name, pipeline_root, metadata_path)
  tfx.orchestration.LocalDagRunner().run(pipeline)
  return metadata_path
