"""The trainer's callbacks: progress lines from the history records, the recorder's
divergence stops, and a user's callbacks(spec) driven alike on every layout."""
import io
import math

import numpy as np
import pytest

from tfx_parallel.components.distributed_trainer.engines import callbacks as cb


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


class _Steps:
  """An engine's ``step_losses``: the exact losses of the last n steps of ``losses``,
  up to the steps the Recorder has been told of (``ran``)."""

  def __init__(self, losses):
    self.losses, self.ran = list(losses), 0

  def __call__(self, n):
    assert 0 < n <= self.ran, (n, self.ran)
    return self.losses[self.ran - n:self.ran]


def _recorder(state, evals, losses, non_negative=True, log_every=10):
  """``evals``: eval losses, or (eval loss, standard error) pairs (unknown: NaN)."""
  def eval_loss():
    value = evals.pop(0)
    return value if isinstance(value, tuple) else (value, math.nan)
  steps = _Steps(losses)
  recorder = cb.Recorder(state, log_every=log_every, stop_on_divergence=True,
                         eval_loss=eval_loss, step_losses=steps, non_negative=non_negative)
  recorder.model = _Model()
  recorder.steps = steps
  return recorder


def _run(recorder, execution=1):
  """Runs the recorder's losses in executions of ``execution`` steps, with a Keras
  running mean in the logs that is never right (the Recorder must not read it);
  returns the steps run."""
  total = len(recorder.steps.losses)
  for end in range(execution, total + execution, execution):
    recorder.steps.ran = min(end, total)
    recorder.on_train_batch_end(recorder.steps.ran - 1, {"loss": -123.0})
    if recorder.model.stop_training:
      return recorder.steps.ran
  return total


def test_the_recorder_stops_on_a_negative_loss_with_the_rule_as_reason():
  state = _state(total=100)
  steps = _run(_recorder(state, [0.6] * 5, [0.7] * 10 + [0.69] * 9 + [-0.5]))
  assert steps == 20 and state.diverged and "below 0" in state.diverged_reason
  assert state.last_loss == -0.5 and state.records[-1]["step"] == 20
  assert state.records[-1]["loss"] == pytest.approx((9 * 0.69 - 0.5) / 10)


@pytest.mark.parametrize("execution", [1, 5])
def test_a_record_is_the_mean_of_the_exact_losses_since_the_previous_record(execution):
  """Every step's loss enters its record once, whatever the execution length; with
  log_every 1, a record is its step's own loss. logs["loss"] is not read."""
  losses = [1.0 / (1 + s) + (s % 3) * 1e-3 for s in range(40)]
  state = _state(total=40)
  _run(_recorder(state, [0.9, 0.9], losses, log_every=10), execution)
  assert [r["step"] for r in state.records] == [10, 20, 30, 40]
  assert [r["loss"] for r in state.records] == pytest.approx(
      [sum(losses[i:i + 10]) / 10 for i in (0, 10, 20, 30)], rel=1e-12)
  assert state.last_loss == pytest.approx(sum(losses[40 - execution:]) / execution)
  state = _state(total=40)
  _run(_recorder(state, [0.9, 0.9], losses, log_every=1))
  assert [r["loss"] for r in state.records] == losses


