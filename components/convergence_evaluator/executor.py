"""ConvergenceEvaluator executor: read the inputs, call the pure modules, write outputs."""
import json
import os
from typing import Any, Dict, List, Optional

from absl import logging

from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.types import standard_artifacts
from tfx.utils import io_utils
from tfx.utils import path_utils

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import custom_properties
from tfx_parallel.components.common import divergence
from tfx_parallel.components.common import keys
from tfx_parallel.components.common import run_history
from tfx_parallel.components.common import splits
from tfx_parallel.components.common import task_contract
from tfx_parallel.components.common import tfenv
from tfx_parallel.components.convergence_evaluator import baseline as baseline_lib
from tfx_parallel.components.convergence_evaluator import blessing as blessing_lib
from tfx_parallel.components.convergence_evaluator import convergence
from tfx_parallel.components.convergence_evaluator import lookup
from tfx_parallel.components.convergence_evaluator import plots
from tfx_parallel.components.convergence_evaluator import properties as P
from tfx_parallel.components.convergence_evaluator import quality as quality_lib
from tfx_parallel.components.convergence_evaluator import reference
from tfx_parallel.components.convergence_evaluator import signature
from tfx_parallel.components.convergence_evaluator import report
from tfx_parallel.components.convergence_evaluator import task as task_lib
from tfx_parallel.components.convergence_evaluator.config import EvaluatorConfig


