"""The typed run record: one dataclass is the schema of a training run's history.json, of
the TrainingHistory artifact's ML Metadata properties, and of what the evaluator, the
summary and the progress lines read.

The training process builds it from what ran (``RunHistory.from_dict`` rejects a key that
is not a field, so nothing is written outside the schema), what the executor decided
included (``missing_values``; ``layout_chosen`` / ``layout_reason`` under ``layout:
auto``: carried by the job), and writes history.json once; the executor only reads it
and sets the properties with :meth:`RunHistory.write_properties`. Each property's name and
encoding is declared once, on its field (``_prop``).

A field left ``None`` was not recorded: it is absent from history.json and sets no
property. Fields marked ``when=`` are written only in that case; every other field is
written by every run (tests/test_run_history.py checks both ways on real runs).
"""
import dataclasses
import json
from typing import Any, Callable, Dict, List, Optional, Union

from tfx_parallel.components.common import keys

Scalar = Union[str, int, float]

# The cases in which a conditional field is written.
WHEN_MESH = "mesh layout"
WHEN_AUTO = "layout: auto (the planner's choice, carried by the job)"
WHEN_GPU = "GPUs (TensorFlow's peak memory per GPU)"
WHEN_LINEAR = "a model with one Dense kernel and bias (the built-in linear model)"
WHEN_STRING_LABEL = "a string label (class id -> label)"
WHEN_EXECUTOR = "a job the executor prepared (its data scan's missing-value counts)"
WHEN_CLASSIFIER = "a classifier (binary, multiclass): the executor's scan of the label"
WHEN_TUNED = "a hyperparameters input (e.g. a stock Tuner's best_hyperparameters)"
WHEN_WARM = "a base_model input (warm start)"
WHEN_NOT_IN_TRAIN = "a class with examples in eval but none in train (the executor's scan)"


# Keys older trainers wrote and no field holds any more: never measured (always -1 / 0).
RETIRED = frozenset({"input_wait_fraction", "padded_features"})


def _json_sorted(value) -> str:
  return json.dumps(value, sort_keys=True)


def _mesh(value) -> str:
  return "x".join(str(int(d)) for d in value)


def _field(default=None, *, when: str = "", prop: Optional[str] = None,
           encode: Optional[Callable[[Any], Scalar]] = None, doc: str = ""):
  """A field of the record. ``prop``: the TrainingHistory property name (None: not a
  property); ``encode``: value -> the property's str / int / float."""
  return dataclasses.field(default=default, metadata={
      "when": when, "prop": prop, "encode": encode, "doc": doc})