def test_a_run_a_callback_stops_between_records_ends_its_history_at_its_last_step():
  """Keras EarlyStopping stops the run at an epoch's end (step 28: two epochs of 14)
  that is no multiple of log_every (5): the history's last record is step 28, the mean
  of steps 26-28, as the exported weights are step 28's (on the mesh the summary said
  "25 steps" for a run of 28: bc.csv, EarlyStopping(min_delta=10, patience=1))."""
  losses = [1.0 / (1 + s) for s in range(56)]
  state = cb.RunState(total=56, start_step=0, global_batch=32, steps_per_epoch=14,
                      learning_rate=0.01, step=0)
  recorder = _recorder(state, [0.9, 0.8], losses, log_every=5)
  for end in (5, 10, 14, 15, 20, 25, 28):  # The executions (engines/epochs.py).
    if end in (5, 15):
      recorder.on_epoch_begin(end // 14)
    recorder.steps.ran = end
    recorder.on_train_batch_end((end - 1) % 14, {"loss": -123.0})
  recorder.on_epoch_end(1, {"loss": -123.0})
  recorder.model.stop_training = True  # EarlyStopping's on_epoch_end.
  recorder.on_train_end({"loss": -123.0})
  assert [r["step"] for r in state.records] == [5, 10, 15, 20, 25, 28]
  assert state.records[-1]["loss"] == pytest.approx(sum(losses[25:28]) / 3, rel=1e-12)
  recorder.on_train_end({})  # Nothing since: no second record.
  assert len(state.records) == 6


def test_the_recorder_stops_when_the_eval_loss_rises_by_half_and_not_on_a_flat_run():
  # The eval loss and the training loss both rise by more than half: diverged.
  state = _state(total=150)
  steps = _run(_recorder(state, [0.6, 0.95, 0.5], [0.7] * 50 + [1.2] * 100))
  assert steps == 100 and state.diverged and "rose 58 %" in state.diverged_reason
  # #47: the same eval rise while the training loss falls is overfitting: the run goes on.
  state = _state(total=150)
  steps = _run(_recorder(state, [0.6, 0.95, 0.5], [0.7] * 50 + [0.4] * 100))
  assert steps == 150 and not state.diverged, state.diverged_reason
  state = _state(total=150)  # lr 0: the same eval loss every epoch.
  steps = _run(_recorder(state, [0.6931] * 3, [0.7] * 150))
  assert steps == 150 and not state.diverged
  assert [e["eval_loss"] for e in state.epochs] == [0.6931] * 3


def test_each_record_has_the_rate_the_optimizer_applied_when_it_is_written():
  """The rate is read from the optimizer when the record is written (so a checkpoint
  saved mid-run keeps it), not the config's rate patched in after training."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import run_record  # pylint: disable=g-import-not-at-top
  schedule = tf_keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10,
                                                            decay_rate=0.5)
  optimizer = tf_keras.optimizers.SGD(schedule)
  state = _state(total=30)
  recorder = cb.Recorder(state, log_every=10, stop_on_divergence=True,
                         eval_loss=lambda: (0.5, 0.0), step_losses=_Steps([0.7] * 20),
                         learning_rate_at=lambda step: run_record.learning_rate_at(optimizer,
                                                                                   step))
  recorder.model = _Model()
  recorder.steps = recorder.step_losses
  _run(recorder)
  saved = [dict(r) for r in state.records]  # What a checkpoint at step 20 holds.
  assert [r["learning_rate"] for r in saved] == pytest.approx([0.1 * 0.5 ** 0.9,
                                                               0.1 * 0.5 ** 1.9])
  assert state.learning_rate == 0.1  # The config's rate, recorded nowhere.


# The user modules' model below: the features into one Dense unit (head).
LINEAR_MODEL = '''

def build_model(spec):
  inputs = {f.name: tf_keras.Input((1,), name=f.name) for f in spec.features}
  x = tf_keras.layers.Concatenate()([inputs[f.name] for f in spec.features])
  return tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="head")(x))
'''

# A user module whose callbacks(spec) hook counts every Keras callback hook and writes
# the counts, the batch indices the batch hooks got, the epochs' logs and rates, and the
# epochs the scheduler was asked about at on_train_end.
COUNTING_MODULE = '''
import collections, json
import tf_keras

HOOKS = [f"on_{w}_{h}" for w in ("train", "test", "predict") for h in ("begin", "end")] + [
    f"on_{w}_batch_{h}" for w in ("train", "test", "predict") for h in ("begin", "end")] + [
    "on_epoch_begin", "on_epoch_end"]
ASKED = []  # The epochs LearningRateScheduler's schedule was called with.


def lr(model):
  return float(tf_keras.backend.get_value(model.optimizer.learning_rate))


class Counting(tf_keras.callbacks.Callback):
  def __init__(self, path):
    super().__init__()
    self.path, self.counts, self.batches, self.epochs = path, collections.Counter(), [], []

  def _seen(self, hook, *args):
    self.counts[hook] += 1
    if "train_batch" in hook:
      self.batches.append([hook, int(args[0]), sorted((args[1] or {}) if len(args) > 1 else {})])
    if hook == "on_epoch_begin":
      self.epochs.append({"epoch": int(args[0]), "lr_begin": lr(self.model)})
    if hook == "on_epoch_end":
      self.epochs[-1].update(end=int(args[0]), logs={k: float(v) for k, v in args[1].items()})
    if hook == "on_train_end":
      with open(self.path, "w") as f:
        json.dump({"counts": self.counts, "batches": self.batches, "lr": lr(self.model),
                   "epochs": self.epochs, "asked": ASKED,
                   "stop_training": self.model.stop_training}, f)

for _hook in HOOKS:
  setattr(Counting, _hook, lambda self, *a, _h=_hook, **k: self._seen(_h, *a, *k.values()))
''' + LINEAR_MODEL + '''

def schedule(epoch, rate):
  ASKED.append(epoch)
  return rate * 0.5


def callbacks(spec):
  """Every stock callback the trainer honours on this layout, then the counter. A
  plateau is forced (min_delta huge): from the second epoch on, no evaluation counts
  as an improvement, so ReduceLROnPlateau cuts the rate and EarlyStopping stops the
  run at the end of epoch 1 (of 3)."""
  out, h = spec.hparams["out"], tf_keras.callbacks
  stock = [h.LearningRateScheduler(schedule),
           h.ReduceLROnPlateau(monitor="val_loss", min_delta=1e9, patience=0, factor=0.1),
           h.EarlyStopping(monitor="val_loss", min_delta=1e9, patience=0),
           h.CSVLogger(out + ".csv")]
  if spec.hparams["layout"] != "mesh":  # Refused on the mesh, by name, before training.
    stock += [h.ModelCheckpoint(out + "_ckpt/w", save_weights_only=True),
              h.TensorBoard(out + "_tb")]
  return stock + [Counting(out + ".json")]
'''


@pytest.mark.slow
def test_stock_callbacks_act_at_the_trainers_epochs_on_single_mirrored_and_mesh(tmp_path):
  """epochs 3 of 4 steps (64 rows, batch 16), 2 steps per execution: Keras epochs are the
  trainer's epochs, the same on every layout (one process, three jobs). Each epoch gets
  on_epoch_begin(e), two executions' batch hooks (batch indices within the epoch, with
  the loss), a test run (the per-epoch evaluation) and on_epoch_end(e, logs) with the
  epoch's mean ``loss`` and that evaluation's loss as ``val_loss`` (the history's
  ``eval_loss``). LearningRateScheduler sets the rate of the optimizer that trains
  (``model.optimizer``) at each epoch; ReduceLROnPlateau(val_loss) cuts it after the
  forced plateau; EarlyStopping(val_loss) stops the run at the end of epoch 1, which
  the run record says; CSVLogger writes a row per epoch with a numeric val_loss;
  ModelCheckpoint and TensorBoard (not on the mesh: refused there) write their files."""
  import csv  # pylint: disable=g-import-not-at-top
  import json  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  module = tmp_path / "counting.py"
  module.write_text(COUNTING_MODULE)
  root = str(tmp_path / "ex")
  feats, _, rows = tu.write_examples(root, rows=64, eval_rows=32)
  # One process: TensorFlow is split into 2 logical CPUs by the first job.
  layouts = {"mirrored": {"devices": 2}, "mesh": {"mesh": [1, 2]}, "single": {}}
  jobs = [tu.job_dict(str(tmp_path / name), root, feats, rows, layout=name, epochs=3,
                      batch_size=16, steps_per_execution=2, log_every=2, checkpoint_every=0,
                      module_file=str(module),
                      hparams={"out": str(tmp_path / name), "layout": name}, **extra)
          for name, extra in layouts.items()]
  out = tu.run_jobs_in_one_process(jobs, str(tmp_path))
  seen, histories = {}, {}
  for name in layouts:
    with open(os.path.join(tmp_path, f"{name}.json")) as f:
      seen[name] = json.load(f)
    with open(os.path.join(tmp_path, name, "history", "history.json")) as f:
      histories[name] = json.load(f)
  single = seen["single"]
  assert single["counts"] == {
      "on_train_begin": 1, "on_epoch_begin": 2, "on_train_batch_begin": 4,
      "on_train_batch_end": 4, "on_test_begin": 2, "on_test_batch_begin": 2,
      "on_test_batch_end": 2, "on_test_end": 2, "on_epoch_end": 2, "on_train_end": 1}
  assert single["batches"] == [
      ["on_train_batch_begin", 0, []], ["on_train_batch_end", 1, ["loss"]],
      ["on_train_batch_begin", 2, []], ["on_train_batch_end", 3, ["loss"]]] * 2
  assert single["asked"] == [0, 1]  # The schedule, at each epoch's start.
  rate = 0.1  # job_dict's SGD rate; halved by the schedule at each epoch's start.
  assert [e["lr_begin"] for e in single["epochs"]] == pytest.approx([rate / 2, rate / 4])
  assert single["lr"] == pytest.approx(rate / 4 * 0.1)  # ReduceLROnPlateau at epoch 1.
  assert [e["end"] for e in single["epochs"]] == [0, 1] and single["stop_training"]
  for name, history in histories.items():
    epochs = seen[name]["epochs"]
    assert [e["logs"]["val_loss"] for e in epochs] == pytest.approx(
        [e["eval_loss"] for e in history["epochs"]], rel=1e-6), name
    assert all(math.isfinite(e["logs"]["loss"]) for e in epochs), name
    assert history["steps_run"] == 8 and history["total_steps"] == 12, name
    assert history["stopped_early"] and history["early_stopping"]["stopped_by_callback"] == (
        "EarlyStopping"), (name, history["early_stopping"])
  assert out.count("[trainer] early stop at step 8 (epoch 2 of 3): EarlyStopping "
                   "(callbacks(spec)) set model.stop_training") == 3, out[-3000:]
  for name in ("mirrored", "mesh"):
    assert seen[name]["counts"] == single["counts"], name
    assert seen[name]["batches"] == single["batches"], name
    assert seen[name]["asked"] == single["asked"], name
    assert [e["lr_begin"] for e in seen[name]["epochs"]] == pytest.approx(
        [e["lr_begin"] for e in single["epochs"]]), name
    assert seen[name]["lr"] == pytest.approx(single["lr"]), name
  for name in layouts:
    with open(tmp_path / f"{name}.csv") as f:
      table = list(csv.DictReader(f))
    assert [r["epoch"] for r in table] == ["0", "1"], (name, table)
    assert all(math.isfinite(float(r["val_loss"])) for r in table), (name, table)
    files = os.listdir(tmp_path)
    assert (f"{name}_ckpt" in files and f"{name}_tb" in files) == (name != "mesh"), files


def test_a_callback_the_trainer_cannot_honour_is_refused_before_training_by_name(tmp_path):
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  import hook_cases  # pylint: disable=g-import-not-at-top

  def load(returned: str):
    path = tmp_path / f"m{abs(hash(returned))}.py"
    path.write_text("import tf_keras\nfrom hook_modules.model import build_model\n"
                    f"def callbacks(spec):\n  return {returned}\n")
    return user_module.load(module_file=str(path))

  spec = hook_cases.spec()
  board = load("[tf_keras.callbacks.TensorBoard('/tmp/tb')]")
  assert isinstance(user_module.make_callbacks(board, spec, "single")[0],
                    tf_keras.callbacks.TensorBoard)
  with pytest.raises(user_module.ModuleError,
                     match=r"callbacks\(spec\) returned tf_keras\.src\.callbacks\.TensorBoard, "
                           r"which the trainer cannot honour: on the mesh layout it traces"):
    user_module.make_callbacks(board, spec, "mesh")
  with pytest.raises(user_module.ModuleError, match=r"ModelCheckpoint, which the trainer "
                                                    r"cannot honour: on the mesh layout"):
    user_module.make_callbacks(load("[tf_keras.callbacks.ModelCheckpoint('/tmp/c')]"), spec,
                               "mesh")
  stock = load("[tf_keras.callbacks.LearningRateScheduler(lambda e, lr: lr), "
               "tf_keras.callbacks.ReduceLROnPlateau(), tf_keras.callbacks.EarlyStopping(), "
               "tf_keras.callbacks.CSVLogger('/tmp/l.csv')]")
  assert len(user_module.make_callbacks(stock, spec, "mesh")) == 4
  restore = load("[tf_keras.callbacks.EarlyStopping(restore_best_weights=True)]")
  assert len(user_module.make_callbacks(restore, spec, "single")) == 1
  with pytest.raises(user_module.ModuleError, match=r"EarlyStopping with restore_best_weights="
                                                    r"True, which the trainer cannot honour: "
                                                    r"on the mesh layout it copies"):
    user_module.make_callbacks(restore, spec, "mesh")
  backup = load("[tf_keras.callbacks.BackupAndRestore('/tmp/b')]")
  for layout in ("single", "mirrored", "mesh"):
    with pytest.raises(user_module.ModuleError, match=r"BackupAndRestore, which the trainer "
                                                      r"cannot honour: the trainer checkpoints"):
      user_module.make_callbacks(backup, spec, layout)
  with pytest.raises(user_module.ModuleError, match=r"returned builtins\.object, which is not "
                                                    r"a tf_keras\.callbacks\.Callback"):
    user_module.make_callbacks(load("[object()]"), spec, "single")
  with pytest.raises(user_module.ModuleError, match=r"must return a list of tf_keras\.callbacks"
                                                    r"\.Callback\. Received: dict"):
    user_module.make_callbacks(load("{}"), spec, "single")


def test_a_small_eval_sets_noisy_rise_does_not_stop_training_a_real_one_does():
  # The 406-row file: 69 eval rows, eval loss +63 % in one interval, within its
  # noise (standard error 25 % of the loss: per-example squared errors spread ~2x their
  # mean / sqrt(69)). The run goes on and records the standard errors.
  state = _state(total=200)
  evals = [(20.0, 5.0), (32.6, 8.1), (18.0, 4.5), (17.5, 4.4)]
  steps = _run(_recorder(state, evals, [0.7] * 200))
  assert steps == 200 and not state.diverged, state.diverged_reason
  assert [e["eval_loss_se"] for e in state.epochs] == [5.0, 8.1, 4.5, 4.4]
  # The same set, a loss 5x the last: beyond rise_tolerance and 3 standard errors.
  state = _state(total=200)
  steps = _run(_recorder(state, [(20.0, 5.0), (100.0, 25.0), (18.0, 4.5)],
                         [0.7] * 50 + [5.0] * 150))  # The training loss blows up with it.
  assert steps == 100 and state.diverged and "standard errors" in state.diverged_reason


def test_early_stop_keeps_the_best_evaluations_weights_after_patience_without_a_better_one():
  state = _state(total=1000)  # An evaluation every 50 steps (steps_per_epoch).
  recorder = _recorder(state, [5.0, 3.0, 2.0, 2.5, 2.1, 2.2, 9.9], [0.7] * 1000)
  snapshots = []
  early = cb.EarlyStop(state, patience=3, snapshot=lambda: snapshots.append(state.step) or
                       [f"weights at {state.step}"])
  early.model = recorder.model
  steps = 0
  for batch in range(1000):
    recorder.steps.ran = batch + 1
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
                            "best_eval_loss": 2.0, "restored_best": True,
                            "stopped_by_callback": None}


def test_a_run_of_set_length_that_overfits_exports_its_best_evaluations_weights(capsys):
  """#47: an eval loss that rises while the training loss falls is overfitting; the best
  weights are exported, also when the user set the length (patience 0: no early stop)."""
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top
  def run(evals, losses):
    state = _state(total=200)
    recorder = _recorder(state, list(evals), losses)
    early = cb.EarlyStop(state, patience=0, snapshot=lambda: [f"weights at {state.step}"])
    early.model = recorder.model
    for batch in range(200):
      recorder.steps.ran = batch + 1
      recorder.on_train_batch_end(batch, {"loss": 0.7})
      early.on_train_batch_end(batch)
    assert not recorder.model.stop_training or state.step == 200
    return train.best_weights(early, state, patience=0), state
  falling = list(np.geomspace(1.0, 0.1, 200))
  best, state = run([0.9, 0.5, 0.8, 1.3], falling)
  assert state.step == 200 and not state.diverged and not state.early_stopped
  assert best == ["weights at 100"]
  assert "[trainer] overfitting: the eval loss rose 160.0 % from its best 0.5" in (
      capsys.readouterr().out)
  # Still improving at the end, or a rise within tolerance: the last weights.
  assert run([0.9, 0.5, 0.4, 0.3], falling)[0] is None
  assert run([0.9, 0.5, 0.505, 0.505], falling)[0] is None


def test_executions_end_at_multiples_of_k_at_each_epoch_end_and_at_the_runs_end():
  """Records and checkpoints stay on multiples of steps_per_execution (k divides
  log_every and checkpoint_every), and every Keras epoch ends on an execution's end."""
  from tfx_parallel.components.distributed_trainer.engines import epochs  # pylint: disable=g-import-not-at-top
  lengths = epochs.execution_lengths(0, 12, steps_per_epoch=5, k=2)
  assert lengths == [2, 2, 1, 1, 2, 2, 2]  # Ends 2 4 5 6 8 10 12.
  assert epochs.keras_epochs(0, 12, 5) == (0, 3, 0)  # The third epoch is 2 steps.
  # Resumed at step 7, mid-epoch 1: fit starts there at batch 2.
  assert epochs.keras_epochs(7, 12, 5) == (1, 3, 2)
  assert epochs.execution_lengths(7, 12, 5, 2) == [1, 2, 2]
  assert epochs.execution_lengths(0, 8, 4, 10) == [4, 4]  # k above an epoch: cut there.


