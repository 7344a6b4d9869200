"""Typed config of ConvergenceEvaluator: convergence targets and blessing thresholds.

Blessing thresholds are grouped by task (``regression``, ``binary``, ``multiclass``);
only the group of the evaluated model's task is checked. An unset (None) threshold is
not checked.
"""
import dataclasses
from typing import Optional

from tfx_parallel.components.common import divergence
from tfx_parallel.components.common import keys
from tfx_parallel.components.common.config_util import require


def _require_fraction(value: Optional[float], key: str):
  require(value is None or 0.0 <= value <= 1.0, key,
          f"must be in [0, 1] or null. Received: {value!r}")


def _require_non_negative(value: Optional[float], key: str):
  require(value is None or value >= 0.0, key, f"must be >= 0 or null. Received: {value!r}")


@dataclasses.dataclass(frozen=True)
class RegressionThresholds:
  """Bless a regression model only when eval MSE <= ``max_eval_mse`` and R^2 >= ``min_r2``.

  Attributes:
    max_eval_mse: the largest eval MSE that is blessed; None: not checked.
    min_r2: the smallest eval R^2 that is blessed (<= 1); None: not checked.
  """
  max_eval_mse: Optional[float] = None
  min_r2: Optional[float] = None

  def validate(self, prefix: str = "regression."):
    _require_non_negative(self.max_eval_mse, prefix + "max_eval_mse")
    require(self.min_r2 is None or self.min_r2 <= 1.0, prefix + "min_r2",
            f"must be <= 1 (R^2 cannot exceed 1) or null. Received: {self.min_r2!r}")


@dataclasses.dataclass(frozen=True)
class BinaryThresholds:
  """Bless a binary classifier only when every set bound holds (threshold 0.5).

  Attributes:
    min_accuracy: the smallest eval accuracy that is blessed (0-1); None: not checked.
    min_auc: the smallest eval ROC AUC that is blessed (0-1); None: not checked.
    max_log_loss: the largest eval log loss that is blessed; None: not checked.
    min_precision: the smallest eval precision of class 1 (0-1); None: not checked.
    min_recall: the smallest eval recall of class 1 (0-1); None: not checked.
  """
  min_accuracy: Optional[float] = None
  min_auc: Optional[float] = None
  max_log_loss: Optional[float] = None
  min_precision: Optional[float] = None
  min_recall: Optional[float] = None

  def validate(self, prefix: str = "binary."):
    for name in ("min_accuracy", "min_auc", "min_precision", "min_recall"):
      _require_fraction(getattr(self, name), prefix + name)
    _require_non_negative(self.max_log_loss, prefix + "max_log_loss")


@dataclasses.dataclass(frozen=True)
class MulticlassThresholds:
  """Bless a multi-class classifier only when every set bound holds.

  Attributes:
    min_accuracy: the smallest eval accuracy that is blessed (0-1); None: not checked.
    max_log_loss: the largest eval log loss that is blessed; None: not checked.
    min_class_accuracy: the smallest accuracy of every class present in the split
      (0-1); None: not checked.
  """
  min_accuracy: Optional[float] = None
  max_log_loss: Optional[float] = None
  min_class_accuracy: Optional[float] = None

  def validate(self, prefix: str = "multiclass."):
    _require_fraction(self.min_accuracy, prefix + "min_accuracy")
    _require_fraction(self.min_class_accuracy, prefix + "min_class_accuracy")
    _require_non_negative(self.max_log_loss, prefix + "max_log_loss")