@dataclasses.dataclass
class RunHistory:
  """history.json of one training run (written by the chief)."""
  # Where and how it ran (the step engine's describe() and the device plan).
  layout: Optional[str] = _field(prop="layout", encode=str,
                                 doc="single | mirrored | multi_worker | mesh")
  replicas: Optional[int] = _field(prop="replicas", encode=int,
                                   doc="data-parallel replicas")
  mesh_shape: Optional[List[int]] = _field(prop="mesh_shape", encode=_mesh,
                                           doc="[batch, model]; [1, 1] off the mesh")
  devices: Optional[List[str]] = _field(prop="devices", encode=json.dumps,
                                        doc="the devices whose memory holds the variables")
  device_type: Optional[str] = _field(prop=keys.DEVICE_TYPE, encode=str, doc="CPU or GPU")
  collective: Optional[str] = _field(prop=keys.COLLECTIVE, encode=str,
                                     doc="how replicas all-reduce (devices.COLLECTIVES)")
  collective_detail: Optional[str] = _field(doc="the collective, in words")
  device_plan_reason: Optional[str] = _field(doc="why the plan differs from the config")
  tf32: Optional[bool] = _field(doc="config tf32 as applied")
  steps_per_execution: Optional[int] = _field()
  # What trained.
  model: Optional[str] = _field(
      prop="model", encode=str,
      doc="the model module: linear or mlp (built-in), else the user module's "
          "module_file path or module_path")
  optimizer: Optional[str] = _field(prop="optimizer", encode=str,
                                    doc="class of the optimizer that ran")
  optimizer_config: Optional[Dict[str, Any]] = _field(prop="optimizer_config",
                                                      encode=_json_sorted)
  loss: Optional[Dict[str, Any]] = _field(prop="loss", encode=_json_sorted)
  hparams: Optional[Dict[str, Any]] = _field(
      prop="hparams", encode=_json_sorted,
      doc="the module's spec.hparams: config trainer.hparams merged with the "
          "hyperparameters input's values (distributed_trainer/hyperparameters.py)")
  hyperparameters_uri: Optional[str] = _field(
      when=WHEN_TUNED, prop="hyperparameters_uri", encode=str,
      doc="the HyperParameters artifact whose values joined hparams")
  tuned_settings: Optional[Dict[str, Any]] = _field(
      when=WHEN_TUNED, prop="tuned_settings", encode=_json_sorted,
      doc="the trainer settings a tuned value of the same name set for this run "
          "(learning_rate, optimizer, batch_size): {setting: {config: old, tuned: new}} "
          "(distributed_trainer/hyperparameters.py)")
  warm_start: Optional[Dict[str, Any]] = _field(
      when=WHEN_WARM, prop="warm_start", encode=_json_sorted,
      doc="source (the base model's SavedModel), loaded and skipped (variable counts), "
          "skipped_names, partial (trainer.warm_start_partial); resumed_instead: a "
          "checkpoint of the same run was resumed, nothing loaded (warm_start.py)")
  feature_keys: Optional[List[str]] = _field()
  label_key: Optional[str] = _field()
  task: Optional[str] = _field(doc="regression | binary | multiclass (task_contract.py)")
  num_classes: Optional[int] = _field()
  label_vocabulary: Optional[List[str]] = _field(when=WHEN_STRING_LABEL)
  # The run.
  global_batch_size: Optional[int] = _field()
  total_steps: Optional[int] = _field()
  steps_run: Optional[int] = _field(prop="steps_run", encode=int)
  resumed_from_step: Optional[int] = _field()
  examples_per_sec: Optional[float] = _field(prop="examples_per_sec", encode=float)
  records: Optional[List[Dict[str, Any]]] = _field(
      doc="every log_every steps: step, loss (the mean of the exact losses of the steps "
          "since the previous record), learning_rate, examples_per_sec, wall_time")
  initial_eval_loss: Optional[float] = _field(
      doc="the untrained model's eval loss: the divergence rule's starting point")
  epochs: Optional[List[Dict[str, Any]]] = _field(
      doc="epoch, step, train_loss, eval_loss, eval_loss_se (its standard error)")
  diverged: Optional[bool] = _field(prop="diverged", encode=int)
  diverged_reason: Optional[str] = _field(prop="diverged_reason", encode=str)
  stopped_early: Optional[bool] = _field(
      doc="diverged, early-stopped or stopped by a user callback before total_steps")
  training_length: Optional[Dict[str, Any]] = _field(
      doc="plan/length.py: total_steps, steps_per_epoch, patience, automatic, reason")
  early_stopping: Optional[Dict[str, Any]] = _field(
      doc="patience (0: a length the user set, trained in full), stopped, best_epoch, "
          "best_step, best_eval_loss, restored_best (the exported weights are the best "
          "step's), stopped_by_callback (the class of the user callback that set "
          "model.stop_training, e.g. EarlyStopping; else null). Every run: the trainer always keeps the best evaluation's weights, "
          "exported after an early stop or when the run overfits")
  skipped_examples: Optional[int] = _field(prop="skipped_examples", encode=int)
  input_cache: Optional[Dict[str, Any]] = _field(
      prop="input_cache", encode=lambda v: str(v["mode"]),
      doc="config cache as resolved: mode memory | none, and why")
  # Placement of the variables.
  variable_splits: Optional[Dict[str, Any]] = _field(doc="mesh: per variable; else {}")
  replicated_variables: Optional[List[str]] = _field(
      doc="mesh: variables the default rules left whole on a model axis > 1")
  layout_rules: Optional[Dict[str, Any]] = _field(when=WHEN_MESH, prop="layout_rules",
                                                  encode=_json_sorted)
  variable_shardings: Optional[Dict[str, Any]] = _field(when=WHEN_MESH)
  # Training-state bytes, measured (plan/memory.py).
  param_count: Optional[int] = _field(prop=keys.PARAM_COUNT, encode=int)
  param_bytes_total: Optional[int] = _field(prop=keys.PARAM_BYTES_TOTAL, encode=int)
  state_bytes_per_device: Optional[int] = _field(prop=keys.STATE_BYTES_PER_DEVICE, encode=int)
  gpu_memory_peak_bytes: Optional[Dict[str, int]] = _field(when=WHEN_GPU)
  weights: Optional[Dict[str, Any]] = _field(when=WHEN_LINEAR,
                                             doc="kernel and bias in input units")
  # Decided by the executor, written by the training process (train.Job).
  missing_values: Optional[Dict[str, Any]] = _field(when=WHEN_EXECUTOR,
                                                    prop="missing_values", encode=json.dumps)
  missing_labels: Optional[Dict[str, Any]] = _field(
      when=WHEN_EXECUTOR, prop=keys.MISSING_LABELS, encode=_json_sorted,
      doc="examples without a label: count, rows, share, splits {split: count}, policy "
          "skip | fail (trainer.skip_missing_labels)")
  label_counts: Optional[Dict[str, Dict[str, int]]] = _field(
      when=WHEN_CLASSIFIER, prop=keys.LABEL_COUNTS, encode=_json_sorted,
      doc="split -> class name -> examples (class names: label_vocabulary, else 0, 1, ...)")
  label_classes_not_in_train: Optional[Dict[str, Dict[str, int]]] = _field(
      when=WHEN_NOT_IN_TRAIN, prop=keys.LABEL_CLASSES_NOT_IN_TRAIN, encode=_json_sorted,
      doc="class -> {split: examples}: classes the model never saw a training example of")
  input_columns: Optional[Dict[str, Any]] = _field(
      when=WHEN_EXECUTOR, prop="input_columns", encode=_json_sorted,
      doc="string features left out (ID-like), read as dates or numbers, and their "
          "missing-value tokens (distributed_trainer/inputs/columns.py)")
  layout_chosen: Optional[str] = _field(when=WHEN_AUTO, prop=keys.LAYOUT_CHOSEN, encode=str)
  layout_reason: Optional[str] = _field(when=WHEN_AUTO, prop=keys.LAYOUT_REASON, encode=str)

  @classmethod
  def from_dict(cls, data: Dict[str, Any], where: str = "history") -> "RunHistory":
    """The record of a history.json dict; a key that is not a field raises ValueError
    naming it (and ``where``). Keys of :data:`RETIRED` (a history written before they
    were dropped, e.g. a cached TrainingHistory) are left out."""
    names = {f.name for f in dataclasses.fields(cls)}
    data = {k: v for k, v in data.items() if k not in RETIRED}
    unknown = sorted(set(data) - names)
    if unknown:
      raise ValueError(f"{where}: key(s) {unknown} are not fields of the run record "
                       f"(components/common/run_history.py). Received: {sorted(data)}")
    return cls(**data)

  @classmethod
  def from_json(cls, text: str, where: str = "history.json") -> "RunHistory":
    """Parses history.json (python json: NaN / Infinity literals accepted)."""
    return cls.from_dict(json.loads(text), where)

  def to_dict(self) -> Dict[str, Any]:
    """history.json's dict: the recorded fields (``None`` ones left out)."""
    return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None}

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), indent=1)

  def to_properties(self) -> Dict[str, Scalar]:
    """TrainingHistory property name -> value, for the recorded fields that are
    properties (an empty ``diverged_reason`` is not set)."""
    out: Dict[str, Scalar] = {}
    for f in dataclasses.fields(self):
      value = getattr(self, f.name)
      if f.metadata["prop"] is None or value is None or value == "":
        continue
      out[f.metadata["prop"]] = f.metadata["encode"](value)
    return out

  def write_properties(self, artifact) -> None:
    """Sets :meth:`to_properties` on ``artifact`` (str, int or float properties)."""
    for name, value in self.to_properties().items():
      if isinstance(value, bool) or isinstance(value, int):
        artifact.set_int_custom_property(name, int(value))
      elif isinstance(value, float):
        artifact.set_float_custom_property(name, value)
      else:
        artifact.set_string_custom_property(name, str(value))


def property_names() -> List[str]:
  """Every TrainingHistory property the record sets (names defined once, above)."""
  return [f.metadata["prop"] for f in dataclasses.fields(RunHistory) if f.metadata["prop"]]


def conditional_fields() -> Dict[str, str]:
  """Field name -> the case in which it is written, for the fields not every run writes."""
  return {f.name: f.metadata["when"] for f in dataclasses.fields(RunHistory)
          if f.metadata["when"]}
