"""The drop-in pipeline of docs/stock-tfx.md, extracted at test time and run as a user
runs it: ``python pipeline.py`` in a directory holding ``data/*.csv`` and ``model.py``
(issue 31, case 8). Below it, the README's whole loop (issue 50, item 6), run as written
twice on one ML Metadata store. One run; its console is checked for case 7 (a Python pipeline that
exits 0 ends without TF's AtomicFunction teardown errors or TFX's property-predicate
warnings, with ``tfxp.quiet()``).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

import test_stock_pipeline as stock

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "docs", "stock-tfx.md")
MARKER = "<!-- drop-in pipeline: run by tests/test_readme.py -->"


def drop_in_code(readme: str = README, marker: str = MARKER) -> str:
  """The ```python block right after ``marker`` in ``readme`` (docs/stock-tfx.md)."""
  with open(readme, encoding="utf-8") as f:
    text = f.read()
  name = os.path.relpath(readme, os.path.join(HERE, ".."))
  assert marker in text, f"{name} lost its marker {marker!r}"
  match = re.match(r"\s*```python\n(.*?)\n```", text.split(marker, 1)[1], re.S)
  assert match, f"{name}: no ```python block right after the marker"
  return match.group(1)


def test_the_drop_in_block_has_every_import_it_uses():
  code = drop_in_code()
  for needed in ("PartitionedExampleGen", "ExampleGenConfig(", "tfx.components.StatisticsGen",
                 "tfx.components.SchemaGen", "DistributedTrainer(", "ConvergenceEvaluator(",
                 "tfx.components.Evaluator(", "tfx.components.Pusher(",
                 'prediction_key="probabilities"', "import tensorflow_model_analysis as tfma"):
    assert needed in code, needed
  compile(code, "docs/stock-tfx.md", "exec")


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
  root = tmp_path_factory.mktemp("readme")
  stock.write_taxi_csv(str(root / "data" / "taxi.csv"), rows=600)
  shutil.copy(os.path.join(HERE, "..", "examples", "taxi_model.py"), root / "model.py")
  (root / "pipeline.py").write_text(drop_in_code())
  proc = subprocess.run([sys.executable, "pipeline.py"], cwd=str(root), capture_output=True,
                        text=True, timeout=1500)
  return root, proc


@pytest.mark.slow
def test_the_readme_pipeline_runs_as_written_and_pushes(readme_run):
  root, proc = readme_run
  assert proc.returncode == 0, proc.stderr[-5000:]
  from tfx_parallel.pipeline import summary  # pylint: disable=g-import-not-at-top
  store = summary.open_store(str(root / "metadata.sqlite"))
  states = {e.id: e.last_known_state for e in store.get_executions()}
  assert len(states) == 7 and set(states.values()) == {3}, states  # 3 = COMPLETE
  evaluation = [a for a in store.get_artifacts_by_type("ModelEvaluation")]
  assert evaluation, "the stock Evaluator wrote no evaluation"


# What the README's Python pipeline may print (issue 38, item 9): the lines of
# `tfx-parallel run`'s console -- the first line, one start / end line per component,
# the trainer's lines, the summary -- and warnings and errors logged by name. Anything
# else (TF's C++ notes, google.api_core's FutureWarnings, INFO logs: 75-86 stderr lines
# with quiet() before issue 38) fails the test.
PROJECT_LINE = re.compile(
    r"^(tfx-parallel: |\[\d+/\d+\] \w+: |\[(trainer|evaluator|example_gen)\] |"
    r"=== tfx-parallel summary |"
    r"(layout|training|eval|labels|learned|blessed|model|metrics|report|log) +\S)")
WARNING_LINE = re.compile(r"^(WARNING|ERROR):[\w.]+:")


