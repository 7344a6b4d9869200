"""Names of the ML Metadata custom properties on the ``ConvergenceMetrics`` artifact.

Every scalar ConvergenceEvaluator computes is one custom property; this module is the
only place the names are spelled. Conventions: ``-1`` means "never reached / not
applicable" (all such quantities are otherwise >= 0); flags are ints 0/1; floats that are
NaN or +-inf (a diverged run) are stored as the *strings* ``"nan"``, ``"inf"``,
``"-inf"``, because ML Metadata's SQLite backend rejects non-finite doubles
(:func:`set_property` / :func:`decode`). Losses are the trainer's per-record training
loss (MSE for regression, cross-entropy for classification).

Which quality properties exist depends on the evaluated model's ``task`` (the Task
column; "all": every task). A property of another task is absent, not -1.

Precision: ML Metadata 1.16 writes doubles into its SQL store as fixed-point text with 6
decimals (``%f``): 0.0123456789 is read back as 0.012346 and 3.2e-9 as 0.0. The double
properties stay (queries and UIs filter on them), and the executor also records every
float at full precision in ML Metadata, in the one ``struct_value`` property
``precise_values`` ({name: value}, non-finite values as strings). Read properties with
:func:`read_properties`, which overlays the precise values; ``tfx-parallel metrics``
does. ``metrics.json`` at the artifact URI holds the same full-precision values.

| Property | Type | Task | Meaning |
|---|---|---|---|
| `initial_loss` | float | all | training loss of the first history record (a record, not a reference: see `trivial_loss`) |
| `final_loss` | float | all | training loss of the last history record |
| `best_loss` | float | all | lowest finite training loss of any record |
| `target_loss` | float | all | loss target: `target_loss` config, else `target_fraction` x `trivial_loss` |
| `steps_to_target` | int | all | step of the first record with loss <= `target_loss`; -1 if never reached |
| `seconds_to_target` | float | all | `wall_time` (seconds since training start) of that record; -1 if never |
| `convergence_state` | str | all | `converged` (eval loss stopped falling and beats the trivial predictor by `min_gain`), `improving` (eval loss still falling), `plateaued` (stopped falling without converging), `stalled` (did not move, no better than trivial: nothing learned), `overfitting` (eval loss rose from its best while the training loss fell), `diverged` (non-finite, impossible or exploding loss, or eval and training loss rising together), `unrepresentative eval split` (the Examples' `eval_split_warnings`); rules in `convergence.py`; `unknown (no TrainingHistory)` without a `history` input (no other convergence property then) |
| `convergence_reason` | str | all | which rule decided the state, with the numbers |
| `trivial_loss` | float | all | loss of the trivial predictor on the eval split: label variance (regression), log loss of the class priors (classification) (`reference.py`) |
| `loss_vs_trivial` | float | all | `eval_mse` / `trivial_loss` (= 1 - R^2) or `eval_log_loss` / `trivial_loss`: 1 = nothing learned, 0 = perfect |
| `convergence_rate` | float | all | least-squares slope of ln(loss) vs step over records with finite loss > 0 (negative = decreasing; the loss falls by a factor e every -1/rate steps) |
| `tail_change` | float | all | fitted relative change of the loss over the last `plateau_window` records (-0.1 = fell 10 %) |
| `eval_loss_change` | float | all | last eval loss vs the best earlier one, relative (-0.39 = 39 % better); NaN with fewer than 2 epochs |
| `eval_loss_trend` | float | all | fitted relative change of the eval loss over its last `plateau_window` values (decides "still falling"); NaN with fewer than 2 |
| `eval_loss_trend_se` | float | all | standard error of `eval_loss_trend` |
| `num_records` | int | all | history records (one per `log_every` steps) |
| `last_step` | int | all | step of the last record (< `total_steps` if stopped early) |
| `total_steps` | int | all | steps the trainer planned |
| `stopped_early` | int | all | 1 if the trainer stopped before `total_steps` |
| `num_epochs` | int | all | epochs in the history |
| `epoch_loss_<k>` | float | all | training loss at the end of epoch k (k = 1, 2, ...) |
| `epoch_eval_loss_<k>` | float | all | eval loss measured at the end of epoch k (absent if not measured) |
| `weight_error` | float | all | max_i abs(w_hat_i - w_i) vs the Examples' `true_weights`; -1 if not synthetic or not linear |
| `bias_error` | float | all | abs(b_hat - b) vs `true_bias`; -1 if not available |
| `task` | str | all | task evaluated: `regression`, `binary` or `multiclass` (Model's `task` property, else the TrainingHistory's, else config `task`, else `regression`) |
| `num_classes` | int | all | 1 for regression, 2 for binary, K for multiclass |
| `label_vocabulary` | str | binary, multiclass | JSON list, class id -> label; only when the model has one (string labels) |
| `eval_split` | str | all | split evaluated |
| `eval_examples` | int | all | examples evaluated |
| `eval_unlabelled` | int | all | eval examples left out because they have no label (as the trainer skips them) |
| `eval_split_warnings` | str | all | JSON list: the Examples' warnings that the eval split is unrepresentative (`[]`: none; then `convergence_state` is `unrepresentative eval split`) |
| `eval_mse` | float | regression | mean squared error of `predictions` vs the label |
| `eval_rmse` | float | regression | sqrt(`eval_mse`) |
| `eval_mae` | float | regression | mean absolute error |
| `eval_r2` | float | regression | 1 - SS_res / SS_tot (NaN if the label is constant) |
| `label_is_binary` | int | regression | 1 if every label is 0 or 1 |
| `eval_accuracy` | float | all | regression: mean((prediction >= 0.5) == label) if `label_is_binary`, else -1; binary: fraction with (P(class 1) > 0.5) == label; multiclass: fraction with argmax(probabilities) == label |
| `eval_auc` | float | regression, binary | exact ROC AUC (ties counted half) of the prediction (regression, if `label_is_binary`) or of P(class 1) (binary); -1 without both classes; NaN when a score is NaN (a diverged model; no ROC curve then) |
| `eval_log_loss` | float | binary, multiclass | mean cross-entropy, computed from the `logits` output in float64 (exact where a probability rounds to 0 or 1) |
| `eval_precision` | float | binary | TP / (TP + FP) at P(class 1) > 0.5; -1 if nothing is predicted positive |
| `eval_recall` | float | binary | TP / (TP + FN) at P(class 1) > 0.5; -1 if no label is positive |
| `eval_positives` | int | binary | examples whose label is class 1 |
| `eval_class_accuracy_<k>` | float | multiclass | fraction of the examples of class id k (k = 0..K-1) predicted as k; -1 if the split has none |
| `eval_class_examples_<k>` | int | multiclass | examples of class id k |
| `eval_seconds` | float | all | wall seconds the quality evaluation took |
| `layout` | str | all | trainer layout: `single`, `mirrored`, `multi_worker`, `mesh` |
| `mesh_shape` | str | all | mesh as `"<batch>x<model>"`, e.g. `"2x2"`; `""` if the layout has no mesh |
| `replicas` | int | all | data-parallel replicas |
| `devices` | str | all | JSON list of the devices the trainer used |
| `num_devices` | int | all | length of `devices` |
| `global_batch_size` | int | all | global batch size |
| `model_type` | str | all | the model module that trained: `linear` or `mlp` (built-in), else the user module's `module_file` path or `module_path` |
| `examples_per_sec` | float | all | trainer's overall training throughput |
| `optimizer` | str | all | class of the optimizer that ran, e.g. `Adam`, `SGD` (a user hook's included; `""` if not recorded) |
| `optimizer_config` | str | all | JSON `get_config()` of that optimizer as built, learning-rate schedule included (`{}` if not recorded) |
| `learning_rate` | str | all | the learning rate that ran: a number, or the schedule's class and config as JSON |
| `loss` | str | all | class (or function name) of the training loss |
| `loss_config` | str | all | JSON `get_config()` of the training loss (`{}` for a function) |
| `diverged_reason` | str | all | why the trainer stopped the run as diverged (`""` if it did not) |
| `layout_rules` | str | all | mesh runs: JSON {variable-path regex: per-dimension sharding} applied (the module's `layout_rules` or the defaults); `{}` otherwise |
| `param_count` | int | all | trainable parameters (measured by the trainer); -1 if not recorded |
| `param_bytes_total` | int | all | their bytes, counted once; -1 if not recorded |
| `state_bytes_per_device` | int | all | max over devices of parameter + gradient + optimizer-slot bytes + two blocks of the largest parameter (in transit at an update or a boundary), from the variables' real placement (DTensor layouts, replicas); -1 if not recorded |
| `curves_file` | str | all | `curves.json`, full curves, relative to the artifact URI |
| `plot_file` | str | all | `loss.png`, loss curves plot, relative to the artifact URI |
| `metrics_file` | str | all | `metrics.json`, every property at full precision, relative to the artifact URI |
| `precise_values` | struct | all | every float property above at full precision, {name: value} (see Precision) |
| `blessed` | int | all | 1 if the blessing thresholds were met, else 0 (same as the ModelBlessing) |
| `blessing_message` | str | all | why the model was not blessed (`""` when blessed) |
"""
import math
from typing import Any, Dict, Mapping, Union

