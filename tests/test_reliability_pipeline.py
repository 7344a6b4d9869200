"""Reliability of the whole pipeline: real faults and bad inputs, no mocks.

* ExampleGen SIGKILLed mid-write, then rerun (slow);
* two runs at the same time on one SQLite ML Metadata store (slow);
* config and input errors rejected before any directory or MLMD store exists;
* safety: nothing unpickles or evals user data, the image runs as non-root, paths from
  config are checked.

"Consistent store" (``assert_store_consistent``): every execution is in a final state
(COMPLETE, CACHED, FAILED, CANCELED) except the ones this test killed, which stay RUNNING
and have no output events; every LIVE artifact is the output of a COMPLETE or CACHED
execution and its files exist; every LIVE Examples artifact holds all of its shards with
exactly the rows its ``row_counts`` property says. See docs/reliability.md.
"""
import glob
import gzip
import json
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import local_runner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Execution = metadata_store_pb2.Execution
Artifact = metadata_store_pb2.Artifact
Event = metadata_store_pb2.Event
FINAL_STATES = (Execution.COMPLETE, Execution.CACHED, Execution.FAILED, Execution.CANCELED)
PUBLISHED_STATES = (Execution.COMPLETE, Execution.CACHED)


# ----------------------------------------------------------------------------- helpers


def open_store(path: str) -> metadata_store.MetadataStore:
  cfg = metadata_store_pb2.ConnectionConfig()
  cfg.sqlite.filename_uri = path
  cfg.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
  return metadata_store.MetadataStore(cfg)


def count_tfrecords(path: str) -> int:
  """Records in a gzip TFRecord file, by its framing (raises on a truncated file)."""
  with gzip.open(path, "rb") as f:
    data = f.read()
  i = n = 0
  while i < len(data):
    (length,) = struct.unpack_from("<Q", data, i)
    i += 8 + 4 + length + 4
    if i > len(data):
      raise ValueError(f"{path}: truncated record {n}")
    n += 1
  return n


def _prop(artifact, name):
  v = artifact.custom_properties[name]
  return getattr(v, v.WhichOneof("value"))


def check_examples_complete(artifact) -> None:
  """All splits, all shards, exactly the recorded rows, no staging leftovers."""
  counts = json.loads(_prop(artifact, "row_counts"))
  shards = int(_prop(artifact, "num_shards"))
  assert not glob.glob(os.path.join(artifact.uri, ".staging-*")), artifact.uri
  for split, rows in counts.items():
    files = sorted(glob.glob(os.path.join(artifact.uri, f"Split-{split}", "*")))
    assert len(files) == shards, (artifact.uri, split, files)
    assert sum(count_tfrecords(f) for f in files) == rows, (artifact.uri, split)


def assert_store_consistent(path: str, killed=()):
  """See the module docstring. ``killed``: ids of executions a test SIGKILLed.

  Returns (executions by state name, number of LIVE artifacts).
  """
  store = open_store(path)
  states = {}
  executions = {e.id: e for e in store.get_executions()}
  for e in executions.values():
    states.setdefault(Execution.State.Name(e.last_known_state), []).append(e.id)
    if e.id in killed:
      assert e.last_known_state == Execution.RUNNING, e
    else:
      assert e.last_known_state in FINAL_STATES, e
  events = store.get_events_by_execution_ids(list(executions))
  for event in events:
    if event.execution_id in killed:
      assert event.type not in (Event.OUTPUT, Event.DECLARED_OUTPUT), event
  outputs_of = {}
  for event in events:
    if event.type in (Event.OUTPUT, Event.DECLARED_OUTPUT):
      outputs_of.setdefault(event.artifact_id, []).append(event.execution_id)
  types = {t.id: t.name for t in store.get_artifact_types()}
  live = 0
  for artifact in store.get_artifacts():
    assert artifact.state == Artifact.LIVE, artifact  # nothing PENDING / abandoned
    live += 1
    producers = [executions[i] for i in outputs_of.get(artifact.id, [])]
    assert any(p.last_known_state in PUBLISHED_STATES for p in producers), (
        f"orphaned LIVE artifact {artifact.id} {types[artifact.type_id]} {artifact.uri}")
    assert os.path.exists(artifact.uri), artifact.uri
    if types[artifact.type_id] == "Examples":
      check_examples_complete(artifact)
  return states, live


# ----------------------------------------------------------------------------- config errors


