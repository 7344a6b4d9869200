"""Names of the ML Metadata custom properties on the ``ConvergenceMetrics`` artifact.

Every scalar ConvergenceEvaluator computes is one custom property; this module is the
only place the names are spelled. Conventions: ``-1`` means "never reached / not
applicable" (all such quantities are otherwise >= 0); flags are ints 0/1; floats that are
NaN or +-inf (a diverged run) are stored as the *strings* ``"nan"``, ``"inf"``,
``"-inf"``, because ML Metadata's SQLite backend rejects non-finite doubles
(:func:`set_property` / :func:`decode`). Losses are the trainer's per-record training
loss (MSE for the regression models).

Precision: ML Metadata 1.16 writes doubles into its SQL store as fixed-point text with 6
decimals (``%f``): 0.0123456789 is read back as 0.012346 and 3e-8 as 0.0. The executor
therefore also writes every property at full precision to ``metrics.json`` at the
artifact URI (same names, same encoding); ``tfx-parallel metrics`` prefers it.

| Property | Type | Meaning |
|---|---|---|
| `initial_loss` | float | training loss of the first history record |
| `final_loss` | float | training loss of the last history record |
| `best_loss` | float | lowest finite training loss of any record |
| `target_loss` | float | loss target: `target_loss` config, else `target_fraction` x `initial_loss` |
| `steps_to_target` | int | step of the first record with loss <= `target_loss`; -1 if never reached |
| `seconds_to_target` | float | `wall_time` (seconds since training start) of that record; -1 if never |
| `convergence_state` | str | `converged`, `plateaued` or `diverged` (see `convergence.classify`) |
| `convergence_rate` | float | least-squares slope of ln(loss) vs step over records with finite loss > 0 (negative = decreasing; the loss falls by a factor e every -1/rate steps) |
| `tail_change` | float | fitted relative change of the loss over the last `plateau_window` records (-0.1 = fell 10 %) |
| `num_records` | int | history records (one per `log_every` steps) |
| `last_step` | int | step of the last record (< `total_steps` if stopped early) |
| `total_steps` | int | steps the trainer planned |
| `stopped_early` | int | 1 if the trainer stopped before `total_steps` |
| `num_epochs` | int | epochs in the history |
| `epoch_loss_<k>` | float | training loss at the end of epoch k (k = 1, 2, ...) |
| `epoch_eval_loss_<k>` | float | eval loss at the end of epoch k |
| `grad_norm_first` | float | gradient norm of the first record with a finite one |
| `grad_norm_last` | float | gradient norm of the last record with a finite one |
| `grad_norm_trend` | float | least-squares slope of grad_norm vs step (per step) |
| `weight_error` | float | max_i abs(w_hat_i - w_i) vs the Examples' `true_weights`; -1 if not synthetic or not linear |
| `bias_error` | float | abs(b_hat - b) vs `true_bias`; -1 if not available |
| `eval_split` | str | split evaluated |
| `eval_examples` | int | examples evaluated |
| `eval_mse` | float | mean squared error of `predictions` vs the label |
| `eval_rmse` | float | sqrt(`eval_mse`) |
| `eval_mae` | float | mean absolute error |
| `eval_r2` | float | 1 - SS_res / SS_tot (NaN if the label is constant) |
| `label_is_binary` | int | 1 if every label is 0 or 1 |
| `eval_accuracy` | float | mean((prediction >= 0.5) == label) if binary, else -1 |
| `eval_auc` | float | ROC AUC (exact, ties counted half) if binary with both classes, else -1 |
| `eval_seconds` | float | wall seconds the quality evaluation took |
| `layout` | str | trainer layout: `single`, `mirrored`, `multi_worker`, `mesh` |
| `mesh_shape` | str | mesh as `"<batch>x<model>"`, e.g. `"2x2"`; `""` if the layout has no mesh |
| `replicas` | int | data-parallel replicas |
| `devices` | str | JSON list of the devices the trainer used |
| `num_devices` | int | length of `devices` |
| `global_batch_size` | int | global batch size |
| `model_type` | str | trainer model: `linear` or `mlp` |
| `examples_per_sec` | float | trainer's overall training throughput |
| `optimizer` | str | trainer optimizer (`sgd`, `momentum`, `adam`; `""` if not recorded) |
| `input_wait_fraction` | float | fraction of training time spent waiting for input; -1 if not recorded |
| `curves_file` | str | `curves.json`, full curves, relative to the artifact URI |
| `plot_file` | str | `loss.png`, loss curves plot, relative to the artifact URI |
| `metrics_file` | str | `metrics.json`, every property at full precision, relative to the artifact URI |
| `blessed` | int | 1 if the blessing thresholds were met, else 0 (same as the ModelBlessing) |
| `blessing_message` | str | why the model was not blessed (`""` when blessed) |
"""
import math
from typing import Union

