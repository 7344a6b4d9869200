"""A training process that stops on an error a rerun cannot fix (components/distributed_
trainer/failures.py): one line on the console, no traceback, and the launcher's error
does not say "rerun to resume". Here the error is a layout rule that matches nothing,
met in the training process itself (a job handed to the launcher directly, so no
pre-flight check ran). The table: every error class, resumable or not."""
import subprocess
import sys
import textwrap
import types

import pytest

import trainer_util as tu
from tfx_parallel.components.distributed_trainer import failures
from tfx_parallel.components.distributed_trainer.run import launcher
from tfx_parallel.components.distributed_trainer.run.train import Job

MODULE = textwrap.dedent("""
    import tf_keras
    def build_model(spec):
      inputs = {f.name: tf_keras.Input((1,), name=f.name) for f in spec.features}
      return tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="head")(
          tf_keras.layers.Concatenate()(list(inputs.values()))))
    def layout_rules(spec):
      return {"hidden_1/kernel": (None, "model")}
""")


@pytest.mark.slow
def test_a_config_error_in_the_training_process_is_one_line_and_not_resumable(tmp_path,
                                                                               capfd):
  module = tmp_path / "bad_rules.py"
  module.write_text(MODULE)
  root = str(tmp_path / "examples")
  keys, _, rows = tu.write_examples(root, rows=128)
  job = Job(**tu.job_dict(str(tmp_path), root, keys, rows, layout="mesh", mesh=[1, 2],
                          module_file=str(module), steps=2, batch_size=16))
  with pytest.raises(failures.NotResumableError) as raised:
    launcher.launch(job, "mesh", 1)
  assert "Rerun to resume" not in str(raised.value)
  err = capfd.readouterr().err
  assert "Traceback" not in err, err[-3000:]
  line, = [l for l in err.splitlines() if l.startswith("[trainer] ERROR: ")]
  assert line.startswith("[trainer] ERROR: ShardingError: module ") and \
      "layout rule 'hidden_1/kernel': matches no variable" in line, line


def _tf_errors():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return {name: getattr(tf.errors, name) for name in dir(tf.errors)
          if isinstance(getattr(tf.errors, name), type)
          and issubclass(getattr(tf.errors, name), tf.errors.OpError)
          and getattr(tf.errors, name) is not tf.errors.OpError}


def _user_errors():
  from tfx_parallel.components.common.config_util import ConfigError  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import optimizers, sharding  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import checkpoint  # pylint: disable=g-import-not-at-top
  return {
      "config": ConfigError("trainer.mesh", "the model axis must divide 3"),
      "module contract / import": user_module.ModuleError("m.py: importing the module failed"),
      "optimizer on the mesh": optimizers.OptimizerError("m.py: optimizer(spec) returned ..."),
      "layout rule": sharding.ShardingError("m", "x", None, "matches no variable"),
      "checkpoint that does not fit": checkpoint.CheckpointMismatchError("ckpt-8 ..."),
  }


# Every tf.errors class, by what a rerun of the same config, module and data meets once
# the run's first step has completed, without a DTensor layout message (those are config
# errors whenever they come: test_config_errors_in_disguise_are_told_by_the_setting).
TF_RESUMABLE = {"UnavailableError": "a peer or the network went away",
                "AbortedError": "a collective was aborted by a dead peer",
                "CancelledError": "cancelled with the step",
                "DeadlineExceededError": "a deadline passed",
                "ResourceExhaustedError": "out of memory",
                "InternalError": "the runtime failed",
                "UnknownError": "the runtime failed",
                "DataLossError": "a torn read"}
TF_NOT_RESUMABLE = {"InvalidArgumentError": "a shape or layout the op cannot take",
                    "NotFoundError": "a missing file",
                    "FailedPreconditionError": "state code did not set up",
                    "UnimplementedError": "an op DTensor cannot split",
                    "PermissionDeniedError": "a forbidden path",
                    "OutOfRangeError": "the data ran out",
                    "AlreadyExistsError": "a path in the way",
                    "UnauthenticatedError": "credentials"}
PYTHON = [(OSError("connection reset"), True), (ConnectionResetError(), True),
          (TimeoutError(), True), (MemoryError(), True),
          (FileNotFoundError("/x/y.tfrecord"), False), (PermissionError("/x"), False),
          (ValueError("Shapes (8, 2) and (8, 3) are incompatible"), False),
          (TypeError("call() got an unexpected keyword"), False),
          (KeyError("x3"), False), (AttributeError("no attribute 'kernel'"), False),
          (ModuleNotFoundError("No module named 'my_model'"), False),
          (ImportError("cannot import name 'f'"), False),
          (RuntimeError("build_model() must be deterministic"), False)]


