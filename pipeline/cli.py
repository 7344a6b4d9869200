"""`tfx-parallel`: run the pipeline locally, compile it for Kubeflow, read metrics.

    tfx-parallel run [--data synthetic|taxi|CSV] [--layout single|mirrored|mesh] ...
    tfx-parallel compile --config kubeflow.yaml --output pipeline.yaml
    tfx-parallel metrics [--pipeline-name NAME] [--last N] [--json] [--plot out.png]
"""
import argparse
import contextlib
import logging
import os
import sys
from typing import List, Optional

from tfx_parallel.components.common import tfenv

tfenv.prepare()  # The CLI is an entry point: before TFX / TensorFlow are imported.

from tfx_parallel.components.common.config_util import ConfigError  # pylint: disable=g-import-not-at-top
from tfx_parallel.pipeline import config as config_lib  # pylint: disable=g-import-not-at-top
from tfx_parallel.pipeline import settings as settings_lib  # pylint: disable=g-import-not-at-top


def _mesh(text: str):
  try:
    b, m = (int(v) for v in text.lower().split("x"))
    return (b, m)
  except ValueError:
    raise argparse.ArgumentTypeError(f"--mesh must look like BxM (e.g. 2x2). Received: {text!r}")


def _json_object(text: str):
  import json  # pylint: disable=g-import-not-at-top
  try:
    value = json.loads(text)
  except ValueError as e:
    raise argparse.ArgumentTypeError(f"--hparams must be a JSON object ({e}). "
                                     f"Received: {text!r}")
  if not isinstance(value, dict):
    raise argparse.ArgumentTypeError(f"--hparams must be a JSON object. Received: {text!r}")
  return value


# Each run flag that sets a config key: flag dest -> the setting (pipeline/settings.py).
# A flag is a shorthand for ``--set KEY=VALUE``: its default is None (not given), and the
# defaults are the config's, for the data source (config.default_config).
FLAG_SETTINGS = {
    "pipeline_name": "pipeline_name", "with_tfma": "with_tfma", "enable_cache": "enable_cache",
    "data": "example_gen.source", "label": "example_gen.label", "rows": "example_gen.rows",
    "features": "example_gen.num_features",
    "layout": "trainer.layout", "mesh": "trainer.mesh", "devices": "trainer.devices",
    "device": "trainer.device", "require_gpu": "trainer.require_gpu",
    "gpu_memory": "trainer.gpu_memory", "device_memory": "trainer.device_memory",
    "workers": "trainer.workers", "model": "trainer.model", "module_file": "trainer.module_file",
    "module_path": "trainer.module_path", "hparams": "trainer.hparams", "task": "trainer.task",
    "steps": "trainer.steps", "epochs": "trainer.epochs", "batch_size": "trainer.batch_size",
    "learning_rate": "trainer.learning_rate", "optimizer": "trainer.optimizer",
    "input_cache": "trainer.cache"}