def _csv(path, header="a,b,y", rows=20):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    f.write(header + "\n")
    columns = header.count(",") + 1
    f.writelines(",".join(str(i * (c + 1)) for c in range(columns)) + "\n"
                 for i in range(rows))
  return str(path)


def _pipeline(source="synthetic", label=None, pipeline_name="rel", **trainer):
  return config_lib.PipelineConfig(
      pipeline_name=pipeline_name,
      example_gen=ExampleGenConfig(source=source, label=label, rows=1000),
      trainer=TrainerConfig(**dict(dict(layout="single", epochs=1), **trainer)))


def _bad_inputs(tmp):
  """name -> (config, expected key, regex the message must match)."""
  data = tmp / "data"
  good = _csv(data / "good.csv")
  no_label = _csv(data / "nolabel.csv", header="a,b,z")
  os.makedirs(data / "dir.csv")
  with open(data / "corrupt.csv.gz", "wb") as f:
    f.write(b"this is not gzip data\n" * 4)
  _csv(data / "parts" / "p0.csv")
  _csv(data / "parts" / "p1.csv", header="a,c,y")
  return {
      "missing_label_column": (_pipeline(no_label, "y"), "example_gen.label",
                               r"nolabel\.csv:1: label column 'y' not in the header"),
      "nonexistent_csv_glob": (_pipeline(str(data / "missing-*.csv"), "y"),
                               "example_gen.source", r"no files match .*missing-\*\.csv"),
      "nonexistent_csv_file": (_pipeline(str(data / "nope.csv"), "y"),
                               "example_gen.source", r"no files match .*nope\.csv"),
      "input_is_a_directory": (_pipeline(str(data / "dir.csv"), "y"),
                               "example_gen.source", r"cannot read .*IsADirectoryError"),
      "corrupt_gzip_csv": (_pipeline(str(data / "corrupt.csv.gz"), "y"),
                           "example_gen.source", r"cannot read .*corrupt\.csv\.gz"),
      "second_file_other_header": (_pipeline(str(data / "parts" / "*.csv"), "y"),
                                   "example_gen.source",
                                   r"p1\.csv:1: header \['a', 'c', 'y'\] differs"),
      "batch_not_divisible_by_mesh_replicas": (
          _pipeline(good, "y", layout="mesh", mesh=(3, 1)), "trainer.batch_size",
          r"global batch 64 is not divisible by the 3 replicas"),
      "unknown_layout": (_pipeline(layout="pipeline_parallel"), "trainer.layout",
                         r"unknown layout 'pipeline_parallel'"),
      "negative_steps": (_pipeline(steps=-5), "trainer.steps", r"steps=-5"),
      "zero_workers": (_pipeline(layout="multi_worker", workers=0), "trainer.workers",
                       r"workers=0"),
      "pipeline_name_dotdot": (_pipeline(pipeline_name=".."), "pipeline_name", r"'\.\.'"),
      "pipeline_name_dot": (_pipeline(pipeline_name="."), "pipeline_name", r"'\.'"),
      "pipeline_name_slash": (_pipeline(pipeline_name="../escape"), "pipeline_name",
                              r"'\.\./escape'"),
      "pipeline_name_empty": (_pipeline(pipeline_name=""), "pipeline_name", r"''"),
  }


BAD_INPUT_CASES = [  # the keys of _bad_inputs (which needs tmp_path to build them)
    "missing_label_column", "nonexistent_csv_glob", "nonexistent_csv_file",
    "input_is_a_directory", "corrupt_gzip_csv", "second_file_other_header",
    "batch_not_divisible_by_mesh_replicas",
    "unknown_layout", "negative_steps", "zero_workers", "pipeline_name_dotdot",
    "pipeline_name_dot", "pipeline_name_slash", "pipeline_name_empty"]


@pytest.mark.parametrize("case", BAD_INPUT_CASES)
def test_config_and_input_errors_fail_before_any_work_naming_the_key(tmp_path, case):
  cases = _bad_inputs(tmp_path)
  assert sorted(cases) == sorted(BAD_INPUT_CASES)
  config, key, message = cases[case]
  home = tmp_path / "home"
  with pytest.raises(ConfigError) as err:
    local_runner.run(config, str(home))
  assert err.value.key == key, err.value
  assert re.search(message, str(err.value)), err.value
  assert not home.exists()  # no ML Metadata store, no pipeline root: nothing ran


def test_good_csv_passes_the_input_check(tmp_path):
  config = _pipeline(_csv(tmp_path / "d" / "a.csv"), "y", layout="mesh", mesh=(2, 2))
  assert config.validate().check_inputs() is config  # 2 features, model axis 2


