"""Typed config of ConvergenceEvaluator: convergence targets and blessing thresholds."""
import dataclasses
from typing import Optional

from tfx_parallel.components.common.config_util import require


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
  """What counts as converged and as good enough to bless.

  Attributes:
    target_loss: absolute training-loss target; None uses
      target_fraction * initial loss.
    target_fraction: fraction of the initial loss that counts as "reached".
    plateau_window: history records at the end of training (the "tail") whose loss
      decides the state (see convergence.py for the exact rules).
    rise_tolerance: a tail whose fitted loss rises by more than this fraction (and
      is above target) makes the run "diverged".
    split: the Examples split to evaluate quality on.
    max_eval_mse: bless only when eval MSE <= this (None: no bound).
    min_r2: bless only when eval R^2 >= this (None: no bound).
    require_converged: bless only runs whose state is "converged".
    batch_size: eval batch size.
  """
  target_loss: Optional[float] = None
  target_fraction: float = 0.01
  plateau_window: int = 5
  rise_tolerance: float = 0.5
  split: str = "eval"
  max_eval_mse: Optional[float] = None
  min_r2: Optional[float] = None
  require_converged: bool = True
  batch_size: int = 1024

  def validate(self) -> "EvaluatorConfig":
    require(self.target_loss is None or self.target_loss > 0, "target_loss",
            f"must be > 0. Received: {self.target_loss!r}")
    require(0 < self.target_fraction < 1, "target_fraction",
            f"must be in (0, 1). Received: {self.target_fraction!r}")
    require(self.plateau_window >= 2, "plateau_window",
            f"must be >= 2. Received: {self.plateau_window!r}")
    require(self.rise_tolerance > 0, "rise_tolerance",
            f"must be > 0. Received: {self.rise_tolerance!r}")
    require(bool(self.split), "split", f"must be a split name. Received: {self.split!r}")
    require(self.max_eval_mse is None or self.max_eval_mse >= 0, "max_eval_mse",
            f"must be >= 0. Received: {self.max_eval_mse!r}")
    require(self.batch_size >= 1, "batch_size", f"must be >= 1. Received: {self.batch_size}")
    return self
