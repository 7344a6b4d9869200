"""Typed config of DistributedTrainer: the parallel layout, model and optimizer."""
import dataclasses
import math
import re
from typing import Any, Dict, Optional, Tuple

from tfx_parallel.components.common import column_rules, keys, task_contract
from tfx_parallel.components.common import na_values as na_lib
from tfx_parallel.components.common.config_util import ConfigError, require
# The optimizer names (optimizers.RULES, a leaf module that imports nothing of ours).
from tfx_parallel.components.distributed_trainer.optimizers import OPTIMIZERS  # pylint: disable=unused-import

LAYOUTS = ("single", "mirrored", "multi_worker", "mesh", "auto")
MODELS = ("linear", "mlp")
CACHE_MODES = ("auto", "memory", "none")
# Config ``device``: where training runs (plan/devices.py applies it).
DEVICE_KINDS = ("auto", "cpu", "gpu")
# gpu_memory: "growth" (take memory as needed), "all" (TensorFlow's default: reserve
# nearly all of every GPU at start), or a size per GPU ("4GiB": a hard limit).
GPU_MEMORY_POLICIES = ("growth", "all")


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value) -> int:
  """``device_memory`` in bytes: a positive int, or a string such as "512MiB", "2GiB",
  "1.5GB" (binary and decimal units). Raises ValueError naming what was received."""
  if isinstance(value, bool):
    raise ValueError(f"must be bytes (an int) or a size such as '512MiB'. Received: {value!r}")
  if isinstance(value, int):
    if value <= 0:
      raise ValueError(f"must be a positive number of bytes. Received: {value!r}")
    return value
  if isinstance(value, str):
    match = _BYTES.match(value)
    unit = match.group(2).lower() if match else None
    if match and unit in _UNITS:
      n = int(float(match.group(1)) * _UNITS[unit])
      if n > 0:
        return n
  raise ValueError(f"must be bytes (an int) or a size such as '512MiB', '2GiB' or '1.5GB' "
                   f"(units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB). Received: {value!r}")