HIGHER_IS_BETTER = "higher_is_better"
LOWER_IS_BETTER = "lower_is_better"
DIRECTIONS = (HIGHER_IS_BETTER, LOWER_IS_BETTER)
# The direction of every metric a change threshold can bound (the fields of
# RegressionChange, BinaryChange and MulticlassChange): a threshold that leaves its
# direction unset takes this one, and one that sets the other is refused (TFMA has no
# default either: an unset direction raises, tensorflow_model_analysis 0.47.1
# evaluators/metrics_validator.py:86-98).
METRIC_DIRECTIONS = {
    "eval_mse": LOWER_IS_BETTER, "eval_mae": LOWER_IS_BETTER,
    "eval_log_loss": LOWER_IS_BETTER,
    "eval_accuracy": HIGHER_IS_BETTER, "eval_auc": HIGHER_IS_BETTER,
    "eval_r2": HIGHER_IS_BETTER, "eval_precision": HIGHER_IS_BETTER,
    "eval_recall": HIGHER_IS_BETTER,
}
LATEST_BLESSED = "latest_blessed"
BASELINES = (LATEST_BLESSED,)


@dataclasses.dataclass(frozen=True)
class ChangeThreshold:
  """How far a metric of the candidate may move from the baseline's, as TFMA's
  ``GenericChangeThreshold`` (tensorflow/model-analysis v0.47.1,
  ``tensorflow_model_analysis/proto/config.proto``: ``absolute``, ``relative``,
  ``direction``; checked as ``evaluators/metrics_validator.py``:65-102 of the installed
  TFMA does).

  With ``absolute_change = candidate - baseline`` and ``relative_change =
  (candidate - baseline) / baseline``: ``lower_is_better`` passes when each set bound is
  >= the change, ``higher_is_better`` when each set bound is <= the change. A relative
  bound fails when the baseline is 0 (TFMA: the ratio is NaN).

  Attributes:
    direction: ``higher_is_better`` or ``lower_is_better``; null (default): the
      metric's own, ``lower_is_better`` for eval_mse, eval_mae and eval_log_loss,
      ``higher_is_better`` for eval_accuracy, eval_auc, eval_r2, eval_precision and
      eval_recall. The other direction is refused (it would bless a worse model).
    absolute: the bound on ``candidate - baseline``; None: not checked.
    relative: the bound on ``(candidate - baseline) / baseline``; None: not checked.
  """
  direction: Optional[str] = None
  absolute: Optional[float] = None
  relative: Optional[float] = None

  def validate(self, prefix: str, metric: Optional[str] = None):
    """``metric``: the metric bounded (the field name), whose direction is checked."""
    require(self.direction is None or self.direction in DIRECTIONS, prefix + "direction",
            f"must be one of {list(DIRECTIONS)} or null (the metric's own). "
            f"Received: {self.direction!r}")
    if metric is not None:
      own = METRIC_DIRECTIONS.get(metric)
      require(own is not None or self.direction is not None, prefix + "direction",
              f"{metric} has no known direction: set it to one of {list(DIRECTIONS)}. "
              f"Received: None")
      require(own is None or self.direction in (None, own), prefix + "direction",
              f"{metric} is {own}; the other direction would bless a worse model "
              f"(set {prefix}direction={own}, or null: the metric's own). "
              f"Received: {self.direction!r}")
    for name in ("absolute", "relative"):
      value = getattr(self, name)
      require(value is None or (isinstance(value, (int, float)) and
                                not isinstance(value, bool) and value == value),
              prefix + name, f"must be a number or null. Received: {value!r}")

  def resolved(self, metric: str) -> "ChangeThreshold":
    """This threshold with its direction set: its own, else ``metric``'s."""
    if self.direction is not None:
      return self
    if metric not in METRIC_DIRECTIONS:
      raise ValueError(f"{metric} has no known direction; set its direction to one of "
                       f"{list(DIRECTIONS)}. Received: None")
    return dataclasses.replace(self, direction=METRIC_DIRECTIONS[metric])


def _bound(absolute=None, relative=None):
  """A field default: the metric's own direction (METRIC_DIRECTIONS)."""
  return dataclasses.field(default_factory=lambda: ChangeThreshold(None, absolute, relative))


# The default tolerance on each task's headline metric: the candidate may be at most this
# much worse than the baseline (TFMA's own examples use -1e-10, "no worse at all"; a
# little slack keeps an equally good retrain from failing on noise).
DEFAULT_RELATIVE_MSE_TOLERANCE = 0.01
DEFAULT_ACCURACY_TOLERANCE = 0.01