def test_a_reduced_steps_per_execution_is_said_with_the_settings_that_keep_it():
  """steps_per_execution 3 with the default log_every 10 runs 1 step per call (a mesh
  call each): the run says so, and what to set to run 3, instead of only
  "steps/execution 1" on the layout line."""
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  config = TrainerConfig(steps_per_execution=3)
  assert config.execution_steps() == 1
  assert config.execution_note() == (
      "steps_per_execution 3 -> 1: reduced to divide log_every 10 and checkpoint_every "
      "100, so that progress lines and checkpoints fall on execution boundaries; to run 3 "
      "steps per call, set trainer.log_every=30 and trainer.checkpoint_every=300")
  kept = TrainerConfig(steps_per_execution=3, log_every=30, checkpoint_every=300)
  assert kept.execution_steps() == 3 and kept.execution_note() is None
  assert TrainerConfig().execution_note() is None  # The default 10 divides both.
  assert TrainerConfig(steps_per_execution=4, checkpoint_every=0).execution_note().endswith(
      "to run 4 steps per call, set trainer.log_every=20")


def test_the_recorder_adds_each_epochs_eval_loss_to_its_logs_as_val_loss():
  state = _state(total=100)  # Epochs of 50 steps.
  recorder = _recorder(state, [0.9, 0.8], [0.7] * 100)
  for epoch in range(2):
    recorder.on_epoch_begin(epoch)
    for batch in range(50):
      recorder.steps.ran = epoch * 50 + batch + 1
      recorder.on_train_batch_end(batch, {"loss": 0.7})
    logs = {"loss": 0.7}
    recorder.on_epoch_end(epoch, logs)
    assert logs == {"loss": 0.7, "val_loss": [0.9, 0.8][epoch]}
  assert [e["step"] for e in state.epochs] == [50, 100]