def test_home_that_is_a_file_is_rejected_before_any_work(tmp_path):
  home = tmp_path / "home"
  home.write_text("not a directory")
  with pytest.raises(ConfigError) as err:
    local_runner.run(_pipeline(), str(home / "sub"))
  assert err.value.key == "home" and "is not a directory" in str(err.value)
  assert home.read_text() == "not a directory"


@pytest.mark.parametrize("name", ["tfx-parallel", "e2e", "run_1.v2", "A"])
def test_ordinary_pipeline_names_are_accepted(name):
  _pipeline(pipeline_name=name).validate()


# ----------------------------------------------------------------------------- safety

# Calls that can run code hidden in data: unpickling, eval/exec, unsafe YAML, shells.
_UNSAFE_CALLS = {
    ("pickle", "load"), ("pickle", "loads"), ("dill", "load"), ("dill", "loads"),
    ("cloudpickle", "load"), ("cloudpickle", "loads"), ("marshal", "load"),
    ("marshal", "loads"), ("shelve", "open"), ("joblib", "load"), ("yaml", "unsafe_load"),
    ("yaml", "full_load"), ("yaml", "load_all"), ("pd", "read_pickle"),
    ("pandas", "read_pickle"), ("os", "system"), ("os", "popen"), ("torch", "load"),
}
_SOURCE_DIRS = ("pipeline", "components", "kubeflow", "benchmarks")


def _python_files():
  for top in _SOURCE_DIRS:
    for root, dirs, files in os.walk(os.path.join(REPO, top)):
      dirs[:] = [d for d in dirs if not d.startswith((".", "_work", "__pycache__"))]
      for name in files:
        if name.endswith(".py"):
          yield os.path.join(root, name)


def _unsafe_calls(path):
  import ast  # pylint: disable=g-import-not-at-top
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read(), path)
  found = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    func = node.func
    kwargs = {k.arg: k.value for k in node.keywords}
    where = f"{os.path.relpath(path, REPO)}:{node.lineno}"
    if isinstance(func, ast.Name) and func.id in ("eval", "exec"):
      found.append(f"{where}: {func.id}(")
    if not isinstance(func, ast.Attribute):
      continue
    owner = func.value.id if isinstance(func.value, ast.Name) else None
    if (owner, func.attr) in _UNSAFE_CALLS:
      found.append(f"{where}: {owner}.{func.attr}(")
    if owner == "yaml" and func.attr == "load":
      loader = kwargs.get("Loader", node.args[1] if len(node.args) > 1 else None)
      if not (isinstance(loader, ast.Attribute) and loader.attr in ("SafeLoader", "CSafeLoader")):
        found.append(f"{where}: yaml.load without SafeLoader")
    if owner in ("np", "numpy") and func.attr == "load":
      allow = kwargs.get("allow_pickle")
      if not (isinstance(allow, ast.Constant) and allow.value is False):
        found.append(f"{where}: np.load without allow_pickle=False")
    if "shell" in kwargs and not (isinstance(kwargs["shell"], ast.Constant)
                                  and kwargs["shell"].value is False):
      found.append(f"{where}: {func.attr}(shell=...)")
  return found


def test_no_code_unpickles_evals_or_shells_out_on_data():
  files = list(_python_files())
  assert len(files) > 40, files  # the scan really saw the code base
  found = [hit for path in files for hit in _unsafe_calls(path)]
  assert not found, found


def test_the_scan_catches_what_it_looks_for(tmp_path):
  bad = tmp_path / "bad.py"
  bad.write_text(textwrap.dedent("""
      import pickle, yaml, numpy as np, subprocess
      pickle.loads(b"")
      yaml.load(open("c.yaml"))
      yaml.load(open("c.yaml"), Loader=yaml.SafeLoader)
      np.load("w.npz")
      np.load("w.npz", allow_pickle=False)
      eval("1 + 1")
      subprocess.run("ls", shell=True)
      """))
  found = _unsafe_calls(str(bad))
  assert [hit.split(": ", 1)[1] for hit in found] == [
      "pickle.loads(", "yaml.load without SafeLoader", "np.load without allow_pickle=False",
      "eval(", "run(shell=...)"], found


