"""The job file: everything one training process needs (:class:`Job`), written as JSON by
the executor and read by each training process (run/train.py), locally or on a Kubernetes
replica (kube/). Its own module, as TFX keeps ``FnArgs`` in ``fn_args_utils``, so that
the executor, the launchers and the training loop share it without importing each other."""
import dataclasses
from typing import Any, Dict, List, Optional

from tfx_parallel.components.common import config_util
from tfx_parallel.components.distributed_trainer.config import TrainerConfig


@dataclasses.dataclass
class Job:
  """Everything one training process needs; serialised to JSON by the executor."""
  config: dict
  examples_uri: str
  feature_keys: List[str]
  label_key: str
  train_rows: int
  model_dir: str          # SavedModel destination (chief only).
  model_run_dir: str      # TensorBoard logs.
  history_dir: str        # history.json + loss.png.
  checkpoint_dir: str     # Stable across reruns of the same inputs + config.
  num_shards: int = 1
  string_feature_keys: List[str] = dataclasses.field(default_factory=list)
  # Computed once by the executor (stats.prepare); None: this process computes them.
  model_spec: Optional[Dict[str, Any]] = None
  normalization: Optional[Dict[str, List[float]]] = None
  skipped_examples: int = 0
  # From description.describe (any Examples artifact); empty: Split-train/ and Split-eval/
  # under examples_uri, every numeric feature float32.
  train_files: List[str] = dataclasses.field(default_factory=list)
  eval_files: List[str] = dataclasses.field(default_factory=list)
  feature_dtypes: Dict[str, str] = dataclasses.field(default_factory=dict)
  vocabularies: Dict[str, List[str]] = dataclasses.field(default_factory=dict)
  # TFX Transform graph: the examples are transformed; the export serves raw examples.
  transform_graph_uri: Optional[str] = None
  required_features: List[str] = dataclasses.field(default_factory=list)  # missing.py
  # Counts and fills per feature (the executor's data scan); None: not scanned.
  missing_values: Optional[Dict[str, Dict[str, Any]]] = None
  # layout: auto: the planner's choice (layout_chosen, layout_reason), for history.json.
  layout_choice: Dict[str, str] = dataclasses.field(default_factory=dict)
  # The label as the executor's scan found it (stats.Prepared), for history.json.
  missing_labels: Dict[str, Any] = dataclasses.field(default_factory=dict)
  label_counts: Optional[Dict[str, Dict[str, int]]] = None
  label_classes_not_in_train: Dict[str, Dict[str, int]] = dataclasses.field(
      default_factory=dict)
  # Missing-value tokens of string features (None: pandas' set) and what became of the
  # string features (inputs/columns.py; history.json's input_columns).
  na_values: Optional[List[str]] = None
  input_columns: Dict[str, Any] = dataclasses.field(default_factory=dict)
  # The HyperParameters input whose values config["hparams"] holds (merged by the
  # executor: hyperparameters.py), for history.json; None: none.
  hyperparameters_uri: Optional[str] = None
  # The trainer settings its values set (hyperparameters.tuned_settings), for history.json.
  tuned_settings: Dict[str, Dict[str, Any]] = dataclasses.field(default_factory=dict)
  # The base_model input's SavedModel directory (warm_start.py); None: none.
  base_model_dir: Optional[str] = None

  def trainer_config(self) -> TrainerConfig:
    return config_util.from_dict(TrainerConfig, self.config).validate()

  def files(self, which: str) -> List[str]:
    """The "train" or "eval" files of this job."""
    listed = self.train_files if which == "train" else self.eval_files
    if listed:
      return list(listed)
    # Deferred: splits imports TensorFlow, which importing job does not.
    from tfx_parallel.components.common.splits import split_files  # pylint: disable=g-import-not-at-top
    return split_files(self.examples_uri, which)