def _straight_then_killed_and_resumed(tmp_path, module_text: str, layout: str,
                                      log_every: int):
  """Two jobs of ``module_text`` (3 epochs of 5 steps, steps_per_execution 2, a checkpoint
  every 2 steps): one uninterrupted, and one whose callback kills the process (exit 3)
  once, when hparams "die" names a marker file that does not exist yet, then rerun to
  resume. Returns the two run records."""
  import json  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  module = tmp_path / "module.py"
  module.write_text(module_text)
  root = str(tmp_path / "ex")
  feats, _, rows = tu.write_examples(root, rows=80, eval_rows=32)
  marker = str(tmp_path / "died")
  where = {"mesh": [1, 2]} if layout == "mesh" else {}
  jobs = {name: tu.job_dict(str(tmp_path / name), root, feats, rows, layout=layout,
                            epochs=3, batch_size=16, steps_per_execution=2,
                            log_every=log_every, checkpoint_every=2, module_file=str(module),
                            hparams={"die": die}, **where)
          for name, die in (("straight", ""), ("killed", marker))}
  straight = tu.run_job(jobs["straight"], str(tmp_path / "straight"))
  path = str(tmp_path / "killed.json")
  with open(path, "w") as f:
    json.dump(jobs["killed"], f)
  proc = subprocess.run([sys.executable, "-m",
                         "tfx_parallel.components.distributed_trainer.run.train", "--job", path],
                        capture_output=True, text=True, timeout=300)
  assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
  return straight, tu.run_job(jobs["killed"], str(tmp_path / "killed"))


