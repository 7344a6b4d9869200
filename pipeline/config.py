"""Pipeline configuration: typed dataclasses, validated before anything runs.

Constants and typed config. `PipelineConfig.validate()` (no I/O) checks every
component's config and the cross-component rules, naming the offending key. Whether a
mesh's model axis divides a model's variables is decided by the trainer alone, on the
model that will train (sharding.py), before the first step.
`PipelineConfig.check_inputs()` (local runs) reads the start of the CSV inputs.
"""
import dataclasses
import re
import zlib
from typing import Any, Dict, List, Optional

from tfx_parallel.components.common.config_util import ConfigError, from_dict, require
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.convergence_evaluator.config import RegressionThresholds
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.partitioned_example_gen.config import SYNTHETIC, ExampleGenConfig

DEFAULT_PIPELINE_NAME = "tfx-parallel"
DEFAULT_HOME = "runs"
METADATA_FILE = "metadata.sqlite"
PIPELINE_ROOT_DIR = "pipelines"
_PIPELINE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def pipeline_name_for(source: str, label: Optional[str]) -> str:
  """``tfx-parallel run``'s pipeline name when none is given: for a CSV, its file name
  (without directory and extension) and the label, e.g. ``diamonds-price``, so runs on
  different data are told apart in ML Metadata and ``tfx-parallel metrics``; else
  DEFAULT_PIPELINE_NAME. Characters a pipeline name cannot hold become ``_``."""
  if source in (SYNTHETIC, "taxi") or not source:
    return DEFAULT_PIPELINE_NAME
  parts = [p for p in re.split(r"[\\/]", source.rstrip("/")) if p]
  plain = [p for p in parts if not re.search(r"[*?\[{]", p)]  # A glob: its directory.
  stem = (parts[-1] if parts and parts[-1] in plain else plain[-1] if plain else "")
  for ext in (".gz", ".bz2", ".csv", ".txt", ".tsv"):
    stem = stem[:-len(ext)] if stem.lower().endswith(ext) else stem
  name = "-".join(p for p in (stem, label or "") if p)
  name = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")
  return name or DEFAULT_PIPELINE_NAME


def default_evaluator(source: str) -> EvaluatorConfig:
  """The evaluator's defaults for a data source.

  Synthetic data (and CSVs): blessed when the run is "converged" (its eval loss stopped
  falling, well below the trivial predictor's: convergence_evaluator/convergence.py).
  The built-in taxi demo is blessed on quality (eval R^2 >= 0.8) and not diverged,
  whether its five epochs end "converged" or still "improving".
  """
  if source == "taxi":
    return EvaluatorConfig(require_converged=False,
                           regression=RegressionThresholds(min_r2=TAXI_MIN_R2))
  return EvaluatorConfig()


TAXI_MIN_R2 = 0.8

# What ``tfx-parallel run`` changes from TrainerConfig's defaults, by data source (the one
# place: the CLI's defaults are TrainerConfig's and these; tests/test_cli_defaults.py).
RUN_LAYOUT = "mesh"     # The project's subject: a batch x model mesh (the CLI fits its shape).
SYNTHETIC_TRAINER = {"model": "linear", "learning_rate": 0.05}
CSV_TRAINER = {"model": "mlp", "normalize": True}


def default_trainer(source: str) -> TrainerConfig:
  """The trainer ``tfx-parallel run`` trains on a data source: TrainerConfig's defaults on
  the mesh layout, with what suits the data.

  * synthetic: the built-in linear model (the seed's row split) on the features as
    generated (the true weights are on their scale), at learning rate 0.05: Adam at
    TrainerConfig's 0.01 still improved at the end of 5 epochs of 10,000 rows (eval loss
    0.039 -> 0.005 in the last epoch), so the run was not yet "converged".
  * either: TrainerConfig's automatic length (``epochs`` 0: plan/length.py).
  * CSV and taxi: the built-in mlp on standardised numeric features (``normalize``).
  """
  overrides = SYNTHETIC_TRAINER if source == SYNTHETIC else CSV_TRAINER
  return dataclasses.replace(TrainerConfig(), layout=RUN_LAYOUT, **overrides)


