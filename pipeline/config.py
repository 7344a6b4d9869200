"""Pipeline configuration: typed dataclasses, validated before anything runs.

Constants and typed config only (no I/O). `PipelineConfig.validate()` checks every
component's config and the cross-component rules (a mesh's model axis must divide
the feature count, shards must be sized for the workers), naming the offending key.
"""
import dataclasses
from typing import Any, Dict, List

from tfx_parallel.components.common.config_util import ConfigError, from_dict, require
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig

DEFAULT_PIPELINE_NAME = "tfx-parallel"
DEFAULT_HOME = "runs"
METADATA_FILE = "metadata.sqlite"
PIPELINE_ROOT_DIR = "pipelines"


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
    require(bool(self.pipeline_name) and all(c.isalnum() or c in "-_." for c in
                                             self.pipeline_name),
            "pipeline_name", f"must be non-empty [A-Za-z0-9._-]. Received: "
            f"{self.pipeline_name!r}")
    for prefix, sub in (("example_gen", self.example_gen), ("trainer", self.trainer),
                        ("evaluator", self.evaluator)):
      try:
        sub.validate()
      except ConfigError as e:
        raise ConfigError(f"{prefix}.{e.key}", str(e).split(": ", 1)[1]) from None
    eg, tr = self.example_gen, self.trainer
    if (tr.layout == "mesh" and tr.model == "linear" and eg.is_synthetic
        and not tr.pad_features):
      require(eg.num_features % tr.mesh_model == 0, "trainer.mesh",
              f"the model axis ({tr.mesh_model}) must divide the feature count "
              f"(example_gen.num_features={eg.num_features}); set "
              f"trainer.pad_features=true to pad with zero features instead")
    if "train" not in eg.split_ratios or "eval" not in eg.split_ratios:
      raise ConfigError("example_gen.split_ratios",
                        "the pipeline trains on 'train' and evaluates on 'eval'; "
                        f"received splits {sorted(eg.split_ratios)}")
    return self

  @classmethod
  def from_dict(cls, data: Dict[str, Any]) -> "PipelineConfig":
    return from_dict(cls, data)