from tfx_parallel.components.common import keys

INITIAL_LOSS = "initial_loss"
FINAL_LOSS = "final_loss"
BEST_LOSS = "best_loss"
TARGET_LOSS = "target_loss"
STEPS_TO_TARGET = "steps_to_target"
SECONDS_TO_TARGET = "seconds_to_target"
CONVERGENCE_STATE = "convergence_state"
CONVERGENCE_RATE = "convergence_rate"
TAIL_CHANGE = "tail_change"
EVAL_LOSS_CHANGE = "eval_loss_change"
EVAL_LOSS_TREND = "eval_loss_trend"
EVAL_LOSS_TREND_SE = "eval_loss_trend_se"
NUM_RECORDS = "num_records"
LAST_STEP = "last_step"
TOTAL_STEPS = "total_steps"
STOPPED_EARLY = "stopped_early"
NUM_EPOCHS = "num_epochs"
EPOCH_LOSS_PREFIX = "epoch_loss_"
EPOCH_EVAL_LOSS_PREFIX = "epoch_eval_loss_"
CONVERGENCE_REASON = "convergence_reason"
TRIVIAL_LOSS = "trivial_loss"
LOSS_VS_TRIVIAL = "loss_vs_trivial"

WEIGHT_ERROR = "weight_error"
BIAS_ERROR = "bias_error"

