"""End to end: the real LocalDagRunner pipeline with a SQLite ML Metadata store,
queried afterwards with the plain ml_metadata API."""
import json
import logging
import os
import re
import subprocess
import sys

import pytest

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.run import prestart
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import local_runner

COMPONENTS = ("PartitionedExampleGen", "DistributedTrainer", "ConvergenceEvaluator")


def _store(path):
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = path
  cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
  return metadata_store.MetadataStore(cfg)


def _executions(store):
  types = {t.id: t.name for t in store.get_execution_types()}
  return [(types[e.type_id], e) for e in store.get_executions()]


def _small_config(**trainer):
  return config_lib.PipelineConfig(
      pipeline_name="e2e",
      example_gen=ExampleGenConfig(rows=2000),
      trainer=TrainerConfig(**dict(dict(layout="single", epochs=3, learning_rate=0.1,
                                        optimizer="adam"), **trainer)))


@pytest.mark.slow
def test_local_pipeline_completes_then_is_served_from_cache(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger="absl")
  config = _small_config()
  path = local_runner.run(config, str(tmp_path))
  # The training process started with the run trained (prestart.py), not a new one.
  assert "Training in the process started early" in caplog.text
  assert "Starting training process" not in caplog.text
  store = _store(path)
  execs = _executions(store)
  by_type = {}
  for name, e in execs:
    by_type.setdefault(name.split(".")[-1], []).append(e)
  for component in COMPONENTS:
    matching = [k for k in by_type if component in k]
    assert matching, f"{component} has no execution: {sorted(by_type)}"
    for e in by_type[matching[0]]:
      assert e.last_known_state == metadata_store_pb2.Execution.COMPLETE, (component, e)
  for artifact in store.get_artifacts():
    assert artifact.state == metadata_store_pb2.Artifact.LIVE
    assert os.path.exists(artifact.uri), artifact.uri
  type_names = {t.name for t in store.get_artifact_types()}
  assert {"Examples", "Model", "TrainingHistory", "ConvergenceMetrics",
          "ModelBlessing"} <= type_names
  history_type = store.get_artifact_type("TrainingHistory").id
  [history] = [a for a in store.get_artifacts() if a.type_id == history_type]
  assert history.custom_properties["input_cache"].string_value == "memory"  # cache: auto
  n_artifacts = len(store.get_artifacts())

  # Second run, nothing changed: every component is served from cache.
  local_runner.run(config, str(tmp_path))
  store = _store(path)
  states = [e.last_known_state for _, e in _executions(store)[len(execs):]]
  assert len(states) == len(COMPONENTS)
  assert all(s == metadata_store_pb2.Execution.CACHED for s in states), states
  assert len(store.get_artifacts()) == n_artifacts
  assert prestart._held is None  # Its unused early process was stopped.  pylint: disable=protected-access


def test_bad_config_fails_before_any_component_runs(tmp_path):
  # A model axis that does not divide the model is the trainer's call, on the model that
  # will train, before its first step (tests/test_trainer_split_checks.py).
  config = _small_config(layout="ring")
  with pytest.raises(ConfigError) as err:
    local_runner.run(config, str(tmp_path))
  assert err.value.key == "trainer.layout" and "ring" in str(err.value)
  with pytest.raises(ConfigError) as err:
    local_runner.run(_small_config(steps=-1), str(tmp_path))
  assert err.value.key == "trainer.steps"
  with pytest.raises(ConfigError) as err:
    local_runner.run(_small_config(layout="mirrored", devices=2, batch_size=63), str(tmp_path))
  assert err.value.key == "trainer.batch_size"
  with pytest.raises(ConfigError, match="Received: 'disk'") as err:
    local_runner.run(_small_config(cache="disk"), str(tmp_path))
  assert err.value.key == "trainer.cache"
  assert not os.path.exists(tmp_path / config_lib.METADATA_FILE)