def add_run_arguments(p: argparse.ArgumentParser):
  """The run flags. Each flag of FLAG_SETTINGS sets one config key and defaults to None
  (not given); the help text prints the config's default (config.default_config), and
  every choice list is the config's enum."""
  from tfx_parallel.components.common import keys  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import config as trainer_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.plan import devices  # pylint: disable=g-import-not-at-top
  base = config_lib.default_config()  # Source-dependent keys are told per source.
  eg, tr, csv = base.example_gen, base.trainer, config_lib.default_trainer("csv")
  p.add_argument("--config", default=None, metavar="FILE",
                 help="YAML config file, the schema of `tfx-parallel compile --config` "
                      "(kubeflow/default_config.yaml): its `pipeline:` section sets any "
                      "setting (`pipeline_root` and `components` are for Kubeflow only). "
                      "Flags and --set override it")
  p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="set",
                 help="set any config key by its dotted name, e.g. --set "
                      "trainer.skip_missing_labels=true, --set "
                      "example_gen.column_types.species=string, --set "
                      "example_gen.bad_row_policy=skip, --set example_gen.columns=a,b "
                      "(repeatable; values in YAML: true, 5, 0.1, null, [a, b]; applied "
                      "after --config and the flags). The keys are the fields of "
                      "PipelineConfig's dataclasses (docs/reference/settings.md)")
  p.add_argument("--home", default=config_lib.DEFAULT_HOME,
                 help="directory for ML Metadata (metadata.sqlite) and artifacts "
                      "(default: %(default)s)")
  p.add_argument("--pipeline-name", default=None,
                 help="the pipeline's name: its runs in ML Metadata, its artifacts under "
                      f"<home>/pipelines/<name>/ (default: for a CSV, its file name and "
                      f"the label, e.g. diamonds-price; else {base.pipeline_name})")
  p.add_argument("--data", default=None,
                 help="'synthetic' (y = x·[1,2] + 3, generated by Beam), 'taxi' (Chicago taxi "
                      "CSV in the tfx wheel, label fare) or a CSV path/glob "
                      f"(default: {eg.source})")
  p.add_argument("--label", default=None, help="label column for CSV data")
  p.add_argument("--rows", type=int, default=None,
                 help=f"synthetic rows (default: {eg.rows})")
  p.add_argument("--features", type=int, default=None,
                 help=f"synthetic feature count (default: {eg.num_features})")
  p.add_argument("--layout", default=None, choices=list(trainer_lib.LAYOUTS),
                 help=f"parallel layout (default: {tr.layout}, a batch x model DTensor mesh); "
                      "auto: the planner picks single, mirrored or a mesh that fits the "
                      "memory per device")
  p.add_argument("--mesh", type=_mesh, default=None,
                 help="mesh shape BxM (default: 2x2 on logical CPU devices; on G GPUs (as "
                      "nvidia-smi lists them) a model axis of 2 and a batch axis of G/2)")
  p.add_argument("--devices", type=int, default=None,
                 help=f"replicas for mirrored: 0 (the default) = every GPU, or "
                      f"{devices.CPU_DEVICES} logical CPU devices without a GPU; more than the "
                      f"GPUs present shrinks to fit. With --layout auto: the logical CPU "
                      f"devices to plan for (default {devices.CPU_DEVICES})")
  p.add_argument("--device", default=None, choices=list(devices.DEVICE_KINDS),
                 help="auto: the GPUs when TensorFlow sees any, else logical CPU devices; "
                      "cpu: force the CPU (split into logical devices) even on a GPU machine; "
                      f"gpu: fail without a GPU (default: {tr.device})")
  p.add_argument("--require-gpu", action="store_true", default=None,
                 help="fail at once, printing CUDA's own load error, when no GPU is visible "
                      "(instead of training on the CPU)")
  p.add_argument("--gpu-memory", default=None,
                 help="GPU memory policy: growth (take memory as needed), all (reserve "
                      "nearly all of every GPU at start) or a size per GPU, e.g. 4GiB "
                      f"(default: {tr.gpu_memory})")
  p.add_argument("--device-memory", default=None,
                 help="memory per device for the layout planner, e.g. 512MiB (default on CPU: "
                      "the available host memory shared by the --devices logical CPU "
                      "devices; on GPUs: their free memory)")
  p.add_argument("--workers", type=int, default=None,
                 help=f"local processes for multi_worker (default: {tr.workers})")
  p.add_argument("--model", default=None, choices=list(trainer_lib.MODELS),
                 help=f"default: {tr.model} for synthetic data, {csv.model} for CSV/taxi")
  p.add_argument("--module-file", default=None,
                 help="user model module defining build_model(spec) (docs/model.md); "
                      "default: the built-in --model")
  p.add_argument("--module-path", default=None,
                 help="importable user model module (instead of --module-file)")
  p.add_argument("--hparams", type=_json_object, default=None,
                 help="JSON object passed to the module as spec.hparams")
  p.add_argument("--task", default=None, choices=list(keys.TASKS),
                 help="default: inferred from the label (and printed)")
  p.add_argument("--steps", type=int, default=None,
                 help=f"training steps (default {tr.steps}: use --epochs)")
  p.add_argument("--epochs", type=int, default=None,
                 help=f"passes over the train split (default: {tr.epochs}); 0 chooses the "
                      f"length from the data and prints why (docs/model.md, 'Training length')")
  p.add_argument("--batch-size", type=int, default=None,
                 help=f"global batch size (default: {tr.batch_size})")
  p.add_argument("--learning-rate", type=float, default=None,
                 help=f"default: {tr.learning_rate:g} for synthetic data, "
                      f"{csv.learning_rate:g} for CSV/taxi")
  p.add_argument("--optimizer", default=None, choices=list(trainer_lib.OPTIMIZERS),
                 help="the update rule; a module's optimizer hook replaces it "
                      f"(default: {tr.optimizer})")
  p.add_argument("--with-tfma", action="store_true", default=None,
                 help="also run the stock TFX Evaluator (TFMA) on the model")
  p.add_argument("--input-cache", default=None, choices=list(trainer_lib.CACHE_MODES),
                 help="the trainer's training split: parsed once into memory, or streamed "
                      "from the files every epoch; auto: memory when it fits a quarter of "
                      f"the available memory (trainer config `cache`; default: {tr.cache})")
  p.add_argument("--no-cache", action="store_false", dest="enable_cache", default=None,
                 help="disable TFX caching of component runs (not --input-cache)")
  p.add_argument("--verbose", action="store_true",
                 help="print every log line (TFX / absl INFO, TensorFlow C++ logs, library "
                      "warnings) on the console; by default they go only to the run's "
                      "log file under <home>/logs/")
  p.add_argument("--beam-arg", action="append", default=[],
                 help="Beam pipeline arg for ExampleGen (repeatable, added to the config's "
                      "beam_pipeline_args), e.g. --beam-arg=--direct_num_workers=2")
  p.add_argument("--runner", default="direct", choices=["direct", "dask"],
                 help="Beam runner of the ingest: 'dask' is Beam's DaskRunner (same as "
                      "--beam-arg=--runner=apache_beam.runners.dask.dask_runner.DaskRunner)")
  p.add_argument("--dask-address", default=None, metavar="HOST:PORT",
                 help="with --runner dask: the `dask scheduler` to use (default: a local "
                      "cluster inside the run)")