def default_config(source: str = SYNTHETIC) -> "PipelineConfig":
  """The one set of defaults for a data source, whatever runs it: ``tfx-parallel run``
  (flags, ``--set``, ``--config``) and ``tfx-parallel compile`` (its YAML's ``pipeline:``
  section) both start here (pipeline/settings.py ``build``), so a CSV gets the same
  trainer locally and on Kubeflow."""
  return PipelineConfig(example_gen=ExampleGenConfig(source=source),
                        trainer=default_trainer(source), evaluator=default_evaluator(source))


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """The whole pipeline. Sub-configs are validated by their own `validate()`."""
  pipeline_name: str = DEFAULT_PIPELINE_NAME
  example_gen: ExampleGenConfig = dataclasses.field(default_factory=ExampleGenConfig)
  trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
  evaluator: EvaluatorConfig = dataclasses.field(default_factory=EvaluatorConfig)
  with_tfma: bool = False
  enable_cache: bool = True
  beam_pipeline_args: List[str] = dataclasses.field(default_factory=list)

  def validate(self) -> "PipelineConfig":
    # The name is a directory under <home>/pipelines/: "." or ".." would put the
    # artifacts in <home>/pipelines or <home> itself.
    require(isinstance(self.pipeline_name, str)
            and bool(_PIPELINE_NAME_RE.fullmatch(self.pipeline_name)),
            "pipeline_name", f"must be [A-Za-z0-9._-] starting with a letter or digit. "
            f"Received: {self.pipeline_name!r}")
    for prefix, sub in (("example_gen", self.example_gen), ("trainer", self.trainer),
                        ("evaluator", self.evaluator)):
      try:
        sub.validate()
      except ConfigError as e:
        raise ConfigError(f"{prefix}.{e.key}", str(e).split(": ", 1)[1]) from None
    eg, tr = self.example_gen, self.trainer
    if (self.with_tfma and tr.task is None and not eg.is_synthetic
        and not (eg.source == "taxi" and eg.label is None)):  # taxi's fare: regression
      raise ConfigError("trainer.task", "the stock Evaluator (with_tfma) is configured before "
                        "the trainer infers the task from the label; set trainer.task "
                        "(regression, binary or multiclass)")
    if "train" not in eg.split_ratios or "eval" not in eg.split_ratios:
      raise ConfigError("example_gen.split_ratios",
                        "the pipeline trains on 'train' and evaluates on 'eval'; "
                        f"received splits {sorted(eg.split_ratios)}")
    return self

  def check_inputs(self) -> "PipelineConfig":
    """Reads the start of every CSV input; raises ConfigError naming the key and file.

    Unlike ``validate()`` this does I/O, so the local runner calls it (before any
    directory or ML Metadata is created) and the Kubeflow compiler does not (its
    paths are the pods'). Checks: the glob matches files; each file opens, decodes
    and has the same header as the first; the header names the label (and the
    columns the config names).
    """
    eg = self.example_gen
    if eg.is_synthetic:
      return self
    from tfx_parallel.components.partitioned_example_gen import driver, sources  # pylint: disable=g-import-not-at-top
    source_key = "example_gen.source"
    try:
      # The files the ExampleGen driver will pick ({SPAN} / {VERSION} resolved).
      plan = sources.plan_source(eg, pattern=driver.resolve(eg).pattern)
    except sources.BadInputError as e:
      label_error = isinstance(e, sources.LabelError)
      raise ConfigError("example_gen.label" if label_error else source_key,
                        str(e)) from None
    except (OSError, ValueError, zlib.error) as e:  # a directory, a corrupt .gz, ...
      raise ConfigError(source_key, f"cannot read the first file matching "
                        f"{eg.source!r}: {type(e).__name__}: {e}") from None
    for path in plan.files[1:]:
      try:
        with sources.open_file(path) as f:
          header = sources.parse_header(f.readline().decode("utf-8", errors="replace"), path)
      except sources.BadInputError as e:
        raise ConfigError(source_key, str(e)) from None
      except (OSError, ValueError, zlib.error) as e:
        raise ConfigError(source_key, f"cannot read {path}: {type(e).__name__}: {e}") from None
      require(header == plan.header, source_key,
              f"{path}:1: header {list(header)} differs from {plan.files[0]}'s "
              f"{list(plan.header)}")
    return self

  @classmethod
  def from_dict(cls, data: Dict[str, Any]) -> "PipelineConfig":
    return from_dict(cls, data)