TASK = keys.TASK
NUM_CLASSES = keys.NUM_CLASSES
LABEL_VOCABULARY = keys.LABEL_VOCABULARY

EVAL_SPLIT = "eval_split"
EVAL_EXAMPLES = "eval_examples"
EVAL_UNLABELLED = "eval_unlabelled"
EVAL_SPLIT_WARNINGS = keys.EVAL_SPLIT_WARNINGS
EVAL_MSE = "eval_mse"
EVAL_RMSE = "eval_rmse"
EVAL_MAE = "eval_mae"
EVAL_R2 = "eval_r2"
LABEL_IS_BINARY = "label_is_binary"
EVAL_ACCURACY = "eval_accuracy"
EVAL_AUC = "eval_auc"
EVAL_LOG_LOSS = "eval_log_loss"
EVAL_PRECISION = "eval_precision"
EVAL_RECALL = "eval_recall"
EVAL_POSITIVES = "eval_positives"
EVAL_CLASS_ACCURACY_PREFIX = "eval_class_accuracy_"
EVAL_CLASS_EXAMPLES_PREFIX = "eval_class_examples_"
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
OPTIMIZER_CONFIG = "optimizer_config"
LEARNING_RATE = "learning_rate"
LOSS = "loss"
LOSS_CONFIG = "loss_config"
DIVERGED_REASON = "diverged_reason"
LAYOUT_RULES = "layout_rules"
# Measured training-state bytes, copied from the trainer's history.json.
PARAM_COUNT = keys.PARAM_COUNT
PARAM_BYTES_TOTAL = keys.PARAM_BYTES_TOTAL
STATE_BYTES_PER_DEVICE = keys.STATE_BYTES_PER_DEVICE