def _planned(layout, devices_flag=0, mesh=(1, 1), batch_size=TrainerConfig.batch_size):
  """What the trainer runs for ``device: auto`` on this machine (devices.plan): logical
  CPU devices here, the GPUs nvidia-smi lists (narrowed by CUDA_VISIBLE_DEVICES) on a GPU
  machine, so the expectations hold on both."""
  from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env  # pylint: disable=g-import-not-at-top
  listed = gpu_env.nvidia_smi_gpus() or []
  gpus = len([i for i in devices.parse_visible(os.environ.get("CUDA_VISIBLE_DEVICES"),
                                               len(listed)) if i.isdigit() and int(i) < len(listed)])
  return devices.plan(layout, devices_flag, mesh, "auto", gpus, batch_size)


@pytest.mark.slow
def test_cli_runs_each_layout_then_metrics_lists_them_from_mlmd(tmp_path):
  """`tfx-parallel run` with single, mirrored, a 2x2 mesh (`make run`'s default) and a 1x1
  mesh into one home, then `tfx-parallel metrics --json` lists the runs with their layouts
  and the bytes ML Metadata recorded: the 2x2 mesh splits the linear kernel by rows."""
  runs = {"single": ["--layout", "single"],
          "mirrored": ["--layout", "mirrored", "--devices", "2"],
          "mesh": ["--layout", "mesh", "--mesh", "2x2"],
          "mesh1x1": ["--layout", "mesh", "--mesh", "1x1"]}
  outputs = {}
  for name, flags in runs.items():
    layout = flags[1]
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_parallel.pipeline.cli", "run", "--home", str(tmp_path),
         "--pipeline-name", f"cli-{name}", "--rows", "2000", "--epochs", "4", *flags],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = outputs[name] = proc.stdout
    assert "summary (read from ML Metadata" in out
    assert re.search(rf"^layout     {layout}\b", out, re.M), out
    assert re.search(r"^eval       MSE \d", out, re.M) and "\nlearned    w=[" in out
    report = re.search(r"^report     (\S+/report\.html)  \(open in a browser\)$", out, re.M)
    with open(report.group(1)) as f:  # Beside metrics.json (report.py): this run's layout.
      page = f.read()
    assert f"<td>{layout}</td>" in page and "<svg" in page, report.group(1)
  # Issue 42: each run's log says how long its start-up took, and no run imported every
  # stock component or all of TFMA (pipeline/deferred_imports.py logs when it does).
  logs = sorted((tmp_path / "logs").glob("cli-*.log"))
  assert len(logs) == len(runs), logs
  for log in logs:
    text = log.read_text()
    assert re.search(r"Start-up: \d+\.\d s from process start to the first component "
                     r"\(PartitionedExampleGen\)", text), (log, text[-3000:])
    assert "Importing all of" not in text, log
  # The printed layout line says how each variable is split.
  assert re.search(r"layout mesh .* variables: linear/kernel \[2, 1\] rows -> \[1, 1\] per "
                   r"device, linear/bias \[1\] replicated", outputs["mesh"]), outputs["mesh"]
  assert "linear/kernel [2, 1] replicated" in outputs["mesh1x1"], outputs["mesh1x1"]
  proc = subprocess.run(
      [sys.executable, "-m", "tfx_parallel.pipeline.cli", "metrics", "--home", str(tmp_path),
       "--json"], capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = json.loads(proc.stdout)
  layouts = {r["pipeline"]: r for r in rows}
  assert set(layouts) == {f"cli-{name}" for name in runs}, proc.stdout[-2000:]
  for name, flags in runs.items():
    assert layouts[f"cli-{name}"]["properties"]["layout"] == flags[1]
  mirrored, mesh = _planned("mirrored", 2), _planned("mesh", 0, (2, 2))  # 2, 2x2 on CPU.
  mesh_text = f"{mesh.mesh[0]}x{mesh.mesh[1]}"
  assert layouts["cli-mesh"]["properties"]["mesh_shape"] == mesh_text
  assert layouts["cli-mirrored"]["properties"]["replicas"] == mirrored.devices
  assert layouts["cli-mirrored"]["properties"]["mesh_shape"] == ""  # not the trainer's 1x1
  # Adam: (param + grad + 2 slots) x (kernel rows per device + bias) x 4 B + the step
  # counter + two blocks of the largest variable in transit. 2x2: one of the 2 kernel rows
  # per device (4 B, as the bias); 1x1: both (8 B).
  state = {name: layouts[f"cli-{name}"]["properties"]["state_bytes_per_device"]
           for name in runs}
  assert state["mesh"] == 4 * (1 + 1) * 4 + 8 + 2 * 4 < state["mesh1x1"] == (
      4 * (2 + 1) * 4 + 8 + 2 * 8)
  assert state["mesh1x1"] == state["single"]
  proc = subprocess.run(
      [sys.executable, "-m", "tfx_parallel.pipeline.cli", "metrics", "--home", str(tmp_path)],
      capture_output=True, text=True, timeout=300)
  # The table, then a blank line and the "Columns:" legend (#47 item 8).
  table, legend = proc.stdout.split("\n\nColumns:\n", 1)
  table = table.splitlines()
  assert len(table) == 5, proc.stdout  # a header and one row per run
  assert table[0].split()[:7] == ["pipeline", "run", "data", "label", "task", "layout",
                                  "replicas"], proc.stdout
  # Cut each row at the header's column starts ("mirrored x2" is one cell of two words).
  starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", table[0])]
  cells = [[line[a:b].strip() for a, b in zip(starts[2:7], starts[3:8])] for line in table[1:]]
  assert cells == [
      ["synthetic", "y", "regression", "single", "1"],
      ["synthetic", "y", "regression", f"mirrored x{mirrored.devices}",
       str(mirrored.devices)],
      ["synthetic", "y", "regression", f"mesh {mesh_text}", str(mesh.mesh[0])],
      ["synthetic", "y", "regression", "mesh 1x1", "1"]], proc.stdout
  assert re.search(r"^  data +the data the run trained on", legend, re.M), legend


@pytest.mark.slow
def test_cli_rejects_bad_mesh_with_the_key(tmp_path):
  """The built-in linear model's 2 features on a model axis of 3: the trainer refuses it
  before training (after the ingest), exit 2 naming the key."""
  proc = subprocess.run(
      [sys.executable, "-m", "tfx_parallel.pipeline.cli", "run", "--home", str(tmp_path),
       "--layout", "mesh", "--mesh", "1x3"], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert "trainer.mesh" in proc.stderr


@pytest.mark.slow
def test_taxi_demo_ends_blessed_and_its_state_follows_the_eval_loss(tmp_path):
  """`tfx-parallel run --data taxi --layout mirrored --devices 2` (the README's real-data
  demo): blessed on eval R2, "improving" while its eval loss still falls, else
  "converged" (its R2 is far above the trivial predictor's 0)."""
  proc = subprocess.run(
      [sys.executable, "-m", "tfx_parallel.pipeline.cli", "run", "--home", str(tmp_path),
       "--data", "taxi", "--layout", "mirrored", "--devices", "2"],
      capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "\nblessed    True\n" in proc.stdout, proc.stdout[-2000:]
  found = re.search(r"/ConvergenceEvaluator/metrics/\d+", proc.stdout)
  with open(os.path.join(str(tmp_path), "pipelines", "tfx-parallel") + found.group(0)
            + "/metrics.json") as f:
    metrics = json.load(f)
  assert metrics["eval_r2"] >= config_lib.TAXI_MIN_R2, metrics["eval_r2"]
  falling = metrics["eval_loss_change"] < -0.02  # EvaluatorConfig.plateau_tolerance
  assert metrics["convergence_state"] == ("improving" if falling else "converged"), metrics
