"""A training process that stops on an error a rerun cannot fix (components/distributed_
trainer/failures.py): one line on the console, no traceback, and the launcher's error
does not say "rerun to resume". Here the error is a layout rule that matches nothing,
met in the training process itself (a job handed to the launcher directly, so no
pre-flight check ran)."""
import textwrap

import pytest

import trainer_util as tu
from tfx_parallel.components.distributed_trainer.run import failures, launcher
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


def test_a_failed_non_chief_worker_shows_its_last_lines_its_output_else_goes_to_the_log(
    capfd, caplog):
  """Local multi_worker: worker 1's output is logged, not printed; when it fails, its
  last lines are printed with the error (a real child process; no TensorFlow)."""
  import logging  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  caplog.set_level(logging.INFO)
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