INITIAL_LOSS = "initial_loss"
FINAL_LOSS = "final_loss"
BEST_LOSS = "best_loss"
TARGET_LOSS = "target_loss"
STEPS_TO_TARGET = "steps_to_target"
SECONDS_TO_TARGET = "seconds_to_target"
CONVERGENCE_STATE = "convergence_state"
CONVERGENCE_RATE = "convergence_rate"
TAIL_CHANGE = "tail_change"
NUM_RECORDS = "num_records"
LAST_STEP = "last_step"
TOTAL_STEPS = "total_steps"
STOPPED_EARLY = "stopped_early"
NUM_EPOCHS = "num_epochs"
EPOCH_LOSS_PREFIX = "epoch_loss_"
EPOCH_EVAL_LOSS_PREFIX = "epoch_eval_loss_"
GRAD_NORM_FIRST = "grad_norm_first"
GRAD_NORM_LAST = "grad_norm_last"
GRAD_NORM_TREND = "grad_norm_trend"

WEIGHT_ERROR = "weight_error"
BIAS_ERROR = "bias_error"

EVAL_SPLIT = "eval_split"
EVAL_EXAMPLES = "eval_examples"
EVAL_MSE = "eval_mse"
EVAL_RMSE = "eval_rmse"
EVAL_MAE = "eval_mae"
EVAL_R2 = "eval_r2"
LABEL_IS_BINARY = "label_is_binary"
EVAL_ACCURACY = "eval_accuracy"
EVAL_AUC = "eval_auc"
EVAL_SECONDS = "eval_seconds"

LAYOUT = "layout"
MESH_SHAPE = "mesh_shape"
REPLICAS = "replicas"
DEVICES = "devices"
NUM_DEVICES = "num_devices"
GLOBAL_BATCH_SIZE = "global_batch_size"
MODEL_TYPE = "model_type"
EXAMPLES_PER_SEC = "examples_per_sec"
OPTIMIZER = "optimizer"
INPUT_WAIT_FRACTION = "input_wait_fraction"

CURVES_FILE = "curves_file"
PLOT_FILE = "plot_file"
METRICS_FILE = "metrics_file"
BLESSED = "blessed"
BLESSING_MESSAGE = "blessing_message"

# The ModelBlessing contract of the stock Evaluator (tfx/components/evaluator/constants.py),
# spelled here so the executor does not import every stock component (``tfx.components``
# doubles its start-up time); a test checks they agree.
BLESSING_BLESSED_KEY = "blessed"
BLESSING_CURRENT_MODEL_KEY = "current_model"
BLESSING_CURRENT_MODEL_ID_KEY = "current_model_id"
BLESSED_VALUE = 1
NOT_BLESSED_VALUE = 0
BLESSED_FILE_NAME = "BLESSED"
NOT_BLESSED_FILE_NAME = "NOT_BLESSED"

# Values.
NOT_AVAILABLE = -1
CONVERGED = "converged"
PLATEAUED = "plateaued"
DIVERGED = "diverged"
STATES = (CONVERGED, PLATEAUED, DIVERGED)

# Files at the ConvergenceMetrics artifact URI.
CURVES_FILE_NAME = "curves.json"
PLOT_FILE_NAME = "loss.png"
METRICS_FILE_NAME = "metrics.json"

Scalar = Union[int, float, str, bool]
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def set_property(artifact, name: str, value: Scalar):
  """Sets custom property ``name`` with the type conventions above (bool -> int 0/1)."""
  if isinstance(value, bool):
    artifact.set_int_custom_property(name, int(value))
  elif isinstance(value, int):
    artifact.set_int_custom_property(name, value)
  elif isinstance(value, float):
    if math.isfinite(value):
      artifact.set_float_custom_property(name, value)
    else:
      artifact.set_string_custom_property(name, str(value))  # 'nan', 'inf', '-inf'
  elif isinstance(value, str):
    artifact.set_string_custom_property(name, value)
  else:
    raise TypeError(f"property {name!r}: expected int, float, str or bool. "
                    f"Received: {type(value).__name__} {value!r}")


def encode_json(value: Scalar) -> Union[int, float, str]:
  """The ``metrics.json`` form of a value: as in ML Metadata, non-finite -> string."""
  if isinstance(value, bool):
    return int(value)
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def decode_json(value) -> Scalar:
  """Inverse of :func:`encode_json`."""
  return _NON_FINITE.get(value, value) if isinstance(value, str) else value


def decode(value) -> Scalar:
  """Python value of an ``ml_metadata`` ``Value`` proto, undoing the non-finite encoding."""
  kind = value.WhichOneof("value")
  if kind == "int_value":
    return value.int_value
  if kind == "double_value":
    return value.double_value
  if kind == "string_value":
    return _NON_FINITE.get(value.string_value, value.string_value)
  if kind == "bool_value":
    return int(value.bool_value)
  return None