@pytest.mark.slow
def test_a_python_pipeline_prints_the_project_lines_and_its_verdict(readme_run):
  _, proc = readme_run
  assert proc.returncode == 0, proc.stderr[-5000:]
  lines = (proc.stdout + proc.stderr).splitlines()
  noise = [line for line in lines if not (PROJECT_LINE.match(line) or WARNING_LINE.match(line))]
  assert not noise, f"{len(noise)} of {len(lines)} lines are noise:\n" + "\n".join(noise[:60])
  warnings = [line for line in lines if WARNING_LINE.match(line)]
  assert len(warnings) <= 3, warnings  # Real warnings are few; a flood is noise.
  out = proc.stdout.splitlines()
  assert out[0].startswith("tfx-parallel: pipeline my-pipeline, 7 components; log: logs/")
  for i, name in enumerate(["PartitionedExampleGen", "StatisticsGen", "SchemaGen",
                            "DistributedTrainer", "ConvergenceEvaluator", "Evaluator",
                            "Pusher"]):
    assert any(re.match(rf"\[\d/7\] {name}: done in ", line) for line in out), name
  verdict = [line for line in out if re.match(r"\[\d/7\] ConvergenceEvaluator: done", line)]
  assert re.search(r": (converged|overfitting|improving|plateaued|stalled|diverged), eval "
                   r"accuracy \S+", verdict[0])
  summary = out[out.index(next(l for l in out if l.startswith("=== tfx-parallel summary"))):]
  assert [l.split()[0] for l in summary[1:]] == [
      "layout", "training", "labels", "eval", "blessed", "model", "metrics", "report",
      "log"], summary


@pytest.mark.slow
def test_a_quiet_python_pipeline_ends_without_teardown_noise(readme_run):
  """Issue 31, case 7: no "Exception ignored in: <function AtomicFunction.__del__", no
  "property_predicate is not supported", no "is not a valid node name"."""
  _, proc = readme_run
  assert proc.returncode == 0
  console = proc.stdout + proc.stderr
  for noise in ("Exception ignored in", "AtomicFunction.__del__",
                "property_predicate is not supported", "is not a valid node name",
                "Traceback"):
    assert noise not in console, console[-5000:]


