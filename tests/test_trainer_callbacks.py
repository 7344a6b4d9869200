"""The trainer's progress output: ProgressReporter lines from the history records."""
import io
import math

from tfx_parallel.components.distributed_trainer.run import callbacks as cb


def _state(total=100, start=0):
  return cb.RunState(total=total, start_step=start, global_batch=8, steps_per_epoch=50,
                     learning_rate=0.1, step=start)


def _feed(progress, state, steps, losses):
  for step, loss in zip(steps, losses):
    state.step = step
    state.records.append({"step": step, "loss": loss, "examples_per_sec": 1000.0})
    if step % state.steps_per_epoch == 0:
      state.epochs.append({"epoch": step // 50, "step": step, "train_loss": loss,
                           "eval_loss": loss * 2})
    progress.on_train_batch_end(0)


def test_a_log_gets_a_line_per_tenth_of_the_steps_with_the_latest_eval_loss():
  state, out = _state(), io.StringIO()
  progress = cb.Progress(state, True, stream=out, is_tty=False)
  _feed(progress, state, range(5, 101, 5), [1.0 / s for s in range(5, 101, 5)])
  progress.on_train_end()
  lines = out.getvalue().splitlines()
  assert len(lines) == 10, lines
  assert lines[0].startswith("[trainer] step 10/100 (10%) loss 0.1 "), lines[0]
  assert "eval_loss" not in lines[3]  # before the first epoch ends (step 50)
  assert " eval_loss 0.04 " in lines[4], lines[4]  # step 50: 2 x 0.02
  assert lines[-1].startswith("[trainer] step 100/100 (100%) loss 0.01 eval_loss 0.02 "), lines


def test_a_terminal_gets_one_updating_line_and_a_resumed_run_counts_from_its_step():
  state, out = _state(total=100, start=40), io.StringIO()
  progress = cb.Progress(state, True, stream=out, is_tty=True)
  _feed(progress, state, range(50, 101, 10), [0.5] * 6)
  progress.on_train_end()
  text = out.getvalue()
  assert text.count("\n") == 1 and text.count("\r") == 6, repr(text)
  assert text.rstrip().rsplit("\r", 1)[-1].startswith("[trainer] ")
  assert "step 100/100" in text and " 17%" in text  # (50 - 40) / (100 - 40)


def test_divergence_is_a_line_of_its_own():
  state, out = _state(), io.StringIO()
  progress = cb.Progress(state, True, stream=out, is_tty=False)
  _feed(progress, state, [10], [0.5])
  state.diverged, state.last_loss = True, math.nan
  state.diverged_reason = "training loss is nan (record 2)"
  _feed(progress, state, [20], [math.nan])
  progress.on_train_end()
  assert ("[trainer] training diverged at step 20: training loss is nan (record 2); "
          "stopping early") in out.getvalue().splitlines()


class _Model:
  stop_training = False


def _recorder(state, evals, non_negative=True):
  """``evals``: eval losses, or (eval loss, standard error) pairs (unknown: NaN)."""
  def eval_loss():
    value = evals.pop(0)
    return value if isinstance(value, tuple) else (value, math.nan)
  recorder = cb.Recorder(state, log_every=10, stop_on_divergence=True,
                         eval_loss=eval_loss, non_negative=non_negative)
  recorder.model = _Model()
  return recorder


def _run(recorder, means):
  """Feeds Keras-style running means, one per step; returns the steps run."""
  for batch, mean in enumerate(means):
    recorder.on_train_batch_end(batch, {"loss": mean})
    if recorder.model.stop_training:
      return batch + 1
  return len(means)


def test_the_recorder_stops_on_a_negative_cross_entropy_with_the_rule_as_reason():
  # float32 running means of an overflowing run: the window mean recovered from them
  # comes out negative (the "loss -17,179,869,184").
  state = _state(total=100)
  means = [0.7] * 10 + [0.69] * 9 + [-1.7e9]
  steps = _run(_recorder(state, [0.6] * 5), means)
  assert steps == 20 and state.diverged and "below 0" in state.diverged_reason
  assert state.records[-1]["step"] == 20 and state.records[-1]["loss"] < 0


def test_the_recorder_stops_when_the_eval_loss_rises_by_half_and_not_on_a_flat_run():
  state = _state(total=150)
  steps = _run(_recorder(state, [0.6, 0.95, 0.5]), [0.7] * 150)
  assert steps == 100 and state.diverged and "rose 58 %" in state.diverged_reason
  state = _state(total=150)  # lr 0: the same eval loss every epoch.
  steps = _run(_recorder(state, [0.6931] * 3), [0.7] * 150)
  assert steps == 150 and not state.diverged
  assert [e["eval_loss"] for e in state.epochs] == [0.6931] * 3


def test_a_small_eval_sets_noisy_rise_does_not_stop_training_a_real_one_does():
  # The 406-row file: 69 eval rows, eval loss +63 % in one interval, within its
  # noise (standard error 25 % of the loss: per-example squared errors spread ~2x their
  # mean / sqrt(69)). The run goes on and records the standard errors.
  state = _state(total=200)
  evals = [(20.0, 5.0), (32.6, 8.1), (18.0, 4.5), (17.5, 4.4)]
  steps = _run(_recorder(state, evals), [0.7] * 200)
  assert steps == 200 and not state.diverged, state.diverged_reason
  assert [e["eval_loss_se"] for e in state.epochs] == [5.0, 8.1, 4.5, 4.4]
  # The same set, a loss 5x the last: beyond rise_tolerance and 3 standard errors.
  state = _state(total=200)
  steps = _run(_recorder(state, [(20.0, 5.0), (100.0, 25.0), (18.0, 4.5)]), [0.7] * 200)
  assert steps == 100 and state.diverged and "standard errors" in state.diverged_reason


def test_early_stop_keeps_the_best_evaluations_weights_after_patience_without_a_better_one():
  state = _state(total=1000)  # An evaluation every 50 steps (steps_per_epoch).
  recorder = _recorder(state, [5.0, 3.0, 2.0, 2.5, 2.1, 2.2, 9.9])
  snapshots = []
  early = cb.EarlyStop(state, patience=3, snapshot=lambda: snapshots.append(state.step) or
                       [f"weights at {state.step}"])
  early.model = recorder.model
  steps = 0
  for batch in range(1000):
    recorder.on_train_batch_end(batch, {"loss": 0.7})
    early.on_train_batch_end(batch)
    steps = batch + 1
    if recorder.model.stop_training:
      break
  # Best at the 3rd evaluation (step 150); 3 without a better one: stop at step 300.
  assert steps == 300 and state.early_stopped and not state.diverged
  assert snapshots == [50, 100, 150]
  assert early.best_weights() == ["weights at 150"]
  assert early.record() == {"patience": 3, "stopped": True, "best_epoch": 3, "best_step": 150,
                            "best_eval_loss": 2.0, "restored_best": True}