# ReduceLROnPlateau cuts the rate at every epoch's end from the second on (min_delta
# huge); the process dies at the start of the epoch after the step-10 checkpoint when
# hparams "die" is set and its marker file does not exist yet.
PLATEAU_MODULE = '''
import os
import tf_keras


class Die(tf_keras.callbacks.Callback):
  def __init__(self, marker):
    super().__init__()
    self.marker = marker

  def on_epoch_begin(self, epoch, logs=None):
    if self.marker and epoch == 2 and not os.path.exists(self.marker):
      open(self.marker, "w").close()
      os._exit(3)
''' + LINEAR_MODEL + '''

def callbacks(spec):
  return [tf_keras.callbacks.ReduceLROnPlateau(monitor="val_loss", min_delta=1e9,
                                               patience=0, factor=0.1),
          Die(spec.hparams["die"])]
'''


@pytest.mark.slow
def test_a_run_killed_after_an_epochs_checkpoint_resumes_with_its_on_epoch_end_changes(
    tmp_path):
  """The checkpoint at an epoch's last step (10, of 5-step epochs) is written after the
  user's on_epoch_end: ReduceLROnPlateau's cut at that epoch's end is in it, and the
  resumed run trains epoch 2 at the cut rate, as the uninterrupted run does."""
  straight, resumed = _straight_then_killed_and_resumed(tmp_path, PLATEAU_MODULE, "single",
                                                        log_every=2)
  assert resumed["resumed_from_step"] == 10
  rates = [r["learning_rate"] for r in straight["records"]]
  assert rates == pytest.approx([0.1] * 5 + [0.01] * 3)  # Cut at epoch 1's end.
  assert [r["learning_rate"] for r in resumed["records"]] == pytest.approx(rates)
  assert [e["eval_loss"] for e in resumed["epochs"]] == pytest.approx(
      [e["eval_loss"] for e in straight["epochs"]], rel=1e-6)