@dataclasses.dataclass(frozen=True)
class RegressionChange:
  """Change thresholds of a regression model against its baseline (per metric).

  Default: ``eval_mse`` at most 1 % above the baseline's (relative <= 0.01)."""
  eval_mse: ChangeThreshold = _bound(relative=DEFAULT_RELATIVE_MSE_TOLERANCE)
  eval_mae: ChangeThreshold = _bound()
  eval_r2: ChangeThreshold = _bound()


@dataclasses.dataclass(frozen=True)
class BinaryChange:
  """Change thresholds of a binary classifier against its baseline (per metric).

  Default: ``eval_accuracy`` at most 0.01 below the baseline's (absolute >= -0.01)."""
  eval_accuracy: ChangeThreshold = _bound(absolute=-DEFAULT_ACCURACY_TOLERANCE)
  eval_auc: ChangeThreshold = _bound()
  eval_log_loss: ChangeThreshold = _bound()
  eval_precision: ChangeThreshold = _bound()
  eval_recall: ChangeThreshold = _bound()


@dataclasses.dataclass(frozen=True)
class MulticlassChange:
  """Change thresholds of a multi-class classifier against its baseline (per metric).

  Default: ``eval_accuracy`` at most 0.01 below the baseline's (absolute >= -0.01)."""
  eval_accuracy: ChangeThreshold = _bound(absolute=-DEFAULT_ACCURACY_TOLERANCE)
  eval_log_loss: ChangeThreshold = _bound()