def _write_shape_csv(path: str, shape: str, rows: int = 600, seed: int = 3):
  """A binary-label CSV of another shape than the taxi file: ``numeric`` (three float
  columns) or ``two_value_string`` (#47: a 2-value string column, which
  examples/taxi_model.py once embedded 5 wide, and the default mesh could not split)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    if shape == "numeric":
      f.write("a,b,c,label\n")
      for _ in range(rows):
        a, b, c = rng.normal(size=3)
        f.write(f"{a:.4f},{b:.4f},{c:.4f},{int(a + 0.5 * b + 0.3 * rng.normal() > 0)}\n")
    else:
      f.write("sex,age,fare,label\n")
      for _ in range(rows):
        sex = rng.choice(["male", "female"])
        age, fare = rng.uniform(1, 80), rng.exponential(30)
        p = 0.75 if sex == "female" else 0.2
        f.write(f"{sex},{age:.0f},{fare:.2f},{int(rng.random() < p)}\n")


@pytest.fixture(scope="module")
def shape_runs(tmp_path_factory):
  """The drop-in block, as written but for its LABEL, on two more CSV shapes (the taxi
  shape is :func:`readme_run`'s), each run as a user runs it."""
  runs = {}
  for shape in ("numeric", "two_value_string"):
    root = tmp_path_factory.mktemp(shape)
    _write_shape_csv(str(root / "data" / "data.csv"), shape)
    shutil.copy(os.path.join(HERE, "..", "examples", "taxi_model.py"), root / "model.py")
    code = drop_in_code()
    assert 'LABEL = "big_tipper"' in code
    (root / "pipeline.py").write_text(code.replace('LABEL = "big_tipper"', 'LABEL = "label"'))
    runs[shape] = (root, subprocess.run([sys.executable, "pipeline.py"], cwd=str(root),
                                        capture_output=True, text=True, timeout=1500))
  return runs


@pytest.mark.slow
def test_the_drop_in_block_trains_on_three_csv_shapes_on_its_default_mesh(readme_run,
                                                                         shape_runs):
  """#47: the drop-in pipeline (mesh 2x2, examples/taxi_model.py) failed on ordinary
  CSVs. It runs on the taxi shape (strings of many values), numeric columns only, and a
  2-value string column; the model beats the trivial predictor on each."""
  from tfx_parallel.components.convergence_evaluator import properties as P  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import summary  # pylint: disable=g-import-not-at-top
  for shape, (root, proc) in [("taxi", readme_run)] + sorted(shape_runs.items()):
    assert proc.returncode == 0, (shape, proc.stderr[-5000:])
    store = summary.open_store(str(root / "metadata.sqlite"))
    states = {e.id: e.last_known_state for e in store.get_executions()}
    assert len(states) == 7 and set(states.values()) == {3}, (shape, states)
    metrics = store.get_artifacts_by_type("ConvergenceMetrics")[-1]
    props = P.read_properties(metrics.custom_properties)
    assert props[P.LAYOUT] == "mesh" and props[P.MESH_SHAPE] == "2x2", shape
    assert props[P.LOSS_VS_TRIVIAL] < 1.0, (shape, props[P.CONVERGENCE_REASON])


# --- The README's whole loop (issue 50, item 6) -----------------------------------------
# ExampleGen -> StatisticsGen -> SchemaGen -> Transform -> Tuner -> DistributedTrainer
# (hyperparameters, transform_graph, base_model from a latest-model Resolver) ->
# ConvergenceEvaluator (baseline: latest_blessed) -> Pusher, run twice on one store.

ROOT_README = os.path.join(HERE, "..", "README.md")
LOOP_MARKER = "<!-- whole loop: run by tests/test_readme.py -->"
LOOP_RUNS = 2
LOOP_COMPONENTS = {"PartitionedExampleGen", "StatisticsGen", "SchemaGen", "Transform", "Tuner",
                   "DistributedTrainer", "ConvergenceEvaluator", "Pusher"}


def test_the_whole_loop_block_wires_every_component():
  code = drop_in_code(ROOT_README, LOOP_MARKER)
  for needed in ("tfx.components.Transform(", "tfx.components.Tuner(", "tfx.dsl.Resolver(",
                 'hyperparameters=tuner.outputs["best_hyperparameters"]',
                 'transform_graph=transform.outputs["transform_graph"]',
                 'baseline="latest_blessed"', 'model_blessing=evaluator.outputs["blessing"]',
                 ".to_csv("):
    assert needed in code, needed
  compile(code, "README.md", "exec")


def _node_of(store, execution_id):
  """The pipeline node id of an execution (its ``node`` context: <pipeline>.<node id>)."""
  [node] = [c for c in store.get_contexts_by_execution(execution_id)
            if c.name.startswith("breast-cancer.")]
  return node.name.split(".", 1)[1]


@pytest.fixture(scope="module")
def loop_runs(tmp_path_factory):
  """Runs the block as written twice, as a user runs it (``python pipeline.py`` in a
  directory holding examples/breast_cancer.py), on one ML Metadata store. The first run
  builds and installs the module's wheels as a user's does; the second imports the
  module from its file (test_stock_pipeline.NO_WHEELS): the same code, without
  rebuilding and reinstalling the same wheels. Returns (root, [proc per run], store)."""
  root = tmp_path_factory.mktemp("loop")
  (root / "examples").mkdir()
  shutil.copy(os.path.join(HERE, "..", "examples", "breast_cancer.py"), root / "examples")
  (root / "pipeline.py").write_text(drop_in_code(ROOT_README, LOOP_MARKER))
  procs = []
  for run in range(LOOP_RUNS):
    procs.append(subprocess.run([sys.executable, "pipeline.py"], cwd=str(root),
                                capture_output=True, text=True, timeout=1500,
                                env=dict(os.environ, **(stock.NO_WHEELS if run else {}))))
    assert procs[-1].returncode == 0, procs[-1].stdout[-3000:] + procs[-1].stderr[-5000:]
  from tfx_parallel.pipeline import summary  # pylint: disable=g-import-not-at-top
  return root, procs, summary.open_store(str(root / "metadata.sqlite"))


def _by_run(store, type_name):
  """The runs' artifacts of ``type_name``, in run order (ids grow with the runs)."""
  found = sorted(store.get_artifacts_by_type(type_name), key=lambda a: a.id)
  assert len(found) == LOOP_RUNS, (type_name, [a.uri for a in found])
  return found


@pytest.mark.slow
def test_the_whole_loop_runs_every_component_each_time(loop_runs):
  root, _, store = loop_runs
  runs = store.get_contexts_by_type("pipeline_run")
  assert len(runs) == LOOP_RUNS
  for run in runs:
    done = {_node_of(store, e.id) for e in store.get_executions_by_context(run.id)
            if e.last_known_state == 3}  # 3 = COMPLETE
    assert LOOP_COMPONENTS <= done, (run.name, done)
  # The first run took the user's path: Transform's and Tuner's module built as wheels.
  wheels = os.listdir(root / "pipeline_root" / "_wheels")
  assert {w.split("-")[0] for w in wheels} == {"tfx_user_code_transform",
                                               "tfx_user_code_tuner"}, wheels


@pytest.mark.slow
def test_the_tuners_hyperparameters_reach_the_trainers_record(loop_runs):
  import json  # pylint: disable=g-import-not-at-top
  root, _, store = loop_runs
  for best, history in zip(_by_run(store, "HyperParameters"),
                           _by_run(store, "TrainingHistory")):
    # The block's pipeline_root is relative: so are the URIs, to where it ran.
    with open(os.path.join(root, best.uri, "best_hyperparameters.txt")) as f:
      tuned = json.load(f)["values"]
    assert set(tuned) == {"learning_rate"}
    assert json.loads(history.custom_properties["hparams"].string_value) == tuned
    assert history.custom_properties["hyperparameters_uri"].string_value == best.uri


@pytest.mark.slow
def test_the_second_run_warm_starts_from_and_is_compared_with_the_first(loop_runs):
  import json  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.convergence_evaluator import baseline  # pylint: disable=g-import-not-at-top
  root, _, store = loop_runs
  first_model, second_model = _by_run(store, "Model")
  first_metrics, second_metrics = _by_run(store, "ConvergenceMetrics")
  first_history, second_history = _by_run(store, "TrainingHistory")
  assert baseline.BASELINE_URI not in first_metrics.custom_properties
  assert "warm_start" not in first_history.custom_properties
  assert second_metrics.custom_properties[baseline.BASELINE_URI].string_value == (
      first_model.uri) != second_model.uri
  with open(os.path.join(root, second_metrics.uri, baseline.FILE_NAME)) as f:
    comparison = json.load(f)
  assert comparison["baseline_source"] == "latest_blessed"
  assert comparison["baseline_uri"] == first_model.uri
  warm = json.loads(second_history.custom_properties["warm_start"].string_value)
  assert warm == {"source": os.path.join(first_model.uri, "Format-Serving"), "loaded": 4,
                  "skipped": 0, "skipped_names": [], "partial": False}, warm
  # The untrained eval loss of the warm run is the first run's trained one (same rows,
  # same Transform statistics).
  with open(os.path.join(root, first_history.uri, "history.json")) as f:
    base = json.load(f)
  with open(os.path.join(root, second_history.uri, "history.json")) as f:
    warmed = json.load(f)
  ended = base["epochs"][-1]["eval_loss"] if base["epochs"] else base["records"][-1]["loss"]
  assert warmed["initial_eval_loss"] == pytest.approx(ended, rel=0.05)
  assert warmed["initial_eval_loss"] < base["initial_eval_loss"]


@pytest.mark.slow
def test_the_pusher_pushes_the_blessed_models_only(loop_runs):
  root, _, store = loop_runs
  blessed = [b.custom_properties["blessed"].int_value for b in _by_run(store, "ModelBlessing")]
  pushed = [p.custom_properties["pushed"].int_value for p in _by_run(store, "PushedModel")]
  assert blessed[0] == 1, "the first run must be blessed to be the second's baseline"
  assert pushed == blessed
  assert len(os.listdir(root / "serving")) == sum(blessed)