# LearningRateScheduler halves the rate at every epoch's start (rate-relative); the
# process dies inside epoch 1 (5-step epochs), after the step-8 checkpoint, when hparams
# "die" is set and its marker file does not exist yet.
HALVING_MODULE = '''
import os
import tf_keras


class Die(tf_keras.callbacks.Callback):
  def __init__(self, marker):
    super().__init__()
    self.marker, self.epoch = marker, 0

  def on_epoch_begin(self, epoch, logs=None):
    self.epoch = epoch

  def on_train_batch_begin(self, batch, logs=None):
    if self.marker and self.epoch == 1 and batch >= 3 and not os.path.exists(self.marker):
      open(self.marker, "w").close()
      os._exit(3)
''' + LINEAR_MODEL + '''

def callbacks(spec):
  return [tf_keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 0.5),
          Die(spec.hparams["die"])]
'''


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["single", "mesh"])
def test_a_run_killed_inside_an_epoch_applies_a_rate_relative_schedule_once(
    tmp_path, layout):
  """Killed at step 8 (inside epoch 1, after its step-8 checkpoint) and resumed: the
  checkpoint holds the rate the scheduler set at epoch 1's start, and its on_epoch_begin(1)
  runs again on resume; the trainer sets the rate back to epoch 1's rate before any
  callback's on_epoch_begin, so the schedule halves it once, as in the uninterrupted run."""
  straight, resumed = _straight_then_killed_and_resumed(tmp_path, HALVING_MODULE, layout,
                                                        log_every=1)
  assert resumed["resumed_from_step"] == 8
  rates = [r["learning_rate"] for r in straight["records"]]
  assert rates == pytest.approx([0.05] * 5 + [0.025] * 5 + [0.0125] * 5)
  assert [r["learning_rate"] for r in resumed["records"]] == pytest.approx(rates)
  assert [e["eval_loss"] for e in resumed["epochs"]] == pytest.approx(
      [e["eval_loss"] for e in straight["epochs"]], rel=1e-6)