def check_gpu_memory(value) -> None:
  """Validates config ``gpu_memory`` (ConfigError naming the key)."""
  if value in GPU_MEMORY_POLICIES:
    return
  try:
    parse_bytes(value)
  except ValueError:
    raise ConfigError("gpu_memory", f"must be 'growth', 'all' or a size per GPU such as "
                      f"'4GiB'. Received: {value!r}") from None


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """How to train.

  Attributes:
    layout: "single" | "mirrored" | "multi_worker" | "mesh", or "auto": the executor
      picks single, mirrored N or a mesh BxM with the planner (layout_choice.py).
    device_memory: memory per device for the planner, bytes or a size such as "512MiB";
      on CPU without it, "auto" plans with the available host memory shared equally by
      the logical devices (on GPUs it caps the measured free memory). With an
      explicit layout that does not fit it, the trainer warns and runs as asked.
    devices: replicas for "mirrored", devices "auto" plans for (0 = all local GPUs,
      else N devices; N logical CPU devices when there is no GPU, 0 meaning
      plan/devices.py's CPU_DEVICES, 2).
    mesh: (batch, model) device counts for "mesh". ``tfx-parallel run`` and ``compile``
      give a mesh layout without one a mesh fitted to the GPUs (run: the machine's;
      compile: the trainer's accelerator count; plan/devices.py ``default_mesh``): 2x2
      on logical CPU devices, on G GPUs a model axis of 2 and a batch axis of up to G/2.
    model: built-in model module when no user module is given: "linear" or "mlp"
      (components/distributed_trainer/models/).
    module_file: path of a user module defining ``build_model(spec)`` (see
      user_module.py); exclusive with module_path.
    module_path: importable module name of a user module (e.g. in a Kubeflow image).
    hparams: the user's hyperparameters, passed to the module as ``spec.hparams``. With
      the component's ``hyperparameters`` input (e.g. a stock Tuner's
      best_hyperparameters) its values join these; a name set in both with different
      values (or types) fails, and a tuned ``learning_rate``, ``optimizer`` or
      ``batch_size`` also sets that setting for the run, said and recorded
      (hyperparameters.py).
    warm_start_partial: with the component's ``base_model`` input, load the variables
      that match it by path, shape and ids (vocabularies) and start the rest fresh;
      false (default): any variable that does not match fails the run, naming it
      (warm_start.py).
    task: "regression" | "binary" | "multiclass"; None infers it from the label.
    max_vocabulary: most frequent values of each string feature kept as its vocabulary.
    hash_buckets: > 0 hashes every string feature into this many buckets instead.
    skip_missing_labels: skip examples without a label (default), counting them on the
      console and in the run record (``missing_labels``); false makes one an error
      naming the split and file.
    max_missing_label_share: the largest share (0..1) of the train and eval examples
      that may lack a label when they are skipped; more fails the run before training
      (default 0.5: a label that sparse is more likely the wrong column).
    steps_per_execution: training steps per call into TensorFlow (tf_keras ``compile``);
      reduced to divide log_every and checkpoint_every.
    hidden_units: hidden widths of the built-in mlp.
    batch_size: global batch size (split across replicas / the batch axis).
    learning_rate: the optimizer's learning rate (step size); a module's ``optimizer``
      hook replaces it, a tuned ``learning_rate`` (``hyperparameters`` input) sets it. ``tfx-parallel run`` reads its default (pipeline/config.py
      ``default_trainer``: 0.05 for synthetic data).
    optimizer: the update rule ("sgd", "momentum", "adam"); the default, Adam at 0.01,
      trains the taxi CSV without diverging (SGD at 0.1 diverged on its raw columns:
      tests/test_trainer_classification_e2e.py).
    steps: training steps; 0 means epochs * steps_per_epoch.
    epochs: passes over the train split (one eval loss per pass); 0 (default, with
      ``steps`` 0) chooses the length from the data (plan/length.py): at least 5 passes
      and ``min_steps`` steps, stopping early when the eval loss has not improved for
      ``patience`` evaluations, with the best weights kept. The choice and why are
      printed and recorded (history.json ``training_length``).
    min_steps: the floor on steps of the automatic length (``epochs`` and ``steps`` 0).
    patience: with the automatic length, stop after this many evaluations without a
      better eval loss and keep the best evaluation's weights; 0 never stops early. A
      length that is set (``epochs`` or ``steps``) is trained in full.
    seed: initialisation and shuffle seed.
    log_every: history record and progress line every k steps.
    checkpoint_every: checkpoint every N steps (0 = only at the end).
    stop_on_divergence: stop early when the loss becomes NaN/inf.
    normalize: standardise numeric features with the train split's mean/std, in the
      input pipeline and in the exported serving signature alike.
    normalize_clip: with ``normalize``, standardised values are clipped to
      [-normalize_clip, +normalize_clip] standard deviations (0 = no clipping), so one
      corrupt value far outside the training range (a 20-hour taxi trip) cannot make
      the model extrapolate without bound. Training and serving clip identically.
    workers: processes the executor launches on 127.0.0.1 for "multi_worker" when no
      TF_CONFIG is set (with TF_CONFIG, e.g. a Kubeflow TFJob, this task is one worker).
    shuffle_buffer: examples in the seeded shuffle buffer (streamed input, ``cache``
      "none"; the in-memory cache shuffles all rows once, then their blocks of
      batch_size // 32 rows, at most 16, each epoch: inputs/memory_cache.py).
    cache: the training split's input. "memory": read and parse it once, keep the
      parsed, preprocessed features in memory and shuffle, batch and repeat from there
      (inputs/memory_cache.py); "none": stream it from the files every epoch; "auto" (default):
      "memory" when its estimated decoded size is under a quarter of the available
      memory, else "none". The choice is printed and recorded in history.json.
    device: "auto" (GPUs when TensorFlow sees any, else logical CPU devices), "cpu"
      (force the CPU, split into logical devices, even on a GPU machine) or "gpu" (fail
      without a GPU). On GPUs a layout larger than the GPUs present shrinks to the
      largest that fits (devices.py; printed and recorded).
    gpu_memory: "growth" (take GPU memory as needed; the default, so several processes
      can share a GPU), "all" (TensorFlow's default: reserve nearly all of every GPU)
      or a size per GPU such as "4GiB" (a hard limit).
    require_gpu: fail at once, with CUDA's own load error, when no GPU is visible
      (instead of training on the CPU).
    tf32: TensorFloat-32 matmuls and convolutions on Ampere and newer GPUs (TensorFlow's
      default, ~1e-3 relative error); false gives exact float32 (parity checks).
    logical_gpus: > 1 splits the first GPU into this many logical GPUs (to check the
      multi-device layouts on one GPU; benchmarks/gpu_check.py). 0: off.
    label_key: the label feature; None takes it from the Examples artifact's
      ``label_key`` property (PartitionedExampleGen sets it; stock ExampleGens do not).
    train_split, eval_split: the Examples splits to train and evaluate on (as TFX's
      ``TrainArgs`` / ``EvalArgs`` name them).
    na_values: string feature values read as missing (id 0, counted in
      ``missing values``), as in a CSV cell (common/na_values.py). None (default): the
      set PartitionedExampleGen recorded (its ``na_values``), else pandas' default
      (``NA``, ``N/A``, ``NULL``, ...); ``[]``: none.
    id_like_ratio: a string feature with at least 20 non-missing train values of which
      this share or more are distinct is ID-like and left out (common/column_rules.py;
      a console line and history.json's ``input_columns`` name it). None: never.
    keep_as_category: string features used as categories as they are, even when the
      ID-like or date rules would leave them out or derive numbers from them.
  """
  layout: str = "single"
  devices: int = 0
  device_memory: Optional[Any] = None
  mesh: Tuple[int, int] = (1, 1)
  model: str = "linear"
  module_file: Optional[str] = None
  module_path: Optional[str] = None
  hparams: Dict[str, Any] = dataclasses.field(default_factory=dict)
  warm_start_partial: bool = False
  task: Optional[str] = None
  max_vocabulary: int = 10_000
  hash_buckets: int = 0
  skip_missing_labels: bool = task_contract.SKIP_MISSING_LABELS
  max_missing_label_share: float = task_contract.MAX_MISSING_LABEL_SHARE
  steps_per_execution: int = 10
  hidden_units: Tuple[int, ...] = (16,)
  batch_size: int = 64
  learning_rate: float = 0.01
  optimizer: str = "adam"
  steps: int = 0
  epochs: int = 0
  min_steps: int = 1000
  patience: int = 10
  seed: int = 0
  log_every: int = 10
  checkpoint_every: int = 100
  stop_on_divergence: bool = True
  normalize: bool = False
  normalize_clip: float = 5.0
  workers: int = 2
  shuffle_buffer: int = 10_000
  cache: str = "auto"
  device: str = "auto"
  gpu_memory: Any = "growth"
  require_gpu: bool = False
  logical_gpus: int = 0
  tf32: bool = True
  label_key: Optional[str] = None
  train_split: str = "train"
  eval_split: str = "eval"
  na_values: Optional[Tuple[str, ...]] = None
  id_like_ratio: Optional[float] = column_rules.ID_LIKE_RATIO
  keep_as_category: Tuple[str, ...] = ()

  @property
  def mesh_batch(self) -> int:
    return int(self.mesh[0])

  @property
  def mesh_model(self) -> int:
    return int(self.mesh[1])

  def validate(self) -> "TrainerConfig":
    require(self.layout in LAYOUTS, "layout",
            f"unknown layout {self.layout!r}; expected one of {LAYOUTS}")
    if self.device_memory is not None:
      try:
        parse_bytes(self.device_memory)
      except ValueError as e:
        require(False, "device_memory", str(e))
    require(self.device in DEVICE_KINDS, "device",
            f"must be one of {list(DEVICE_KINDS)}. Received: {self.device!r}")
    check_gpu_memory(self.gpu_memory)
    require(isinstance(self.require_gpu, bool), "require_gpu",
            f"must be true or false. Received: {self.require_gpu!r}")
    require(not (self.require_gpu and self.device == "cpu"), "require_gpu",
            f"contradicts device 'cpu'. Received: require_gpu=True, device={self.device!r}")
    require(isinstance(self.tf32, bool), "tf32", f"must be true or false. Received: {self.tf32!r}")
    require(isinstance(self.logical_gpus, int) and self.logical_gpus >= 0, "logical_gpus",
            f"must be >= 0. Received: logical_gpus={self.logical_gpus!r}")
    require(self.model in MODELS, "model",
            f"unknown model {self.model!r}; expected one of {MODELS}")
    require(not (self.module_file and self.module_path), "module_file",
            "exactly one of module_file and module_path may be set (or neither, for the "
            f"built-in model). Received: module_file={self.module_file!r}, "
            f"module_path={self.module_path!r}")
    require(isinstance(self.hparams, dict), "hparams",
            f"must be a JSON object. Received: {self.hparams!r}")
    require(self.task is None or self.task in keys.TASKS, "task",
            f"must be one of {list(keys.TASKS)} or unset (inferred from the label). "
            f"Received: {self.task!r}")
    require(isinstance(self.max_vocabulary, int) and self.max_vocabulary >= 1,
            "max_vocabulary", f"must be >= 1. Received: {self.max_vocabulary!r}")
    require(isinstance(self.hash_buckets, int) and self.hash_buckets >= 0, "hash_buckets",
            f"must be >= 0. Received: {self.hash_buckets!r}")
    require(isinstance(self.warm_start_partial, bool), "warm_start_partial",
            f"must be true or false. Received: {self.warm_start_partial!r}")
    require(isinstance(self.skip_missing_labels, bool), "skip_missing_labels",
            f"must be true or false. Received: {self.skip_missing_labels!r}")
    require(isinstance(self.max_missing_label_share, (int, float))
            and not isinstance(self.max_missing_label_share, bool)
            and 0.0 <= self.max_missing_label_share <= 1.0, "max_missing_label_share",
            f"must be a share from 0 to 1 (0.5: up to half the examples may lack a label). "
            f"Received: {self.max_missing_label_share!r}")
    require(isinstance(self.normalize_clip, (int, float)) and self.normalize_clip >= 0,
            "normalize_clip", f"must be a number >= 0 (0: no clipping). "
            f"Received: {self.normalize_clip!r}")
    require(isinstance(self.steps_per_execution, int) and self.steps_per_execution >= 1,
            "steps_per_execution", f"must be >= 1. Received: {self.steps_per_execution!r}")
    require(self.cache in CACHE_MODES, "cache",
            f"must be one of {list(CACHE_MODES)}. Received: {self.cache!r}")
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
    require(isinstance(self.epochs, int) and self.epochs >= 0, "epochs",
            f"must be >= 0 (0: chosen from the data). Received: epochs={self.epochs!r}")
    require(isinstance(self.min_steps, int) and self.min_steps >= 0, "min_steps",
            f"must be an integer >= 0. Received: min_steps={self.min_steps!r}")
    require(isinstance(self.patience, int) and self.patience >= 0, "patience",
            f"must be an integer >= 0 (0: never stop early). "
            f"Received: patience={self.patience!r}")
    require(self.log_every >= 1, "log_every", f"must be >= 1. Received: {self.log_every}")
    require(self.checkpoint_every >= 0, "checkpoint_every",
            f"must be >= 0. Received: {self.checkpoint_every}")
    require(isinstance(self.workers, int) and self.workers >= 1, "workers",
            f"must be >= 1. Received: workers={self.workers!r}")
    require(all(isinstance(h, int) and h >= 1 for h in self.hidden_units),
            "hidden_units", f"must be positive integers. Received: {self.hidden_units!r}")
    require(self.label_key is None or (isinstance(self.label_key, str) and self.label_key),
            "label_key", f"must be a feature name or null. Received: {self.label_key!r}")
    for key in ("train_split", "eval_split"):
      require(isinstance(getattr(self, key), str) and getattr(self, key), key,
              f"must be a split name. Received: {getattr(self, key)!r}")
    problem = na_lib.check(self.na_values)
    require(problem is None, "na_values", f"{problem}. Received: {self.na_values!r}")
    require(self.id_like_ratio is None or (isinstance(self.id_like_ratio, (int, float))
                                           and 0 < self.id_like_ratio <= 1),
            "id_like_ratio", f"must be in (0, 1], or null to embed every string feature. "
            f"Received: {self.id_like_ratio!r}")
    require(not isinstance(self.keep_as_category, str)
            and all(isinstance(k, str) and k for k in self.keep_as_category),
            "keep_as_category", f"must be a list of feature names. "
            f"Received: {self.keep_as_category!r}")
    replicas = self.replicas_hint()
    if replicas:
      require(self.batch_size % replicas == 0, "batch_size",
              f"global batch {self.batch_size} is not divisible by the "
              f"{replicas} replicas of layout {self.layout!r}")
    return self

  @property
  def module_name(self) -> str:
    """How messages name the model module."""
    if self.module_file:
      return self.module_file
    if self.module_path:
      return self.module_path
    return f"built-in model {self.model!r}"

  def execution_steps(self) -> int:
    """steps_per_execution reduced to divide log_every and checkpoint_every, so that
    progress lines and checkpoints fall on execution boundaries."""
    k = math.gcd(self.steps_per_execution, self.log_every)
    if self.checkpoint_every:
      k = math.gcd(k, self.checkpoint_every)
    return k

  def execution_note(self) -> Optional[str]:
    """The console line saying that ``execution_steps()`` reduced steps_per_execution,
    and the settings that keep it (None when it was not reduced)."""
    n, k = self.steps_per_execution, self.execution_steps()
    if k == n:
      return None
    divides = f"log_every {self.log_every}" + (
        f" and checkpoint_every {self.checkpoint_every}" if self.checkpoint_every else "")
    keep = f"trainer.log_every={math.lcm(n, self.log_every)}" + (
        f" and trainer.checkpoint_every={math.lcm(n, self.checkpoint_every)}"
        if self.checkpoint_every else "")
    return (f"steps_per_execution {n} -> {k}: reduced to divide {divides}, so that "
            f"progress lines and checkpoints fall on execution boundaries; to run {n} "
            f"steps per call, set {keep}")

  def replicas_hint(self) -> Optional[int]:
    """Data-parallel replicas known from config alone (None: known only at run time)."""
    if self.layout == "single":
      return 1
    if self.layout == "mirrored":
      return self.devices or None
    if self.layout == "mesh":
      return self.mesh_batch
    return None