@dataclasses.dataclass(frozen=True)
class ChangeThresholds:
  """Change thresholds against the baseline model, by task (only the evaluated task's
  group is checked, and only when there is a baseline)."""
  regression: RegressionChange = dataclasses.field(default_factory=RegressionChange)
  binary: BinaryChange = dataclasses.field(default_factory=BinaryChange)
  multiclass: MulticlassChange = dataclasses.field(default_factory=MulticlassChange)

  def for_task(self, task: str):
    """{metric name: ChangeThreshold} of ``task``'s group, in declaration order, each
    with its direction set (ChangeThreshold.resolved)."""
    group = getattr(self, task)
    return {f.name: getattr(group, f.name).resolved(f.name)
            for f in dataclasses.fields(group)}

  def validate(self, prefix: str = "change_thresholds."):
    for name, cls in (("regression", RegressionChange), ("binary", BinaryChange),
                      ("multiclass", MulticlassChange)):
      group = getattr(self, name)
      require(isinstance(group, cls), prefix + name,
              f"must be a {cls.__name__} (a mapping of metric names to thresholds). "
              f"Received: {group!r}")
      for field in dataclasses.fields(group):
        threshold = getattr(group, field.name)
        key = f"{prefix}{name}.{field.name}"
        require(isinstance(threshold, ChangeThreshold), key,
                f"must be a mapping with direction, absolute, relative. "
                f"Received: {threshold!r}")
        threshold.validate(key + ".", field.name)


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
  """What counts as converged and as good enough to bless.

  The states and their exact rules are in convergence.py; in short (defaults): a run is
  ``converged`` when its eval loss stopped improving (the fitted trend of its last
  ``plateau_window`` values falls by at most ``plateau_tolerance`` or within two
  standard errors) and the model's eval loss is at least
  ``min_gain`` below the trivial predictor's (the label variance for regression, the
  class priors' log loss for classification).

  Attributes:
    target_loss: absolute training-loss target; when set, ``converged`` also needs the
      training loss to reach it. None: the target is ``target_fraction`` x the trivial
      predictor's loss, reported as ``steps_to_target`` only.
    target_fraction: see ``target_loss``.
    plateau_window: the last eval losses whose fitted trend decides "still falling"
      (convergence.eval_trend); with fewer than two eval losses, the history records at
      the end of training (the "tail") whose fitted change decides instead.
    plateau_tolerance: the eval loss trend must fall by more than this fraction (and by
      more than two standard errors) for the run to be "improving"; otherwise it stopped
      falling. Also how far the last eval loss must be above its best, while the
      training loss fell, for "overfitting".
    rise_tolerance: an eval loss that rose by more than this fraction from one epoch to
      the next, with the training loss rising by as much, makes the run "diverged"
      (components/common/divergence.py; the trainer stops on the same rule with the
      default). An eval loss that rises alone is "overfitting".
    explode_factor: a loss more than this many times the run's starting loss makes the
      run "diverged" (divergence.py; the trainer uses the default).
    stall_tolerance: eval losses that all stay within this fraction of the first one,
      in a model no better than the trivial predictor, make the run "stalled".
    min_gain: how far below the trivial predictor's loss the model's eval loss must be
      for "converged": 0.1 = at least 10 % below (for regression: R^2 >= 0.1).
    min_records: "converged" needs at least this many training history records (one
      every ``log_every`` steps); a shorter run is "improving" (too short to judge).
    trivial_fraction: a model whose last two eval losses are each at most this fraction
      of the trivial predictor's (0.01: R^2 >= 0.99) is at its floor, and "converged"
      even while its tiny loss still falls in relative terms.
    rise_noise_z: an eval loss rise makes the run "diverged" only beyond this many
      standard errors of the eval losses (their per-example spread / sqrt(rows)), as
      well as beyond ``rise_tolerance`` (divergence.py; the trainer uses the default).
    split: the Examples split to evaluate quality on.
    task: the task to evaluate when neither the Model nor the TrainingHistory artifact
      has a ``task`` property (None: regression). When an artifact has one, this must
      agree with it.
    regression: blessing thresholds of a regression model.
    binary: blessing thresholds of a binary classifier.
    multiclass: blessing thresholds of a multi-class classifier.
    require_converged: bless only runs whose state is "converged" (default True; a
      diverged run is never blessed either way).
    batch_size: eval batch size.
    label_key: the label feature; None takes it from the Examples artifact's
      ``label_key`` property, else from the TrainingHistory (the trainer records it).
    prediction_key: the serving signature's output to read when the model does not
      return the contract outputs (a stock Trainer's model); None: the single float
      output (signature.py).
    min_eval_examples: a run evaluated on fewer eval examples than this is not blessed
      (0: no minimum). Default 100: the 95 % interval of an accuracy near 0.5 measured
      on n rows is +-1.96 x 0.5 / sqrt(n), +-0.10 at 100 rows and +-0.27 at the 13 rows
      an 83-row CSV gets; an eval MSE on fewer rows is as noisy. Below it, the metrics
      cannot tell a good model from a lucky one.
    skip_missing_labels: evaluate without the examples that lack a label (or have more
      than one value) instead of failing on the first one. None (default): what the
      trainer did (its TrainingHistory's ``missing_labels`` policy, the trainer's
      ``skip_missing_labels``), else the trainer's default (skip; task_contract.py).
    baseline: where the baseline model comes from when the component has no
      ``baseline_model`` channel: ``latest_blessed`` looks up the latest blessed model of
      the same pipeline in ML Metadata (locally and on Kubeflow; no resolver node);
      null (default): no baseline unless the channel gives one. The first run, with no
      blessed model yet, is judged without a baseline (docs/verdicts.md).
    change_thresholds: per task and per metric, how far the candidate may move from the
      baseline (as TFMA's GenericChangeThreshold); checked only with a baseline, on top
      of the task's thresholds. Default: regression ``eval_mse`` at most 1 % worse
      (relative 0.01), classifiers' ``eval_accuracy`` at most 0.01 worse (absolute
      -0.01); every other metric unchecked.
  """
  target_loss: Optional[float] = None
  target_fraction: float = 0.01
  plateau_window: int = 5
  rise_tolerance: float = divergence.RISE_TOLERANCE
  plateau_tolerance: float = 0.02
  explode_factor: float = divergence.EXPLODE_FACTOR
  stall_tolerance: float = 1e-4
  min_gain: float = 0.1
  min_records: int = 5
  trivial_fraction: float = 0.01
  rise_noise_z: float = divergence.RISE_NOISE_Z
  split: str = "eval"
  task: Optional[str] = None
  regression: RegressionThresholds = dataclasses.field(default_factory=RegressionThresholds)
  binary: BinaryThresholds = dataclasses.field(default_factory=BinaryThresholds)
  multiclass: MulticlassThresholds = dataclasses.field(default_factory=MulticlassThresholds)
  require_converged: bool = True
  batch_size: int = 1024
  label_key: Optional[str] = None
  prediction_key: Optional[str] = None
  skip_missing_labels: Optional[bool] = None
  min_eval_examples: int = 100
  baseline: Optional[str] = None
  change_thresholds: ChangeThresholds = dataclasses.field(default_factory=ChangeThresholds)

  def validate(self) -> "EvaluatorConfig":
    require(self.target_loss is None or self.target_loss > 0, "target_loss",
            f"must be > 0. Received: {self.target_loss!r}")
    require(0 < self.target_fraction < 1, "target_fraction",
            f"must be in (0, 1). Received: {self.target_fraction!r}")
    require(self.plateau_window >= 2, "plateau_window",
            f"must be >= 2. Received: {self.plateau_window!r}")
    require(self.rise_tolerance > 0, "rise_tolerance",
            f"must be > 0. Received: {self.rise_tolerance!r}")
    require(0 <= self.plateau_tolerance < 1, "plateau_tolerance",
            f"must be in [0, 1). Received: {self.plateau_tolerance!r}")
    require(self.explode_factor > 1, "explode_factor",
            f"must be > 1. Received: {self.explode_factor!r}")
    require(0 <= self.stall_tolerance < 1, "stall_tolerance",
            f"must be in [0, 1). Received: {self.stall_tolerance!r}")
    require(0 <= self.min_gain < 1, "min_gain",
            f"must be in [0, 1). Received: {self.min_gain!r}")
    require(isinstance(self.min_records, int) and self.min_records >= 1, "min_records",
            f"must be an integer >= 1. Received: {self.min_records!r}")
    require(0 < self.trivial_fraction < 1, "trivial_fraction",
            f"must be in (0, 1). Received: {self.trivial_fraction!r}")
    require(self.rise_noise_z >= 0, "rise_noise_z",
            f"must be >= 0 (0: rise_tolerance alone). Received: {self.rise_noise_z!r}")
    require(bool(self.split), "split", f"must be a split name. Received: {self.split!r}")
    require(self.task is None or self.task in keys.TASKS, "task",
            f"must be one of {list(keys.TASKS)} or null. Received: {self.task!r}")
    for name, cls in (("regression", RegressionThresholds), ("binary", BinaryThresholds),
                      ("multiclass", MulticlassThresholds)):
      group = getattr(self, name)
      require(isinstance(group, cls), name,
              f"must be a {cls.__name__} (a mapping of its thresholds). "
              f"Received: {group!r}")
      group.validate(name + ".")
    require(self.batch_size >= 1, "batch_size", f"must be >= 1. Received: {self.batch_size}")
    require(isinstance(self.min_eval_examples, int) and self.min_eval_examples >= 0,
            "min_eval_examples",
            f"must be an integer >= 0 (0: no minimum). Received: {self.min_eval_examples!r}")
    require(self.skip_missing_labels in (None, True, False), "skip_missing_labels",
            f"must be true, false or null. Received: {self.skip_missing_labels!r}")
    require(self.baseline is None or self.baseline in BASELINES, "baseline",
            f"must be one of {list(BASELINES)} or null. Received: {self.baseline!r}")
    self.change_thresholds.validate()
    for key in ("label_key", "prediction_key"):
      value = getattr(self, key)
      require(value is None or (isinstance(value, str) and bool(value)), key,
              f"must be a name or null. Received: {value!r}")
    return self