def test_every_error_class_is_classified_by_what_a_rerun_meets_again():
  """The table: every tf.errors class (a new one fails here until it is classified),
  the user-facing errors of the trainer, and Python's own. A config or user-code error
  (optimizer, layout, shape, import) is never resumable."""
  tf_errors = _tf_errors()
  assert set(tf_errors) == set(TF_RESUMABLE) | set(TF_NOT_RESUMABLE), sorted(tf_errors)
  for name, cls in tf_errors.items():
    assert failures.resumable(cls(None, None, "x")) == (name in TF_RESUMABLE), name
  for what, error in _user_errors().items():
    assert not failures.resumable(error), what
    assert isinstance(error, failures.user_error_types()), what
  for error, want in PYTHON:
    assert failures.resumable(error) == want, repr(error)
    assert not isinstance(error, failures.user_error_types()), repr(error)


def _main_with(monkeypatch, tmp_path, error):
  import json  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top
  path = tmp_path / "job.json"
  path.write_text(json.dumps(tu.job_dict(str(tmp_path), str(tmp_path), ["x0"], 8)))

  def run(job, progress=None):
    del job
    if progress is not None:  # The run got past its first step (before it, see config_error).
      progress["state"] = types.SimpleNamespace(step=1, start_step=0)
    raise error
  monkeypatch.setattr(train, "run", run)
  return train.main(["--job", str(path)])


@pytest.mark.parametrize("what", ["optimizer on the mesh", "checkpoint that does not fit"])
def test_a_user_error_in_the_training_process_exits_not_resumable_in_one_line(
    monkeypatch, tmp_path, capfd, what):
  error = _user_errors()[what]
  assert _main_with(monkeypatch, tmp_path, error) == failures.NOT_RESUMABLE_EXIT_CODE
  err = capfd.readouterr().err
  assert "Traceback" not in err
  assert err.strip().splitlines()[-1] == f"[trainer] ERROR: {type(error).__name__}: {error}"


def test_a_code_error_exits_not_resumable_with_its_traceback_and_an_os_error_resumably(
    monkeypatch, tmp_path, capfd):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  shape = tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [6,2] vs. [6,4]")
  assert _main_with(monkeypatch, tmp_path, shape) == failures.NOT_RESUMABLE_EXIT_CODE
  err = capfd.readouterr().err
  assert "Traceback" in err and err.strip().splitlines()[-1] == (
      "[trainer] ERROR: InvalidArgumentError: Incompatible shapes: [6,2] vs. [6,4]")
  assert _main_with(monkeypatch, tmp_path, OSError("connection reset")) == \
      failures.STORE_EXIT_CODE