def flag_of(dest: str) -> str:
  """The flag that sets FLAG_SETTINGS[dest] (its dest spelled as typed)."""
  return "--no-cache" if dest == "enable_cache" else "--" + dest.replace("_", "-")


# How `run` names a setting in its errors: --set KEY=VALUE, and the flag when there is one.
RUN_FORM = settings_lib.Form("run", dict(
    {key: flag_of(dest) for dest, key in FLAG_SETTINGS.items()},
    home="--home", dask_address="--dask-address"))  # The keys of run's own flags.


def assignments_from_args(args) -> List[settings_lib.Assignment]:
  """The settings the user gave, in the order they apply: --config's file, the flags,
  then every --set."""
  given = settings_lib.from_file(args.config) if getattr(args, "config", None) else []
  for dest, key in FLAG_SETTINGS.items():
    value = getattr(args, dest, None)
    if value is not None:
      shown = "x".join(str(v) for v in value) if dest == "mesh" else value
      origin = flag_of(dest) if isinstance(value, bool) else f"{flag_of(dest)} {shown}"
      given.append(settings_lib.assign(key, tuple(value) if dest == "mesh" else value,
                                       origin))
  given.extend(settings_lib.parse_set(text) for text in getattr(args, "set", None) or [])
  return given


def config_from_args(args) -> config_lib.PipelineConfig:
  """The config of --config, the flags and --set over config.default_config(source),
  with what `run` fits to this machine: the mesh of a mesh layout without one given
  (the GPUs nvidia-smi lists, else 2x2) and, for multi_worker, the shards per worker.
  Raises ConfigError naming the setting (not yet validated)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  given = assignments_from_args(args)
  config = settings_lib.build(given)
  trainer, eg = config.trainer, config.example_gen
  if trainer.layout == "mesh" and settings_lib.last(given, "trainer.mesh") is None:
    trainer = dataclasses.replace(trainer, mesh=_mesh_of(args, trainer))
  if settings_lib.last(given, "example_gen.num_workers") is None:
    eg = dataclasses.replace(
        eg, num_workers=trainer.workers if trainer.layout == "multi_worker" else 1)
  name = config.pipeline_name
  if settings_lib.last(given, "pipeline_name") is None:
    name = config_lib.pipeline_name_for(eg.source, eg.label)
  return dataclasses.replace(
      config, pipeline_name=name, trainer=trainer, example_gen=eg,
      beam_pipeline_args=list(config.beam_pipeline_args) + list(args.beam_arg)
      + runner_args(args))


def _mesh_of(args, trainer):
  """The default mesh (no --mesh / trainer.mesh given) for the GPUs ``nvidia-smi -L`` lists (fast: no
  TensorFlow import before the config is validated); 2x2 with --device cpu or no GPU.
  The trainer fits the mesh again to the GPUs TensorFlow sees (devices.py)."""
  from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env  # pylint: disable=g-import-not-at-top
  if trainer.device == "cpu":
    return devices.default_mesh(0, trainer.batch_size)
  listed = gpu_env.nvidia_smi_gpus() or []
  visible = devices.parse_visible(os.environ.get(devices.WORKER_GPUS_ENV), len(listed))
  return devices.default_mesh(min(len(listed), len(visible)), trainer.batch_size)


def runner_args(args) -> List[str]:
  """Beam args of --runner / --dask-address (none for the default DirectRunner)."""
  if args.runner != "dask":
    if args.dask_address:
      raise ConfigError("dask_address", f"needs --runner dask. Received: "
                        f"--runner {args.runner} --dask-address {args.dask_address}")
    return []
  from tfx_parallel.components.partitioned_example_gen import runners  # pylint: disable=g-import-not-at-top
  return runners.dask_args(args.dask_address)


def cmd_run(args) -> int:
  """Validates, then runs the pipeline with a quiet console (pipeline/console.py).

  Exit codes: 0 done, 1 a component failed (its error is printed), 2 invalid config.
  """
  try:
    config = config_from_args(args)
    config.validate()  # Before TFX is imported: a bad flag fails in about a second.
    from tfx_parallel.pipeline import deferred_imports, local_runner  # pylint: disable=g-import-not-at-top
    deferred_imports.defer_all()  # Before TFX is imported (the input checks import it).
    local_runner.check_home(args.home)
  except ConfigError as e:
    print(f"tfx-parallel: invalid config: {_error_text(e)}", file=sys.stderr)
    return 2
  from tfx_parallel.pipeline import console as console_lib  # pylint: disable=g-import-not-at-top
  with console_lib.Console(args.home, config.pipeline_name, verbose=args.verbose) as console, \
      contextlib.ExitStack() as early:
    from tfx_parallel.components.distributed_trainer.plan import gpu_env  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings  # pylint: disable=g-import-not-at-top
    if not gpu_env.preflight(config.trainer, remote=kube_settings.opted_in(  # nvidia-smi's GPUs unseen by TensorFlow.
        os.environ, config.trainer.layout)):
      return 2
    # The training process imports TensorFlow while the inputs are checked and TFX loads.
    early.enter_context(local_runner.trainer_started_early(config))
    # Checking the inputs reads the data with Beam and TensorFlow, whose imports print
    # C++ registration notes and deprecation warnings: they go to the log file.
    try:
      config.check_inputs()
    except ConfigError as e:
      print(f"tfx-parallel: invalid config: {_error_text(e)}", file=sys.stderr, flush=True)
      return 2
    return _run_and_summarize(config, args.home, console)


def _run_and_summarize(config: config_lib.PipelineConfig, home: str, console) -> int:
  """Runs the pipeline with start / end lines per component, then prints the summary."""
  log_path = console.log_path
  from tfx_parallel.pipeline import local_runner, pipeline as pipeline_lib, run_progress, summary  # pylint: disable=g-import-not-at-top
  print(f"tfx-parallel run: pipeline {config.pipeline_name}, data {config.example_gen.source}, "
        f"layout {_layout_flag_text(config)}; log: {_relative(log_path)}", flush=True)
  _, metadata_path = local_runner.paths(home, config.pipeline_name)
  progress = run_progress.ComponentProgress(
      [c.id for c in pipeline_lib.create_components(config)],
      lambda: summary.open_store(metadata_path))
  root = logging.getLogger()
  root.addHandler(progress)
  # A component's warnings name its settings as --set SECTION.KEY=VALUE on the console.
  console.rewrite = lambda text: RUN_FORM.message(
      text, settings_lib.SECTION_OF_COMPONENT.get(progress.current or ""))
  try:
    local_runner.run(config, home)
  except ConfigError as e:  # Found only at run time (e.g. by an executor).
    section = settings_lib.SECTION_OF_COMPONENT.get(progress.current or "")
    print(f"tfx-parallel: invalid config: {_error_text(e, section)}", file=sys.stderr)
    return 2
  except Exception as e:  # pylint: disable=broad-except
    where = progress.current or "the pipeline"
    logging.getLogger(__name__).error("%s failed", where, exc_info=True,
                                      extra={"file_only": True})
    sys.stdout.flush()
    message = RUN_FORM.message(str(e), settings_lib.SECTION_OF_COMPONENT.get(where))
    print(f"tfx-parallel: {where} failed: {type(e).__name__}: {message}\n"
          f"tfx-parallel: the traceback and every log line are in {_relative(log_path)}",
          file=sys.stderr, flush=True)
    return 1
  finally:
    root.removeHandler(progress)
  summary.print_summary(metadata_path, config.pipeline_name, log_path, _relative,
                        suggest=RUN_FORM.message)
  return 0


def _error_text(error: ConfigError, section: Optional[str] = None) -> str:
  """A ConfigError as `run` prints it: the settings it names as --set KEY=VALUE
  (settings.Form), with the flag or --set that changes its key."""
  key = error.key
  if section and "." not in key:
    try:  # A component's own key, found at run time: name it from the pipeline.
      settings_lib.resolve(f"{section}.{key}", "")
      error = ConfigError(f"{section}.{key}", error.message)
    except ConfigError:
      pass
  return settings_lib.error_text(error, RUN_FORM, section)


def _relative(path: str) -> str:
  """``path`` relative to the working directory when it is under it (shorter lines)."""
  relative = os.path.relpath(path)
  return path if relative.startswith("..") else relative


def _layout_flag_text(config: config_lib.PipelineConfig) -> str:
  t = config.trainer
  if t.layout == "mesh":
    return f"mesh {t.mesh[0]}x{t.mesh[1]}"
  if t.layout == "mirrored":
    return f"mirrored x{t.devices}" if t.devices else "mirrored (every GPU, else 2 CPU devices)"
  if t.layout == "multi_worker":
    return f"multi_worker x{t.workers}"
  return t.layout


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="tfx-parallel", description=__doc__,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = parser.add_subparsers(dest="command", required=True)
  p = sub.add_parser("run", help="build the pipeline and run it with LocalDagRunner",
                     description="Builds the pipeline and runs it with TFX's LocalDagRunner; "
                                 "ML Metadata is kept in SQLite under --home. Prints a summary "
                                 "read back from ML Metadata.")
  add_run_arguments(p)
  p.set_defaults(func=cmd_run)

  p = sub.add_parser("compile", help="compile to a Kubeflow Pipelines v2 package for GPU nodes",
                     description="Compiles the same pipeline with KubeflowV2DagRunner and adds "
                                 "resources, node selectors and tolerations per component.")
  from tfx_parallel.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  compiler.add_arguments(p)
  p.set_defaults(func=compiler.run)

  p = sub.add_parser("rbac", help="print the Role and RoleBinding multi-node training needs",
                     description="Prints the Kubernetes Role and RoleBinding that let the "
                                 "pipeline's service account run TFJobs or TrainJobs (kubectl "
                                 "apply -f -).")
  from tfx_parallel.kubeflow import rbac  # pylint: disable=g-import-not-at-top
  rbac.add_arguments(p)
  p.set_defaults(func=rbac.run)
  p = sub.add_parser("runtime", help="print the TensorFlow runtime for Kubeflow Trainer v2",
                     description="Prints the TrainingRuntime (trainer.kubeflow.org) whose "
                                 "TrainJobs run multi-node training (kubectl apply -f -).")
  rbac.add_runtime_arguments(p)
  p.set_defaults(func=rbac.run_runtime)
  p = sub.add_parser("manifests", help="print what a multi-node step would submit, per release",
                     description="Prints, without a cluster, the runtime and TrainJob (Kubeflow "
                                 "Trainer v2.0-v2.3) or the TFJob a DistributedTrainer step "
                                 "with these settings would submit (like kubectl --dry-run="
                                 "client -o yaml).")
  rbac.add_manifests_arguments(p)
  p.set_defaults(func=rbac.run_manifests)

  p = sub.add_parser("metrics", help="print runs' metrics read from ML Metadata",
                     description="Prints a table of runs read from ML Metadata: layout, mesh, "
                                 "steps to target, final loss, eval MSE, examples/s, blessed.")
  from tfx_parallel.pipeline import metrics_report  # pylint: disable=g-import-not-at-top
  metrics_report.add_arguments(p)
  p.set_defaults(func=metrics_report.run)
  return parser


def main(argv: Optional[List[str]] = None) -> int:
  args = build_parser().parse_args(argv)
  return args.func(args)


if __name__ == "__main__":
  sys.exit(main())
