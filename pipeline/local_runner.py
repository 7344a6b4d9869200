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
  from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings  # pylint: disable=g-import-not-at-top
  return (config.trainer.layout != "multi_worker" and not os.environ.get("TF_CONFIG")
          and not os.environ.get(kube_settings.ENV_IMAGE))


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


def run_pipeline(pipeline, verbose: bool = False) -> str:
  """Runs a TFX pipeline of the user's own (any components, a SQLite ML Metadata
  connection) with LocalDagRunner and ``tfx-parallel run``'s console: the project's
  lines and real warnings (the rest goes to ``<metadata dir>/logs/``), one line per
  component as it starts and ends, and the run's summary read back from ML Metadata
  when it has a ConvergenceEvaluator. Returns the ML Metadata path; a component's error
  is printed in one line (the settings it suggests as the config to pass them to, e.g.
  ``TrainerConfig(skip_missing_labels=True)``; the traceback in the log file) and
  raised."""
  import sys  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.local.local_dag_runner import LocalDagRunner  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import console as console_lib, run_progress, settings, summary  # pylint: disable=g-import-not-at-top
  connection = pipeline.metadata_connection_config
  require(connection is not None and connection.HasField("sqlite"),
          "metadata_connection_config", "run_pipeline reads the run back from a SQLite "
          "store: pass sqlite_metadata_connection_config(path). Received: "
          f"{type(connection).__name__ if connection is not None else None}")
  metadata_path = os.path.abspath(connection.sqlite.filename_uri)
  name = pipeline.pipeline_info.pipeline_name
  with console_lib.Console(os.path.dirname(metadata_path), name, verbose=verbose) as console:
    node_ids = [c.id for c in pipeline.components]
    print(f"tfx-parallel: pipeline {name}, {len(node_ids)} components; log: "
          f"{_relative(console.log_path)}", flush=True)
    progress = run_progress.ComponentProgress(node_ids,
                                              lambda: summary.open_store(metadata_path))
    root = std_logging.getLogger()
    root.addHandler(progress)
    try:
      LocalDagRunner().run(pipeline)
    except Exception as e:
      where = progress.current or "the pipeline"
      std_logging.getLogger(__name__).error("%s failed", where, exc_info=True,
                                            extra={"file_only": True})
      sys.stdout.flush()
      # The settings it suggests, as the config dataclass to pass them to.
      message = settings.PYTHON.message(str(e), settings.SECTION_OF_COMPONENT.get(where))
      print(f"tfx-parallel: {where} failed: {type(e).__name__}: {message}\n"
            f"tfx-parallel: the traceback and every log line are in "
            f"{_relative(console.log_path)}", file=sys.stderr, flush=True)
      raise
    finally:
      root.removeHandler(progress)
    summary.print_summary(metadata_path, name, console.log_path, _relative,
                          only_with_metrics=True, suggest=settings.PYTHON.message)
  return metadata_path


def _relative(path: str) -> str:
  """``path`` relative to the working directory when it is under it (shorter lines)."""
  relative = os.path.relpath(path)
  return path if relative.startswith("..") else relative


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