@pytest.mark.parametrize("error,code", [
    (lambda tf: tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor"),
     failures.OOM_EXIT_CODE),
    (lambda tf: MemoryError(), failures.OOM_EXIT_CODE),
    (lambda tf: ConnectionResetError("connection reset by peer"), failures.STORE_EXIT_CODE),
    (lambda tf: tf.errors.DataLossError(None, None, "truncated record"),
     failures.DATA_LOSS_EXIT_CODE),
    (lambda tf: tf.errors.UnavailableError(None, None, "socket closed"),
     failures.PEER_LOST_EXIT_CODE),
    (lambda tf: tf.errors.InternalError(None, None, "CUDA error"), failures.RESUMABLE_EXIT_CODE),
    (lambda tf: FileNotFoundError("no such file"), failures.NOT_RESUMABLE_EXIT_CODE),
    (lambda tf: tf.errors.NotFoundError(None, None, "no such file"),
     failures.NOT_RESUMABLE_EXIT_CODE),
    (lambda tf: ZeroDivisionError("division by zero"), failures.NOT_RESUMABLE_EXIT_CODE),
])
def test_the_training_process_exits_with_its_errors_class_code(monkeypatch, tmp_path, capfd,
                                                               error, code):
  """Resumable classes exit >= 128 (the operators restart them), by kind; the others
  1-127 (issue #48 item 3; the real replica: tests/test_replica_exit_codes.py)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  error = error(tf)
  assert failures.exit_code(error) == code
  assert _main_with(monkeypatch, tmp_path, error) == code
  said = capfd.readouterr().err
  assert ("resume from the last checkpoint" in said or "resumes from the last checkpoint" in said
          ) == (code >= 128), said


def test_a_failed_non_chief_worker_shows_its_last_lines_its_output_else_goes_to_the_log(
    capfd, caplog):
  """Local multi_worker: worker 1's output is logged, not printed; when it fails, its
  last lines are printed with the error (a real child process; no TensorFlow)."""
  import logging  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  # The launcher logs through absl, whose level an earlier test in this process may have
  # raised (the quiet console): set the absl logger itself, not only the root.
  caplog.set_level(logging.INFO, logger="absl")
  code = ("import sys\n"
          "for i in range(60): print(f'[trainer] step {i}', flush=True)\n"
          "print('Traceback: worker 1 broke', file=sys.stderr, flush=True)\n"
          "sys.exit(3)\n")
  proc, reader, tail = launcher._start_logged(  # pylint: disable=protected-access
      [sys.executable, "-c", code], dict(os.environ), "worker 1")
  with pytest.raises(RuntimeError, match="Training process worker 1 failed with exit code 3"):
    launcher._wait_all([proc], ["worker 1"], {"worker 1": (reader, tail)})  # pylint: disable=protected-access
  out, err = capfd.readouterr()
  assert "[trainer] step" not in out
  shown = err.split("[trainer] worker 1 exited with code 3; its last lines:\n", 1)[1]
  assert shown.splitlines()[-1] == "  Traceback: worker 1 broke"
  assert len(shown.splitlines()) == launcher.FAILED_WORKER_TAIL_LINES  # The tail only.
  logged = [r.getMessage() for r in caplog.records]
  assert "worker 1: [trainer] step 0" in logged and "worker 1: Traceback: worker 1 broke" in logged


def _config_error(error, **kwargs):
  return failures.config_error(error, **dict({"first_step_done": True}, **kwargs))


def test_config_errors_in_disguise_are_told_by_the_setting_never_rerun_to_resume():
  """A DTensor layout error arrives as UnknownError (or InvalidArgumentError) at any
  step; memory exhausted by the first step, and any runtime error before it, come
  again on a rerun: each is a ConfigError naming the setting, not "rerun to resume"."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common.config_util import ConfigError  # pylint: disable=g-import-not-at-top
  gather = tf.errors.UnknownError(
      None, None, "DTensor does not support sharded 0th dimension for the resource tensor "
                  "for ResourceGatherOp. Received: resource 'emb/embeddings'")
  for done in (False, True):
    e = _config_error(gather, first_step_done=done)
    assert isinstance(e, ConfigError) and e.key == "trainer.layout_rules", e
    assert "(variable emb/embeddings)" in str(e) and "UnknownError: DTensor does not" in str(e)
  oom = tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor [4096,4096]")
  e = _config_error(oom, first_step_done=False, layout="mesh", state_bytes=96 * 2**20)
  assert e.key == "trainer.batch_size" and "96.0 MiB of model and optimizer state" in str(e)
  assert "lower trainer.batch_size" in str(e) and "trainer.mesh" in str(e)
  assert _config_error(oom) is None and failures.resumable(oom)  # Later: the moment's.
  internal = tf.errors.InternalError(None, None, "Failed to compile the step")
  assert _config_error(internal, first_step_done=False).key == "trainer"
  assert _config_error(internal) is None
  # What already names its fix, a lost peer and a filesystem stay as they are.
  assert _config_error(_user_errors()["layout rule"], first_step_done=False) is None
  assert _config_error(tf.errors.UnavailableError(None, None, "peer"), first_step_done=False) \
      is None
  assert _config_error(OSError("connection reset"), first_step_done=False) is None
  for e in (_config_error(gather), _config_error(oom, first_step_done=False)):
    assert "rerun" not in str(e).lower()
  failed = failures.process_failed("chief", failures.CONFIG_ERROR_EXIT_CODE)
  assert isinstance(failed, ConfigError) and "Rerun to resume" not in str(failed)