def test_container_image_runs_as_a_non_root_user():
  with open(os.path.join(REPO, "kubeflow", "Dockerfile"), encoding="utf-8") as f:
    lines = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
  users = [i for i, l in enumerate(lines) if l.upper().startswith("USER ")]
  assert users, "the Dockerfile sets no USER: the components would run as root"
  user = lines[users[-1]].split(None, 1)[1].split(":")[0]
  assert user not in ("root", "0"), user
  runs = [i for i, l in enumerate(lines) if l.upper().startswith("RUN ")]
  assert users[-1] > max(runs)  # the install runs as root; nothing after the switch does
  secrets = re.compile(r"^(ENV|ARG)\s+.*(PASSWORD|SECRET|TOKEN|CREDENTIAL|_KEY\b)", re.I)
  assert not [l for l in lines if secrets.search(l)]


# ----------------------------------------------------------------------------- kill ExampleGen

# The child: `tfx-parallel run` minus the argument parsing, with the config as JSON.
_RUN_CHILD = textwrap.dedent("""
    import json, sys, time
    from tfx_parallel.components.common import tfenv
    tfenv.prepare()
    from tfx_parallel.pipeline import config as config_lib, local_runner
    config = config_lib.PipelineConfig.from_dict(json.loads(sys.argv[1]))
    t0 = time.monotonic()
    local_runner.run(config, sys.argv[2])
    print(f"[child] pipeline ran in {time.monotonic() - t0:.1f}s", flush=True)
    """)

# Enough rows that ingest takes seconds; few training steps so the rerun stays short.
KILL_CONFIG = {
    "pipeline_name": "killed",
    "example_gen": {"rows": 400_000},
    "trainer": {"layout": "single", "steps": 40, "log_every": 5, "checkpoint_every": 20,
                "optimizer": "adam", "learning_rate": 0.05},
    "evaluator": {"require_converged": False},
}
CHILD_TIMEOUT_SECONDS = 900  # imports alone take a minute on a busy 2-core machine


def _examples_dirs(home, name):
  return glob.glob(os.path.join(home, "pipelines", name, "PartitionedExampleGen",
                                "examples", "*"))


def _wait_for_write_then_kill(proc, home, name):
  """SIGKILLs the child's process group as soon as ExampleGen's output appears.

  Returns (phase, seconds from start to kill): "staging" if files were still in the
  staging directory (mid-write), "committed" if they were already moved into Split-*.
  """
  t0 = time.monotonic()
  phase = None
  while phase is None:
    assert proc.poll() is None, "the run ended before ExampleGen wrote anything"
    assert time.monotonic() - t0 < CHILD_TIMEOUT_SECONDS
    for d in _examples_dirs(home, name):
      try:
        entries = os.listdir(d)
      except FileNotFoundError:
        continue
      if any(e.startswith(".staging-") for e in entries):
        phase = "staging"
      elif any(e.startswith("Split-") for e in entries):
        phase = "committed"
    if phase is None:
      time.sleep(0.005)
  os.killpg(proc.pid, signal.SIGKILL)
  killed_at = time.monotonic() - t0
  proc.wait(timeout=60)
  return phase, killed_at