CURVES_FILE = "curves_file"
PLOT_FILE = "plot_file"
METRICS_FILE = "metrics_file"
PRECISE_VALUES = "precise_values"
BLESSED = "blessed"
BLESSING_MESSAGE = "blessing_message"

# The ModelBlessing contract of the stock Evaluator (tfx/components/evaluator/constants.py),
# spelled here so the executor does not import every stock component (``tfx.components``
# doubles its start-up time); a test checks they agree.
BLESSING_BLESSED_KEY = "blessed"
BLESSING_CURRENT_MODEL_KEY = "current_model"
BLESSING_CURRENT_MODEL_ID_KEY = "current_model_id"
BLESSING_BASELINE_MODEL_KEY = "baseline_model"
BLESSING_BASELINE_MODEL_ID_KEY = "baseline_model_id"
BLESSED_VALUE = 1
NOT_BLESSED_VALUE = 0
BLESSED_FILE_NAME = "BLESSED"
NOT_BLESSED_FILE_NAME = "NOT_BLESSED"

# Values.
NOT_AVAILABLE = -1
CONVERGED = "converged"
IMPROVING = "improving"
PLATEAUED = "plateaued"
DIVERGED = "diverged"
STALLED = "stalled"
OVERFITTING = "overfitting"
# The Examples' eval_split_warnings (keys.EVAL_SPLIT_WARNINGS) are not empty: the eval
# split cannot judge the model; the state says so and the run is not blessed.
UNREPRESENTATIVE = "unrepresentative eval split"
# convergence_state without a TrainingHistory input (e.g. a model from the stock Trainer):
# the convergence part is left out, and the blessing rests on the quality thresholds.
NO_HISTORY = "unknown (no TrainingHistory)"
STATES = (CONVERGED, IMPROVING, PLATEAUED, STALLED, OVERFITTING, DIVERGED, UNREPRESENTATIVE,
          NO_HISTORY)

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


def set_properties(artifact, scalars: Mapping[str, Scalar]):
  """Sets every scalar with :func:`set_property`, plus the full-precision ``precise_values``."""
  for name, value in scalars.items():
    set_property(artifact, name, value)
  artifact.set_json_value_custom_property(PRECISE_VALUES, precise_values(scalars))


def precise_values(scalars: Mapping[str, Scalar]) -> Dict[str, Union[float, str]]:
  """{name: value} of the float scalars, non-finite ones as strings (a struct's numbers
  are doubles: exact)."""
  return {name: encode_json(value) for name, value in scalars.items()
          if isinstance(value, float)}


def _unwrapped(struct):
  """A struct value as written locally: the KFP launcher records a struct metadata value
  ``v`` as ``{"struct": v}`` (kubeflow/pipelines ``backend/src/v2/metadata/converter.go``
  :160-166 ``StructValueToMLMDValue``)."""
  if set(struct.fields) == {"struct"} and struct.fields["struct"].WhichOneof(
      "kind") == "struct_value":
    return struct.fields["struct"].struct_value
  return struct


def read_properties(custom_properties: Mapping[str, Any]) -> Dict[str, Scalar]:
  """Python values of an ML Metadata artifact's ``custom_properties`` map (``Value``
  protos), with the full-precision ``precise_values`` overlaid on the rounded doubles.

  Works on an artifact written before ``precise_values`` existed (doubles as stored), and
  on one the Kubeflow Pipelines launcher recorded: ``precise_values`` wrapped in
  ``{"struct": ...}``, and every number a double (converter.go:149-150), so a double
  that is not a float property (not in ``precise_values``) and is whole is an int again.
  """
  out = {name: decode(value) for name, value in custom_properties.items()
         if name != PRECISE_VALUES}
  if PRECISE_VALUES in custom_properties:
    struct = custom_properties[PRECISE_VALUES]
    if struct.WhichOneof("value") == "struct_value":
      fields = _unwrapped(struct.struct_value).fields
      for name, value in out.items():
        if (name not in fields and isinstance(value, float) and math.isfinite(value)
            and value == int(value)):
          out[name] = int(value)
      for name, value in fields.items():
        kind = value.WhichOneof("kind")
        if kind == "number_value":
          out[name] = value.number_value
        elif kind == "string_value":
          out[name] = decode_json(value.string_value)
  return out


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