class Executor(base_executor.BaseExecutor):
  """Evaluates quality on a split, analyses the training history, blesses or not."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    tfenv.prepare()  # An entry point (the model is read through its serving signature).
    config = config_util.from_json(EvaluatorConfig, exec_properties[keys.CONFIG_KEY])
    config.validate()
    model = artifact_utils.get_single_instance(input_dict[keys.MODEL_KEY])
    examples = artifact_utils.get_single_instance(input_dict[keys.EXAMPLES_KEY])
    histories = input_dict.get(keys.HISTORY_KEY) or []
    history_artifact = artifact_utils.get_single_instance(histories) if histories else None
    metrics = artifact_utils.get_single_instance(output_dict[keys.METRICS_KEY])
    blessing = artifact_utils.get_single_instance(output_dict[keys.BLESSING_KEY])

    history = (read_history(history_artifact.uri) if history_artifact is not None
               else run_history.RunHistory())
    label_key = read_label_key(examples, config, history)
    files = splits.artifact_split_files(examples, config.split, "split")
    model_dir = path_utils.serving_model_path(model.uri)
    outputs = signature.read(model_dir)
    info = read_task(model, history_artifact, config, outputs)
    output_map = signature.output_map(outputs, info.task, config.prediction_key, model_dir)
    logging.info("ConvergenceEvaluator: evaluating a %s model (task from %s)%s, outputs %s.",
                 info.task, info.source,
                 f", {info.num_classes} classes" if info.is_classification else "",
                 list(output_map.names))
    quality = quality_lib.evaluate(model_dir, examples.uri, config.split, label_key,
                                   config.batch_size, info, files=files,
                                   output_map=output_map,
                                   skip_missing_labels=skip_missing_labels(config, history))
    if quality.unlabelled:
      logging.info("ConvergenceEvaluator: %d example(s) of split %r have no label %r and "
                   "were left out, as the trainer left them out.", quality.unlabelled,
                   config.split, label_key)
    if isinstance(quality, quality_lib.MulticlassQuality):
      info = info.with_num_classes(len(quality.class_examples))
    weight_error, bias_error = convergence.parameter_error(
        history.weights, *read_true_parameters(examples))

    model_loss, trivial_loss = reference.losses(quality)
    if history_artifact is not None:
      curves = convergence.curves_from_history(history.to_dict())
      summary = convergence.analyze(
          curves, convergence.Rules.of(config), trivial_loss, model_loss,
          flagged_diverged=bool(history.diverged),
          flagged_reason=str(history.diverged_reason or ""),
          non_negative=non_negative_loss(history))
      state = summary.state
      convergence_part = {**convergence_properties(curves, summary, history),
                          P.CURVES_FILE: P.CURVES_FILE_NAME, P.PLOT_FILE: P.PLOT_FILE_NAME}
    else:  # Left out, and the artifact says so.
      curves = summary = None
      state = P.NO_HISTORY
      convergence_part = {P.CONVERGENCE_STATE: state, P.TRIVIAL_LOSS: trivial_loss,
                          P.LOSS_VS_TRIVIAL: reference.ratio(model_loss, trivial_loss)}
    reason = summary.reason if summary is not None else ""
    warnings = read_eval_split_warnings(examples)
    if warnings:  # The eval split cannot judge the model: say so instead.
      state, reason = P.UNREPRESENTATIVE, "; ".join(warnings)
      convergence_part.update({P.CONVERGENCE_STATE: state, P.CONVERGENCE_REASON: reason})
      logging.warning("ConvergenceEvaluator: the model is not judged, as the eval split "
                      "does not represent the data: %s", reason)
    blessed, message = blessing_lib.decide(quality, state, config, reason)
    baseline = find_baseline(input_dict, exec_properties, config, model)
    comparison = compare_with_baseline(
        baseline, quality, info, config, examples.uri, files, label_key,
        skip_missing_labels(config, history))
    if comparison is not None and not comparison["passed"]:
      blessed = False
      message = "; ".join(m for m in (message, baseline_lib.blessing_message(comparison)) if m)
      logging.warning("ConvergenceEvaluator: not blessed: %s",
                      baseline_lib.blessing_message(comparison))
    if quality.examples < config.min_eval_examples and state != P.UNREPRESENTATIVE:
      logging.warning("ConvergenceEvaluator: not blessed: %s",
                      blessing_lib.too_few_examples(quality.examples,
                                                    config.min_eval_examples))

    scalars = {
        **convergence_part,
        **task_properties(info),
        **quality_properties(quality, config.split),
        **run_properties(history),
        P.WEIGHT_ERROR: weight_error,
        P.BIAS_ERROR: bias_error,
        P.METRICS_FILE: P.METRICS_FILE_NAME,
        P.EVAL_SPLIT_WARNINGS: json.dumps(warnings),
        P.BLESSED: int(blessed),
        P.BLESSING_MESSAGE: message,
        **(baseline_lib.properties(comparison) if comparison is not None else {}),
    }
    P.set_properties(metrics, scalars)
    write_files(metrics.uri, scalars,
                convergence.curves_document(curves, summary) if curves is not None else None,
                title=(f"Training loss: {scalars[P.LAYOUT]} layout, mesh "
                       f"{scalars[P.MESH_SHAPE] or '-'}, {scalars[P.REPLICAS]} replicas, "
                       f"{state}"))
    if comparison is not None:  # Before the report, which reads it beside metrics.json.
      write_comparison(metrics.uri, comparison)
    write_report(metrics.uri, scalars, quality, info)
    write_blessing(blessing, model, blessed, baseline)
    headline = (f"eval_mse={quality.mse:.6g}" if isinstance(quality, quality_lib.Quality)
                else f"eval_accuracy={quality.accuracy:.6g}")
    logging.info("ConvergenceEvaluator: state=%s %s blessed=%s%s. Metrics written to %s.",
                 state, headline, blessed, f" ({message})" if message else "",
                 metrics.uri)


def input_id(artifact: types.Artifact, key: str, environ=os.environ) -> int:
  """An input Model's ML Metadata id: on Kubeflow the one kubeflow/entrypoint.py passes
  (lookup.INPUT_IDS_ENV; TFX's KFP entry point gives the executor hashed ids), else the
  artifact's own."""
  ids = json.loads(environ.get(lookup.INPUT_IDS_ENV) or "{}")
  return int(ids.get(key, artifact.id))


def candidate_id(model: types.Artifact, environ=os.environ) -> int:
  """The candidate Model's ML Metadata id (input_id)."""
  return input_id(model, keys.MODEL_KEY, environ)


def find_baseline(input_dict: Dict[str, List[types.Artifact]],
                  exec_properties: Dict[str, Any], config: EvaluatorConfig,
                  model: types.Artifact, environ=os.environ
                  ) -> Optional[baseline_lib.BaselineModel]:
  """The baseline from the ``baseline_model`` channel, else ML Metadata's latest blessed
  model of the pipeline (config ``baseline: latest_blessed``); None without one."""
  given = input_dict.get(keys.BASELINE_MODEL_KEY) or []
  if given:
    artifact = artifact_utils.get_single_instance(given)
    return baseline_lib.BaselineModel(
        artifact.uri, baseline_lib.CHANNEL,
        input_id(artifact, keys.BASELINE_MODEL_KEY, environ),
        task_lib.read_properties(artifact))
  if config.baseline != baseline_lib.LATEST_BLESSED:
    return None
  store = lookup.open_store(exec_properties.get(keys.METADATA_CONNECTION_KEY) or "", environ)
  found = lookup.latest_blessed(store, candidate_id(model, environ))
  if found is None:
    # A warning, so a pipeline script at absl's default verbosity shows it: the user asked
    # for a baseline and this run has none.
    logging.warning("ConvergenceEvaluator: no blessed model in this pipeline yet: the "
                    "candidate is judged without a baseline.")
    return None
  logging.info("ConvergenceEvaluator: baseline: the latest blessed model of pipeline %r, "
               "Model %d at %s (ModelBlessing %d).", found.pipeline, found.model_id,
               found.uri, found.blessing_id)
  properties = {}
  if found.model is not None:
    looked_up = standard_artifacts.Model()
    looked_up.set_mlmd_artifact(found.model)
    properties = task_lib.read_properties(looked_up)
  return baseline_lib.BaselineModel(found.uri, baseline_lib.LATEST_BLESSED, found.model_id,
                                    properties)


def compare_with_baseline(baseline: Optional[baseline_lib.BaselineModel],
                          quality: quality_lib.AnyQuality,
                          info: task_lib.TaskInfo, config: EvaluatorConfig,
                          examples_uri: str, files, label_key: str, skip_missing: bool):
  """Evaluates the baseline on the candidate's split and files, as its own task with its
  own labels (baseline.task_of; compared by class name: baseline.check_comparable), and
  returns baseline.compare's dict (None without a baseline)."""
  if baseline is None:
    return None
  uri, source = baseline.uri, baseline.source
  model_dir = _serving_dir(lookup.readable_uri(uri))
  if model_dir is None:
    raise FileNotFoundError(
        f"the baseline model ({source}) at {uri} cannot be read from this step (as "
        f"{lookup.readable_uri(uri)}: no serving model there, or no filesystem for it). "
        f"On Kubeflow, the step's entry point sets up the pipeline root's object store "
        f"from KFP's secret (its log says why not; the TFX_PARALLEL_S3_* settings of "
        f"docs/kubeflow.md name another store); else pass baseline_model=<channel>, or "
        f"set evaluator.baseline=null. Received: {uri!r}")
  outputs = signature.read(model_dir)
  theirs_info = baseline_lib.task_of(baseline, info, signature.infer_task(outputs))
  baseline_lib.check_comparable(info, theirs_info, present_classes(quality, info), baseline)
  logging.info("ConvergenceEvaluator: evaluating %s as a %s model (task from %s)%s.",
               baseline.where, theirs_info.task, theirs_info.source,
               f", labels {list(baseline_lib.class_names(theirs_info))}"
               if theirs_info.is_classification else "")
  try:
    output_map = signature.output_map(outputs, theirs_info.task, config.prediction_key,
                                      model_dir)
    theirs = quality_lib.evaluate(model_dir, examples_uri, config.split, label_key,
                                  config.batch_size, theirs_info, files=files,
                                  output_map=output_map, skip_missing_labels=skip_missing)
  except ValueError as e:
    raise ValueError(f"evaluating {baseline.where} as a {theirs_info.task} model (task "
                     f"from {theirs_info.source}): {e}; or {baseline.fix}") from e
  return baseline_lib.compare(quality_properties(quality, config.split),
                              quality_properties(theirs, config.split), info.task,
                              config.change_thresholds, uri, source)


def present_classes(quality: quality_lib.AnyQuality, info: task_lib.TaskInfo) -> List[str]:
  """The names of the classes the eval split holds (a classifier's; [] for regression)."""
  if isinstance(quality, quality_lib.MulticlassQuality):
    names = baseline_lib.class_names(info.with_num_classes(len(quality.class_examples)))
    return [name for name, n in zip(names, quality.class_examples) if n]
  if isinstance(quality, quality_lib.BinaryQuality):
    return list(baseline_lib.class_names(info))
  return []


def _serving_dir(uri: str) -> Optional[str]:
  """The Model's serving directory (path_utils), None when this process cannot read it."""
  try:
    model_dir = path_utils.serving_model_path(uri)
    return model_dir if fileio.exists(model_dir) else None
  except Exception:  # pylint: disable=broad-except  # E.g. s3:// without tensorflow-io's filesystem.
    return None


def write_comparison(uri: str, comparison: Dict[str, Any]):
  """``baseline_comparison.json`` beside ``metrics.json`` (baseline.to_json)."""
  fileio.makedirs(uri)
  io_utils.write_string_file(os.path.join(uri, baseline_lib.FILE_NAME),
                             baseline_lib.to_json(comparison))


def read_task(model: types.Artifact, history: Optional[types.Artifact],
              config: EvaluatorConfig,
              outputs: Optional[Dict[str, signature.OutputSpec]] = None
              ) -> task_lib.TaskInfo:
  """The task from the Model's properties, else the history's, else config (task.py),
  else the serving signature's outputs (signature.py)."""
  info = task_lib.resolve(
      task_lib.read_properties(model), task_lib.read_properties(history), config.task,
      model_where=f"Model artifact at {model.uri}",
      history_where=(f"TrainingHistory artifact at {history.uri}" if history is not None
                     else "TrainingHistory (none)"))
  if info.source == "default" and outputs is not None:
    task, num_classes = signature.infer_task(outputs)
    return task_lib.TaskInfo(task, num_classes, None, "the serving signature")
  return info


def read_history(uri: str) -> run_history.RunHistory:
  """The typed run record of ``<uri>/history.json`` (NaN / Infinity literals accepted)."""
  path = os.path.join(uri, keys.HISTORY_FILE)
  if not fileio.exists(path):
    raise FileNotFoundError(f"TrainingHistory has no {keys.HISTORY_FILE}: {path}")
  with fileio.open(path, "r") as f:
    return run_history.RunHistory.from_json(f.read(), path)


def read_label_key(examples: types.Artifact, config: EvaluatorConfig,
                   history: run_history.RunHistory) -> str:
  """Config ``label_key``, else the Examples' ``label_key`` property, else history.json's."""
  if config.label_key:
    return config.label_key
  if examples.has_custom_property(keys.LABEL_KEY):
    return str(custom_properties.value(examples, keys.LABEL_KEY))
  if history.label_key:
    return str(history.label_key)
  raise config_util.ConfigError(
      "label_key", f"not set, and neither the Examples artifact at {examples.uri} (no "
      f"{keys.LABEL_KEY!r} property) nor a TrainingHistory names the label. Received: None")


def read_eval_split_warnings(examples: types.Artifact) -> List[str]:
  """The Examples' ``eval_split_warnings`` (keys.EVAL_SPLIT_WARNINGS: a JSON list of
  sentences, written by the ingest); [] without the property (stock ExampleGen)."""
  if not examples.has_custom_property(keys.EVAL_SPLIT_WARNINGS):
    return []
  raw = custom_properties.value(examples, keys.EVAL_SPLIT_WARNINGS)
  if isinstance(raw, (list, tuple)):  # Set as a JSON value rather than a string.
    return [str(w) for w in raw]
  text = str(raw or "[]")
  try:
    warnings = json.loads(text)
  except ValueError:
    raise ValueError(f"the Examples artifact at {examples.uri} has a "
                     f"{keys.EVAL_SPLIT_WARNINGS!r} property that is not JSON. "
                     f"Received: {text!r}") from None
  if not isinstance(warnings, list):
    raise ValueError(f"the Examples artifact at {examples.uri}: {keys.EVAL_SPLIT_WARNINGS!r} "
                     f"must be a JSON list of sentences. Received: {text!r}")
  return [str(w) for w in warnings]


def skip_missing_labels(config: EvaluatorConfig, history: run_history.RunHistory) -> bool:
  """Config ``skip_missing_labels``, else what the trainer did (its ``missing_labels``
  record names its policy; an older record: it skipped examples without a label only
  under its own ``skip_missing_labels``), else the trainer's default."""
  if config.skip_missing_labels is not None:
    return config.skip_missing_labels
  policy = (history.missing_labels or {}).get("policy")
  if policy in ("skip", "fail"):
    return policy == "skip"
  if int(history.skipped_examples or 0) > 0:
    return True
  return task_contract.SKIP_MISSING_LABELS


def non_negative_loss(history: run_history.RunHistory) -> bool:
  """Whether the run's training loss cannot be negative (divergence.py). A history
  without a ``loss`` record trained with a default loss (MSE or a cross-entropy)."""
  record = history.loss
  if not isinstance(record, dict) or not record.get("class"):
    return True
  return divergence.is_non_negative(str(record["class"]))


def read_true_parameters(examples: types.Artifact):
  """(true_weights list or None, true_bias float or None) of synthetic Examples; a bias
  of 0 is 0.0, locally and on Kubeflow (custom_properties.py)."""
  weights = None
  if examples.has_custom_property(keys.TRUE_WEIGHTS):
    weights = json.loads(custom_properties.value(examples, keys.TRUE_WEIGHTS))
  bias = custom_properties.number(examples, keys.TRUE_BIAS,
                                  f"Examples artifact at {examples.uri}")
  return weights, bias


def convergence_properties(curves: convergence.Curves, summary: convergence.Convergence,
                           history: run_history.RunHistory) -> Dict[str, P.Scalar]:
  """Properties from the history analysis (names in properties.py)."""
  out = {
      P.INITIAL_LOSS: summary.initial_loss,
      P.FINAL_LOSS: summary.final_loss,
      P.BEST_LOSS: summary.best_loss,
      P.TARGET_LOSS: summary.target_loss,
      P.STEPS_TO_TARGET: summary.steps_to_target,
      P.SECONDS_TO_TARGET: summary.seconds_to_target,
      P.CONVERGENCE_STATE: summary.state,
      P.CONVERGENCE_REASON: summary.reason,
      P.TRIVIAL_LOSS: summary.trivial_loss,
      P.LOSS_VS_TRIVIAL: summary.loss_vs_trivial,
      P.CONVERGENCE_RATE: summary.convergence_rate,
      P.TAIL_CHANGE: summary.tail_change,
      P.EVAL_LOSS_CHANGE: summary.eval_loss_change,
      P.EVAL_LOSS_TREND: summary.eval_loss_trend,
      P.EVAL_LOSS_TREND_SE: summary.eval_loss_trend_se,
      P.NUM_RECORDS: int(curves.step.size),
      P.LAST_STEP: int(curves.step[-1]),
      P.TOTAL_STEPS: int(curves.step[-1] if history.total_steps is None else history.total_steps),
      P.STOPPED_EARLY: bool(history.stopped_early),
      P.NUM_EPOCHS: len(curves.epochs),
  }
  for epoch in curves.epochs:
    out[f"{P.EPOCH_LOSS_PREFIX}{epoch['epoch']}"] = epoch["train_loss"]
    if epoch["eval_loss"] is not None:  # Measured in that epoch.
      out[f"{P.EPOCH_EVAL_LOSS_PREFIX}{epoch['epoch']}"] = epoch["eval_loss"]
  return out


def task_properties(info: task_lib.TaskInfo) -> Dict[str, P.Scalar]:
  out = {P.TASK: info.task, P.NUM_CLASSES: info.num_classes}
  if info.label_vocabulary is not None:
    out[P.LABEL_VOCABULARY] = json.dumps(list(info.label_vocabulary))
  return out


def quality_properties(quality: quality_lib.AnyQuality, split: str) -> Dict[str, P.Scalar]:
  """The task's quality properties (names and which task has which: properties.py)."""
  out = {P.EVAL_SPLIT: split, P.EVAL_EXAMPLES: quality.examples,
         P.EVAL_UNLABELLED: quality.unlabelled,
         P.EVAL_ACCURACY: quality.accuracy, P.EVAL_SECONDS: quality.seconds}
  if isinstance(quality, quality_lib.BinaryQuality):
    out.update({P.EVAL_AUC: quality.auc, P.EVAL_LOG_LOSS: quality.log_loss,
                P.EVAL_PRECISION: quality.precision, P.EVAL_RECALL: quality.recall,
                P.EVAL_POSITIVES: quality.positives})
  elif isinstance(quality, quality_lib.MulticlassQuality):
    out[P.EVAL_LOG_LOSS] = quality.log_loss
    for k, (accuracy, n) in enumerate(zip(quality.class_accuracy, quality.class_examples)):
      out[f"{P.EVAL_CLASS_ACCURACY_PREFIX}{k}"] = accuracy
      out[f"{P.EVAL_CLASS_EXAMPLES_PREFIX}{k}"] = n
  else:
    out.update({P.EVAL_MSE: quality.mse, P.EVAL_RMSE: quality.rmse, P.EVAL_MAE: quality.mae,
                P.EVAL_R2: quality.r2, P.LABEL_IS_BINARY: quality.label_is_binary,
                P.EVAL_AUC: quality.auc})
  return out


def mesh_string(mesh_shape: Optional[List[int]]) -> str:
  """[2, 2] -> "2x2"; None / [] -> ""."""
  return "x".join(str(int(d)) for d in mesh_shape) if mesh_shape else ""


def _or_unknown(value, kind):
  """``kind(value)``, or P.NOT_AVAILABLE when the history did not record it."""
  return P.NOT_AVAILABLE if value is None else kind(value)


def run_properties(history: run_history.RunHistory) -> Dict[str, P.Scalar]:
  """How the run was laid out, from history.json. Only a mesh layout has a mesh shape
  (the trainer records 1x1 for the others)."""
  devices = list(history.devices or [])
  layout = str(history.layout or "")
  return {
      P.LAYOUT: layout,
      P.MESH_SHAPE: mesh_string(history.mesh_shape) if layout == "mesh" else "",
      P.REPLICAS: _or_unknown(history.replicas, int),
      P.DEVICES: json.dumps(devices),
      P.NUM_DEVICES: len(devices),
      P.GLOBAL_BATCH_SIZE: _or_unknown(history.global_batch_size, int),
      P.MODEL_TYPE: str(history.model or ""),
      P.EXAMPLES_PER_SEC: _or_unknown(history.examples_per_sec, float),
      **what_ran(history),
      P.PARAM_COUNT: _or_unknown(history.param_count, int),
      P.PARAM_BYTES_TOTAL: _or_unknown(history.param_bytes_total, int),
      P.STATE_BYTES_PER_DEVICE: _or_unknown(history.state_bytes_per_device, int),
  }


def what_ran(history: run_history.RunHistory) -> Dict[str, P.Scalar]:
  """The optimizer, learning rate and loss the trainer built (history.json's
  ``optimizer_config`` / ``loss`` records, distributed_trainer/run/run_record.py)."""
  optimizer = history.optimizer_config or {}
  loss = history.loss if isinstance(history.loss, dict) else {}
  return {
      P.OPTIMIZER: str(optimizer.get("class") or history.optimizer or ""),
      P.OPTIMIZER_CONFIG: json.dumps(optimizer.get("config") or {}, sort_keys=True),
      P.LEARNING_RATE: json.dumps(optimizer.get("learning_rate")),
      P.LOSS: str(loss.get("class", "")),
      P.LOSS_CONFIG: json.dumps(loss.get("config") or {}, sort_keys=True),
      P.DIVERGED_REASON: str(history.diverged_reason or ""),
      P.LAYOUT_RULES: json.dumps(history.layout_rules or {}, sort_keys=True),
  }


def write_files(uri: str, scalars: Dict[str, P.Scalar], curves: Optional[Dict[str, Any]],
                title: str):
  """Writes ``metrics.json`` and, with a training history (``curves``), ``curves.json``
  and ``loss.png`` at the artifact URI."""
  fileio.makedirs(uri)
  io_utils.write_string_file(
      os.path.join(uri, P.METRICS_FILE_NAME),
      json.dumps({k: P.encode_json(v) for k, v in scalars.items()}, allow_nan=False,
                 sort_keys=True, indent=1))
  if curves is None:
    return
  io_utils.write_string_file(os.path.join(uri, P.CURVES_FILE_NAME),
                             json.dumps(curves, allow_nan=False))
  with fileio.open(os.path.join(uri, P.PLOT_FILE_NAME), "wb") as f:
    f.write(plots.loss_plot_png([("", curves)], title=title))


def class_metrics(quality: quality_lib.AnyQuality, info: task_lib.TaskInfo
                  ) -> Optional[Dict[str, Any]]:
  """A classifier's ``system.ClassificationMetrics`` metadata (report.classification);
  None for a regression."""
  if not isinstance(quality, (quality_lib.BinaryQuality, quality_lib.MulticlassQuality)):
    return None
  vocabulary = list(info.label_vocabulary or ())
  labels = (vocabulary if len(vocabulary) == len(quality.confusion)
            else [str(k) for k in range(len(quality.confusion))])
  roc = quality.roc if isinstance(quality, quality_lib.BinaryQuality) else ()
  return report.classification(labels, quality.confusion, dict(zip(
      ("thresholds", "recall", "false_positive_rate"), zip(*roc))) if roc else None)


def write_report(uri: str, scalars: Dict[str, P.Scalar], quality: quality_lib.AnyQuality,
                 info: task_lib.TaskInfo) -> None:
  """Writes ``report.html`` and ``kfp_metrics.json`` (the KFP UI's forms, which the KFP
  entry point records: kubeflow/ui_outputs.py) beside ``metrics.json``; the report shows
  ``baseline_comparison.json`` where the artifact has one."""
  curves_path = os.path.join(uri, P.CURVES_FILE_NAME)
  curves = (json.loads(io_utils.read_string_file(curves_path))
            if fileio.exists(curves_path) else None)
  comparison_path = os.path.join(uri, report.COMPARISON_FILE_NAME)
  comparison = (baseline_lib.from_json(io_utils.read_string_file(comparison_path))
                if fileio.exists(comparison_path) else None)
  classes = class_metrics(quality, info)
  io_utils.write_string_file(os.path.join(uri, report.REPORT_FILE_NAME), report.report_html(
      scalars, curves, comparison, classes))
  io_utils.write_string_file(os.path.join(uri, report.KFP_METRICS_FILE_NAME), json.dumps(
      {"metrics": report.kfp_metrics(scalars), "classification": classes},
      allow_nan=False, sort_keys=True))


def write_blessing(blessing: types.Artifact, model: types.Artifact, blessed: bool,
                   baseline: Optional[baseline_lib.BaselineModel] = None):
  """Marks the ModelBlessing as the stock Evaluator does (tfx 1.16.0
  components/evaluator/executor.py:302-337): ``current_model`` (URI) and
  ``current_model_id``, with a baseline ``baseline_model`` (URI) and
  ``baseline_model_id``, ``blessed`` 1/0 and the BLESSED / NOT_BLESSED file."""
  blessing.set_string_custom_property(P.BLESSING_CURRENT_MODEL_KEY, model.uri)
  blessing.set_int_custom_property(P.BLESSING_CURRENT_MODEL_ID_KEY, model.id)
  if baseline is not None:
    blessing.set_string_custom_property(P.BLESSING_BASELINE_MODEL_KEY, baseline.uri)
    blessing.set_int_custom_property(P.BLESSING_BASELINE_MODEL_ID_KEY, baseline.model_id)
  file_name = P.BLESSED_FILE_NAME if blessed else P.NOT_BLESSED_FILE_NAME
  io_utils.write_string_file(os.path.join(blessing.uri, file_name), "")
  blessing.set_int_custom_property(P.BLESSING_BLESSED_KEY,
                                   P.BLESSED_VALUE if blessed else P.NOT_BLESSED_VALUE)