@pytest.mark.slow
def test_example_gen_killed_mid_write_leaves_nothing_live_and_a_rerun_completes(tmp_path):
  home = str(tmp_path / "home")
  args = [sys.executable, "-c", _RUN_CHILD, json.dumps(KILL_CONFIG), home]
  proc = subprocess.Popen(args, start_new_session=True, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  try:
    phase, killed_at = _wait_for_write_then_kill(proc, home, "killed")
  finally:
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
  assert proc.returncode == -signal.SIGKILL
  db = os.path.join(home, config_lib.METADATA_FILE)

  # After the kill: ExampleGen's execution is RUNNING (never published), no artifact at all.
  store = open_store(db)
  executions = store.get_executions()
  assert [Execution.State.Name(e.last_known_state) for e in executions] == ["RUNNING"]
  killed = {executions[0].id}
  assert store.get_artifacts() == []  # in particular no LIVE Examples with partial content
  assert_store_consistent(db, killed=killed)
  leftovers = _examples_dirs(home, "killed")
  assert len(leftovers) == 1
  leftover_bytes = sum(os.path.getsize(os.path.join(r, f))
                       for r, _, fs in os.walk(leftovers[0]) for f in fs)

  # Rerun, same config, same home: completes; the killed execution is left RUNNING.
  t0 = time.monotonic()
  rerun = subprocess.run(args, capture_output=True, text=True, timeout=CHILD_TIMEOUT_SECONDS)
  rerun_seconds = time.monotonic() - t0
  assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
  states, live = assert_store_consistent(db, killed=killed)
  assert states["RUNNING"] == sorted(killed)  # the rerun neither marks nor reuses it
  assert len(states["COMPLETE"]) == 3, states  # ExampleGen, Trainer, Evaluator
  assert live >= 5  # Examples, Model, ModelRun, TrainingHistory, metrics + blessing
  store = open_store(db)
  examples_type = store.get_artifact_type("Examples")
  fresh = store.get_artifacts_by_type(examples_type.name)
  assert len(fresh) == 1 and fresh[0].uri != leftovers[0]
  # The killed execution's directory is not an artifact: garbage on disk, not in MLMD.
  assert os.path.isdir(leftovers[0])
  print(f"\n[kill] phase={phase} killed {killed_at:.1f}s after start; leftover "
        f"{leftover_bytes} bytes in {leftovers[0]}; rerun {rerun_seconds:.1f}s; "
        f"states {dict((k, len(v)) for k, v in states.items())}, {live} LIVE artifacts")


# ----------------------------------------------------------------------------- concurrent runs

# `tfx-parallel run ARGS` after a barrier, so two runs really start together: each child
# does the slow imports, touches <ready>, waits for <go>, then runs the CLI.
_CLI_CHILD = textwrap.dedent("""
    import os, sys, time
    from tfx_parallel.pipeline import cli, local_runner, summary  # the slow imports
    ready, go = sys.argv[1], sys.argv[2]
    open(ready, "w").close()
    while not os.path.exists(go):
      time.sleep(0.01)
    t0 = time.monotonic()
    code = cli.main(sys.argv[3:])
    print(f"[child] exit {code} after {time.monotonic() - t0:.1f}s", flush=True)
    sys.exit(code)
    """)


def _run_together(tmp_path, argvs):
  procs, ready = [], []
  go = str(tmp_path / "go")
  try:
    for i, argv in enumerate(argvs):
      ready.append(str(tmp_path / f"ready-{i}"))
      procs.append(subprocess.Popen([sys.executable, "-c", _CLI_CHILD, ready[-1], go, *argv],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True))
    deadline = time.monotonic() + CHILD_TIMEOUT_SECONDS
    while not all(os.path.exists(r) for r in ready):
      assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
      assert time.monotonic() < deadline
      time.sleep(0.05)
    open(go, "w").close()
    return [p.communicate(timeout=CHILD_TIMEOUT_SECONDS) + (p.returncode,) for p in procs]
  finally:
    for p in procs:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("names", [("conc-a", "conc-b"), ("conc", "conc")],
                         ids=["different_names", "same_name"])
def test_two_runs_at_once_on_one_store_complete_and_leave_it_consistent(tmp_path, names):
  home = str(tmp_path / "home")
  common = ["run", "--home", home, "--rows", "1500", "--layout", "single", "--steps", "30"]
  results = _run_together(tmp_path, [common + ["--pipeline-name", n] for n in names])
  for out, err, code in results:
    print(f"\n[concurrent {names}] exit {code}: "
          + " | ".join(l for l in out.splitlines() if l.startswith(("[child]", "blessed"))))
  codes = [code for _, _, code in results]
  failed = [out + err for out, err, code in results if code != 0]
  if names[0] != names[1]:
    # Different pipelines share nothing but the store: both always complete.
    assert codes == [0, 0], [(o[-2000:], e[-4000:]) for o, e, _ in results]
  else:
    # The same pipeline twice at once: same inputs and config, hence the same checkpoint
    # directory. If the two trainers overlap, the second fails fast naming it (as in
    # test_same_name_runs_whose_trainers_overlap_the_second_fails_cleanly); any other
    # failure, or both failing, is a regression.
    assert len(failed) <= 1, failed
    assert all(CHECKPOINT_IN_USE in text for text in failed), failed[0][-4000:]
  for out, _, code in results:
    if code == 0:
      assert "summary (read from ML Metadata" in out
  states, live = assert_store_consistent(os.path.join(home, config_lib.METADATA_FILE))
  assert set(states) <= {"COMPLETE", "CACHED", "FAILED"}, states
  assert len(states.get("FAILED", [])) == len(failed), states
  # 3 components x 2 runs, less the evaluator of a run whose trainer failed.
  assert sum(len(v) for v in states.values()) == 6 - len(failed), states
  store = open_store(os.path.join(home, config_lib.METADATA_FILE))
  runs = store.get_contexts_by_type("pipeline_run")
  assert len(runs) == 2, [r.name for r in runs]
  print(f"[concurrent {names}] states {dict((k, len(v)) for k, v in states.items())}, "
        f"{live} LIVE artifacts")


# Run B waits (imports done) until run A's trainer has written a checkpoint, so B's
# ExampleGen is served from A's cache and B's trainer starts while A's still trains:
# same Examples URI and same config, hence the same checkpoint directory
# (components/distributed_trainer/executor.py checkpoint_dir).
_GATED_RUN_CHILD = textwrap.dedent("""
    import json, os, sys, time
    from tfx_parallel.components.common import tfenv
    tfenv.prepare()
    from tfx_parallel.pipeline import config as config_lib, local_runner
    config = config_lib.PipelineConfig.from_dict(json.loads(sys.argv[1]))
    open(sys.argv[3], "w").close()
    while not os.path.exists(sys.argv[4]):
      time.sleep(0.01)
    local_runner.run(config, sys.argv[2])
    """)

OVERLAP_CONFIG = {
    "pipeline_name": "overlap",
    "example_gen": {"rows": 2000},
    "trainer": {"layout": "single", "steps": 8000, "log_every": 100, "checkpoint_every": 10,
                "optimizer": "adam", "learning_rate": 0.05},
    "evaluator": {"require_converged": False},
}
TRAINER_FAILED = "Training process trainer failed with exit code"
CHECKPOINT_IN_USE = "is in use by another training run"


@pytest.mark.slow
def test_same_name_runs_whose_trainers_overlap_the_second_fails_cleanly(tmp_path):
  home = str(tmp_path / "home")
  ckpts = os.path.join(home, "pipelines", "overlap", "DistributedTrainer", "_checkpoints")
  ready, go = str(tmp_path / "ready"), str(tmp_path / "go")
  config = json.dumps(OVERLAP_CONFIG)
  procs = []
  try:
    procs.append(subprocess.Popen([sys.executable, "-c", _RUN_CHILD, config, home],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True))
    procs.append(subprocess.Popen(
        [sys.executable, "-c", _GATED_RUN_CHILD, config, home, ready, go],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True))
    deadline = time.monotonic() + CHILD_TIMEOUT_SECONDS
    while not (glob.glob(os.path.join(ckpts, "*", "ckpt-*")) and os.path.exists(ready)):
      assert procs[0].poll() is None, procs[0].communicate()[0][-3000:]
      assert time.monotonic() < deadline
      time.sleep(0.05)
    # Freeze run A (its pipeline process holds the checkpoint directory's lock, its
    # trainer is mid-run) while B runs, so B's trainer surely starts while A's trains:
    # without this, a fast A could finish first and B's trainer would be CACHED.
    os.killpg(procs[0].pid, signal.SIGSTOP)
    try:
      open(go, "w").close()
      out_b = procs[1].communicate(timeout=CHILD_TIMEOUT_SECONDS)[0]
    finally:
      os.killpg(procs[0].pid, signal.SIGCONT)
    results = [procs[0].communicate(timeout=CHILD_TIMEOUT_SECONDS)[0], out_b]
  finally:
    for p in procs:
      if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
  codes = [p.returncode for p in procs]
  resumed = [re.findall(r"\[trainer\] resuming from \S+ at step (\d+)", out) for out in results]
  print(f"\n[overlap] exit codes {codes}; run B resumed at step {resumed[1]}; "
        + "; ".join(l.strip() for out in results for l in out.splitlines()
                    if "Error:" in l)[-600:])
  assert codes[0] == 0, results[0][-3000:]  # the first run is never disturbed
  # Run B's trainer starts while A's trains (A is frozen after its first checkpoint).
  # The checkpoint directory is held by A, so B's trainer fails fast naming it, and
  # never resumes from (or prunes) A's live checkpoints: B exits with an error, its
  # trainer execution is FAILED, nothing half-written is LIVE; A then completes.
  assert codes[1] != 0 and CHECKPOINT_IN_USE in results[1], results[1][-3000:]
  assert not resumed[1], resumed[1]
  # A, finished, removed its checkpoints (a later run of any layout starts afresh).
  assert not glob.glob(os.path.join(ckpts, "*", "ckpt-*")), os.listdir(ckpts)
  states, live = assert_store_consistent(os.path.join(home, config_lib.METADATA_FILE))
  assert set(states) == {"COMPLETE", "CACHED", "FAILED"}, states
  assert len(states["FAILED"]) == 1, states  # B's trainer
  assert len(states["CACHED"]) == 1, states  # B's ExampleGen, served from A's run
  print(f"[overlap] states {dict((k, len(v)) for k, v in states.items())}, {live} LIVE")
