"""Typed config of DistributedTrainer: the parallel layout, model and optimizer."""
import dataclasses
from typing import Optional, Tuple

from tfx_parallel.components.common.config_util import require

LAYOUTS = ("single", "mirrored", "multi_worker", "mesh")
MODELS = ("linear", "mlp")
OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """How to train.

  Attributes:
    layout: "single" | "mirrored" | "multi_worker" | "mesh".
    devices: replicas for "mirrored" (0 = all local GPUs, else N devices; N logical
      CPU devices when there is no GPU).
    mesh: (batch, model) device counts for "mesh".
    model: "linear" (row-sharded kernel) or "mlp" (Megatron column/row pairs).
    hidden_units: MLP hidden widths (pairs of layers: column- then row-sharded).
    batch_size: global batch size (split across replicas / the batch axis).
    learning_rate, optimizer: the update rule ("sgd", "momentum", "adam").
    steps: training steps; 0 means epochs * steps_per_epoch.
    epochs: passes over the train split (used for per-epoch eval loss).
    seed: initialisation and shuffle seed.
    log_every: history record and progress line every k steps.
    checkpoint_every: checkpoint every N steps (0 = only at the end).
    pad_features: pad the feature count up to a multiple of the model axis instead
      of rejecting it.
    stop_on_divergence: stop early when the loss becomes NaN/inf.
    normalize: standardise features with train-split mean/std, folded into the
      exported first layer.
    workers: processes the executor launches on 127.0.0.1 for "multi_worker" when no
      TF_CONFIG is set (with TF_CONFIG, e.g. a Kubeflow TFJob, this task is one worker).
    shuffle_buffer: examples in the seeded shuffle buffer.
  """
  layout: str = "single"
  devices: int = 0
  mesh: Tuple[int, int] = (1, 1)
  model: str = "linear"
  hidden_units: Tuple[int, ...] = (16,)
  batch_size: int = 64
  learning_rate: float = 0.1
  optimizer: str = "sgd"
  steps: int = 0
  epochs: int = 5
  seed: int = 0
  log_every: int = 10
  checkpoint_every: int = 100
  pad_features: bool = False
  stop_on_divergence: bool = True
  normalize: bool = False
  workers: int = 2
  shuffle_buffer: int = 10_000

  @property
  def mesh_batch(self) -> int:
    return int(self.mesh[0])

  @property
  def mesh_model(self) -> int:
    return int(self.mesh[1])

  def validate(self) -> "TrainerConfig":
    require(self.layout in LAYOUTS, "layout",
            f"unknown layout {self.layout!r}; expected one of {LAYOUTS}")
    require(self.model in MODELS, "model",
            f"unknown model {self.model!r}; expected one of {MODELS}")
    require(self.optimizer in OPTIMIZERS, "optimizer",
            f"unknown optimizer {self.optimizer!r}; expected one of {OPTIMIZERS}")
    require(isinstance(self.devices, int) and self.devices >= 0, "devices",
            f"must be >= 0. Received: devices={self.devices!r}")
    require(len(self.mesh) == 2 and all(isinstance(m, int) and m >= 1 for m in self.mesh),
            "mesh", f"must be (batch, model) positive integers. Received: {self.mesh!r}")
    require(isinstance(self.batch_size, int) and self.batch_size >= 1, "batch_size",
            f"must be >= 1. Received: batch_size={self.batch_size!r}")
    require(self.learning_rate > 0, "learning_rate",
            f"must be > 0. Received: {self.learning_rate!r}")
    require(isinstance(self.steps, int) and self.steps >= 0, "steps",
            f"must be >= 0. Received: steps={self.steps!r}")
    require(isinstance(self.epochs, int) and self.epochs >= 1, "epochs",
            f"must be >= 1. Received: epochs={self.epochs!r}")
    require(self.log_every >= 1, "log_every", f"must be >= 1. Received: {self.log_every}")
    require(self.checkpoint_every >= 0, "checkpoint_every",
            f"must be >= 0. Received: {self.checkpoint_every}")
    require(isinstance(self.workers, int) and self.workers >= 1, "workers",
            f"must be >= 1. Received: workers={self.workers!r}")
    require(all(isinstance(h, int) and h >= 1 for h in self.hidden_units),
            "hidden_units", f"must be positive integers. Received: {self.hidden_units!r}")
    replicas = self.replicas_hint()
    if replicas:
      require(self.batch_size % replicas == 0, "batch_size",
              f"global batch {self.batch_size} is not divisible by the "
              f"{replicas} replicas of layout {self.layout!r}")
    if self.layout == "mesh" and self.model == "mlp":
      for h in self.hidden_units:
        require(h % self.mesh_model == 0, "hidden_units",
                f"hidden width {h} is not divisible by the model axis {self.mesh_model}")
    return self

  def replicas_hint(self) -> Optional[int]:
    """Data-parallel replicas known from config alone (None: known only at run time)."""
    if self.layout == "single":
      return 1
    if self.layout == "mirrored":
      return self.devices or None
    if self.layout == "mesh":
      return self.mesh_batch
    return None