def test_an_op_dtensor_cannot_run_names_the_model_fix_not_the_layout_rules():
  """DTensor's messages (TF 2.16) for a model op no layout rule or mesh can fix: a
  tf_keras LSTM without unroll (TensorList ops), tf.map_fn, a stateful random op of the
  model's own code. The error names the fix in the model or another layout, never
  layout_rules."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  lstm = tf.errors.UnknownError(None, None, "train.py:196:1: error: 'tf.TensorListStack' op "
                                            "does not implement layout propagation. Please "
                                            "file a feature request to TF DTensor.")
  map_fn = tf.errors.UnknownError(None, None, "error: 'tf.TensorListSetItem' op "
                                              "ComputeLayoutForward error: value type is not "
                                              "a RankedTensorType")
  dropout = tf.errors.UnknownError(None, None, "error: 'tf.RandomUniform' op "
                                               "ComputeLayoutForward error: Stateful random "
                                               "operations are not supported in DTensor.")
  normal = tf.errors.UnknownError(None, None, "error: 'tf.RandomStandardNormal' op "
                                              "ComputeLayoutForward error: Stateful random "
                                              "operations are not supported in DTensor.")
  other = tf.errors.UnknownError(None, None, "error: 'tf.FooBar' op does not implement "
                                             "layout propagation.")
  for done in (False, True):
    for error, says in ((lstm, "unroll=True"), (map_fn, "unroll=True"),
                        (dropout, "tf.random.Generator"), (dropout, "op RandomUniform"),
                        (normal, "op RandomStandardNormal"),
                        (dropout, "made outside build_model()"), (other, "op FooBar")):
      e = _config_error(error, first_step_done=done)
      assert e.key == "trainer.layout" and says in str(e), e
      assert "layout_rules" not in str(e) and "rerun" not in str(e).lower()


def test_a_layout_error_in_the_training_process_exits_2_in_one_line(monkeypatch, tmp_path,
                                                                    capfd):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  error = tf.errors.UnknownError(None, None, "does not support sharded 0th dimension for "
                                             "the resource tensor for ResourceGatherOp")
  assert _main_with(monkeypatch, tmp_path, error) == failures.CONFIG_ERROR_EXIT_CODE == 2
  err = capfd.readouterr().err
  assert "Traceback" not in err
  assert err.strip().splitlines()[-1].startswith(
      "[trainer] ERROR: ConfigError: trainer.layout_rules: DTensor cannot run a layout")


@pytest.mark.parametrize("main,code", [
    ("raise SystemExit(256)", failures.NOT_RESUMABLE_EXIT_CODE),  # Would end as 0.
    ("raise SystemExit(384)", failures.NOT_RESUMABLE_EXIT_CODE),  # Would end as 128.
    ("raise SystemExit(-1)", failures.NOT_RESUMABLE_EXIT_CODE),
    ("raise ConnectionResetError('reset')", failures.STORE_EXIT_CODE),
    ("return 0", 0),
])
def test_a_replicas_exit_status_is_its_class_and_never_wraps_around(main, code):
  """object_store.run_and_exit, the replica's exit path: an exit status is 8 bits, so a
  status outside 0-255 (a module's sys.exit(256)) would read as success or as a
  retryable >= 128; it exits NOT_RESUMABLE_EXIT_CODE instead."""
  source = ("from tfx_parallel.components.distributed_trainer.kube import object_store\n"
            f"def main():\n  {main}\n"
            "object_store.run_and_exit(main)\n")
  proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == code, proc.stderr[-2000:]


CALLBACK = textwrap.dedent("""
    def on_epoch_end(model):
      return model.get_weights()
""")

WHOLE_COPY = textwrap.dedent("""
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from tensorflow.experimental import dtensor
    import tf_keras
    from tfx_parallel.components.distributed_trainer import failures
    sys.path.insert(0, sys.argv[1])
    import user_callback
    mesh = dtensor.create_mesh([("batch", 1), ("model", 2)], device_type="CPU")
    kernel = dtensor.DVariable(dtensor.call_with_layout(
        tf.zeros, dtensor.Layout([dtensor.UNSHARDED, "model"], mesh), shape=(3, 4)))
    model = tf_keras.Sequential()
    model.get_weights = lambda: [kernel.numpy()]
    try:
      user_callback.on_epoch_end(model)
    except Exception as e:  # The error a mesh run meets.
      error = failures.config_error(e, first_step_done=True)
      print(type(e).__name__, repr(error.key) if error else None, error)
""")


def test_a_callback_reading_split_weights_whole_names_its_line_and_the_layout(tmp_path):
  """A user callback that calls model.get_weights() on the mesh meets DTensor's
  UnimplementedError ("Trying to copy a non-single-device and non-replicated DTensor",
  and then every device's block of the variable) after a whole epoch: a ConfigError on
  trainer.layout naming the callback's line and the fix, not a dump of the weights.
  A real split DVariable on a 1x2 mesh of logical CPUs, in a process of its own."""
  (tmp_path / "user_callback.py").write_text(CALLBACK)
  proc = subprocess.run([sys.executable, "-c", WHOLE_COPY, str(tmp_path)],
                        capture_output=True, text=True, timeout=300)
  out = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-2000:]
  assert out.startswith("UnimplementedError 'trainer.layout'"), out
  assert f"{tmp_path / 'user_callback.py'}:3 (on_epoch_end: return model.get_weights())" in out
  assert "single, mirrored, multi_worker" in out and "callbacks(spec)" in out
  assert "DTensor({" not in out and "rerun" not in out.lower()
