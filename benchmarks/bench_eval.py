"""ConvergenceEvaluator's quality evaluation vs the stock TFX Evaluator (TFMA).

Both evaluate the same exported linear model (the trainer's own export: a tf_keras
SavedModel whose ``serving_default`` parses serialized tf.Examples) on the same eval
split: gzip TFRecords of the seed problem with 8 features, written once under
benchmarks/_work/eval_data. Ours is ``convergence_evaluator.quality.evaluate`` (what
the executor runs for MSE/RMSE/MAE/R^2); the baseline is the stock
``tfx.components.Evaluator`` executor as ``tfma_stage.stock_evaluator`` configures it
(TFMA-native MeanSquaredError, MeanAbsoluteError, ExampleCount; DirectRunner defaults).
Each run is a fresh process, alternating ours / TFMA; only the evaluation call is
timed (imports and model loading before it are not; TFMA loads the model inside Do, our
``evaluate`` loads it inside too). Figure: eval rows / seconds. Both MSEs are printed
so a speed-up never hides a wrong answer.
"""
import argparse
import json
import os
import sys
import time
from typing import List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# tests/evaluator_fixtures.py builds the model (test-only helpers are not in the wheel).
sys.path.insert(1, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
import benchutil as bu  # noqa: E402

# 1M rows do not fit the 30-minute budget of `make bench` on 2 cores: the stock
# Evaluator runs at ~3k rows/s here (about 6 minutes per 1M-row run, x3 runs).
FULL_ROWS = 100_000
SMOKE_ROWS = 5_000


def sizes(smoke: bool) -> dict:
  return dict(rows=SMOKE_ROWS, reps=1) if smoke else dict(rows=FULL_ROWS, reps=3)


def prepare(rows: int):
  data = bu.write_tfrecords(bu.work_dir(f"eval_data_{rows}"), {"eval": rows, "train": 1000},
                            shards=4)
  model_uri = bu.work_dir("eval_model")
  serving = os.path.join(model_uri, "Format-Serving")
  if not os.path.exists(os.path.join(serving, "saved_model.pb")):
    bu.run_python([os.path.abspath(__file__), "--export", serving], timeout=300)
  return data, model_uri


def export_model(path: str):
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # An entry point: before TensorFlow is imported.
  import evaluator_fixtures as testing  # pylint: disable=g-import-not-at-top
  # Slightly off the true parameters, so the MSE is not just the noise.
  kernel = (np.asarray(bu.TRUE_WEIGHTS, np.float32) * 0.99).tolist()
  testing.export_linear_model(os.path.dirname(path.rstrip("/")), kernel, bu.TRUE_BIAS + 0.01,
                              bu.feature_keys())


def child(which: str, data: str, model_uri: str) -> dict:
  """Runs one evaluation in this process; returns {seconds, mse, examples}."""
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # An entry point: before TensorFlow is imported.
  from tfx.types import artifact_utils, standard_artifacts  # pylint: disable=g-import-not-at-top
  if which == "ours":
    from tfx_parallel.components.convergence_evaluator import quality  # pylint: disable=g-import-not-at-top
    start = time.perf_counter()
    q = quality.evaluate(os.path.join(model_uri, "Format-Serving"), data, "eval", "y",
                         batch_size=1024)
    return {"seconds": time.perf_counter() - start, "mse": q.mse, "examples": q.examples}
  import tempfile  # pylint: disable=g-import-not-at-top
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  from tfx import types  # pylint: disable=g-import-not-at-top
  from tfx.types import standard_component_specs as specs  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import tfma_stage  # pylint: disable=g-import-not-at-top
  examples = standard_artifacts.Examples()
  examples.uri = data
  examples.split_names = artifact_utils.encode_split_names(["eval", "train"])
  model = standard_artifacts.Model()
  model.uri = model_uri
  component = tfma_stage.stock_evaluator(types.Channel(type=standard_artifacts.Model),
                                         types.Channel(type=standard_artifacts.Examples), "y")
  out = tempfile.mkdtemp(dir=bu.work_dir("eval_tfma_out"))
  evaluation = standard_artifacts.ModelEvaluation()
  evaluation.uri = os.path.join(out, "evaluation")
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = os.path.join(out, "blessing")
  os.makedirs(evaluation.uri)
  os.makedirs(blessing.uri)
  start = time.perf_counter()
  component.executor_spec.executor_class().Do(
      {specs.EXAMPLES_KEY: [examples], specs.MODEL_KEY: [model]},
      {specs.EVALUATION_KEY: [evaluation], specs.BLESSING_KEY: [blessing]},
      dict(component.exec_properties))
  seconds = time.perf_counter() - start
  [result] = tfma.load_metrics(evaluation.uri)
  metrics = {kv.key.name: kv.value.double_value.value for kv in result.metric_keys_and_values}
  return {"seconds": seconds, "mse": metrics["mean_squared_error"],
          "examples": int(metrics["example_count"])}


def run(smoke: bool) -> List[dict]:
  sz = sizes(smoke)
  data, model_uri = prepare(sz["rows"])
  res = {"ours": [], "tfma": []}
  for rep in range(sz["reps"]):
    for which in ("ours", "tfma"):
      out = bu.run_python([os.path.abspath(__file__), "--child", which, "--data", data,
                           "--model", model_uri], timeout=900)
      r = bu.last_json_line(out["stdout"])
      r["process_s"] = out["seconds"]
      res[which].append(r)
      print(f"[bench_eval] rep {rep} {which}: {r['examples']:,} rows in {r['seconds']:.1f}s "
            f"(process {out['seconds']:.0f}s), mse {r['mse']:.6g}", flush=True)
  for which in res:
    if any(r["examples"] != sz["rows"] for r in res[which]):
      raise RuntimeError(f"{which} evaluated {[r['examples'] for r in res[which]]} rows, "
                         f"expected {sz['rows']}")
  mse_ours, mse_tfma = res["ours"][0]["mse"], res["tfma"][0]["mse"]
  rel = abs(mse_ours - mse_tfma) / max(abs(mse_tfma), 1e-30)
  return [bu.row(
      "eval", "quality (MSE/MAE/R2)",
      command="quality.evaluate(model, examples, 'eval', 'y', batch_size=1024)",
      data=f"{sz['rows']:,} eval rows x {bu.NUM_FEATURES} features, gzip TFRecord (4 shards)",
      baseline="stock tfx Evaluator executor (TFMA 0.47, tfma_stage config)",
      unit="eval rows/s (evaluation call only)",
      ours=[sz["rows"] / r["seconds"] for r in res["ours"]],
      base=[sz["rows"] / r["seconds"] for r in res["tfma"]], higher_is_better=True,
      target="evaluator >= 3x TFMA",
      notes=f"MSE ours {mse_ours:.6g} vs TFMA {mse_tfma:.6g} (rel diff {rel:.1e}); "
            f"process wall (incl. imports) ours {min(r['process_s'] for r in res['ours']):.0f}s"
            f", TFMA {min(r['process_s'] for r in res['tfma']):.0f}s (min)",
      extra={"ours_seconds": [r["seconds"] for r in res["ours"]],
             "tfma_seconds": [r["seconds"] for r in res["tfma"]]})]


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__)
  p.add_argument("--export")
  p.add_argument("--child", choices=("ours", "tfma"))
  p.add_argument("--data")
  p.add_argument("--model")
  p.add_argument("--smoke", action="store_true")
  a = p.parse_args()
  if a.export:
    export_model(a.export)
    return 0
  if a.child:
    print(json.dumps(child(a.child, a.data, a.model)))
    return 0
  for r in run(a.smoke):
    print(json.dumps(r))
  return 0


if __name__ == "__main__":
  sys.exit(main())
