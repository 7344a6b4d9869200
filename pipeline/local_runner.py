"""Runs the pipeline locally with TFX's LocalDagRunner and a SQLite ML Metadata store."""
import logging as std_logging
import os
from typing import Optional

from absl import logging

from tfx_parallel.components.common.config_util import require
from tfx_parallel.components.distributed_trainer.run import prestart
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import deferred_imports


def paths(home: str, pipeline_name: str):
  """(pipeline_root, metadata_path) under the home directory."""
  home = os.path.abspath(home)
  return (os.path.join(home, config_lib.PIPELINE_ROOT_DIR, pipeline_name),
          os.path.join(home, config_lib.METADATA_FILE))


def check_home(home: str):
  """Raises ConfigError("home") unless home is a writable directory or can be created."""
  home = os.path.abspath(home)
  existing = home
  while not os.path.exists(existing):
    existing = os.path.dirname(existing)
  require(os.path.isdir(existing), "home",
          f"{existing} is not a directory. Received: home={home!r}")
  require(os.access(existing, os.W_OK | os.X_OK), "home",
          f"{existing} is not writable. Received: home={home!r}")


def run(config: config_lib.PipelineConfig, home: str = config_lib.DEFAULT_HOME):
  """Validates the config and inputs, builds and runs the pipeline. Returns the MLMD
  SQLite path. Raises ConfigError (naming the key) before anything is written."""
  config.validate()
  # Before TFX is imported: only the parts of tfx.components / TFMA that the run uses.
  deferred_imports.defer_all()
  # The training process starts now and imports TensorFlow while this process checks
  # the inputs, imports TFX and runs the ExampleGen (prestart.py); stopped if unused.
  with trainer_started_early(config):
    # Before any directory is created or any component runs.
    config.check_inputs()
    check_home(home)
    return _run(config, home)


def trainer_started_early(config: config_lib.PipelineConfig):
  """Context: the training process started now if the trainer will run one here (see
  trains_here), stopped on exit unless the launcher took it (prestart.held)."""
  return prestart.held(trains_here(config))


def trains_here(config: config_lib.PipelineConfig) -> bool:
  """Whether the trainer will run one training process on this machine (the layouts
  other than multi_worker, no TF_CONFIG, no TFJob): the one the local runner starts early."""
  from tfx_parallel.components.distributed_trainer.run import tfjob  # pylint: disable=g-import-not-at-top
  return (config.trainer.layout != "multi_worker" and not os.environ.get("TF_CONFIG")
          and not os.environ.get(tfjob.ENV_IMAGE))


def _run(config: config_lib.PipelineConfig, home: str) -> str:
  # TFX is imported here, not at module import: the CLI checks the config and the
  # home directory first, and sets up its console before TFX's imports log anything.
  # The narrow modules, not `tfx.v1`: see pipeline.py.
  from tfx.orchestration import metadata  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.local.local_dag_runner import LocalDagRunner  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  pipeline_root, metadata_path = paths(home, config.pipeline_name)
  os.makedirs(os.path.dirname(metadata_path), exist_ok=True)
  pipeline = pipeline_lib.create_pipeline(
      config, pipeline_root,
      metadata.sqlite_metadata_connection_config(metadata_path))
  logging.info("Running %s: pipeline root %s, ML Metadata %s",
               config.pipeline_name, pipeline_root, metadata_path)
  clock = StartupClock()
  root = std_logging.getLogger()
  root.addHandler(clock)
  try:
    LocalDagRunner().run(pipeline)
  finally:
    root.removeHandler(clock)
  return metadata_path


def process_seconds() -> Optional[float]:
  """Seconds since this process started (from /proc: Linux), or None where unknown."""
  try:
    with open("/proc/self/stat") as f:
      start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # Field 22, starttime.
    with open("/proc/uptime") as f:
      uptime = float(f.read().split()[0])
  except (OSError, ValueError, IndexError):
    return None
  return uptime - start_ticks / os.sysconf("SC_CLK_TCK")


class StartupClock(std_logging.Handler):
  """Logs the start-up, from process start to the first component LocalDagRunner runs
  (its "Component %s is running." record): interpreter, imports, input checks, pipeline
  compilation and ML Metadata set-up (benchmarks/RESULTS.md, "where the time goes")."""

  def __init__(self):
    super().__init__()
    self.seconds: Optional[float] = None
    self.seen = False

  def emit(self, record: std_logging.LogRecord):
    if self.seen or record.msg != "Component %s is running.":
      return
    self.seen = True
    self.seconds = process_seconds()
    if self.seconds is not None:
      logging.info("Start-up: %.1f s from process start to the first component (%s)",
                   self.seconds, record.args[0] if record.args else "?")
