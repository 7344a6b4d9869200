"""How long a run trains (plan/length.py): the length that is set, or one chosen from the
data with a floor on steps and early stopping that keeps the best weights; and a real
run of the built-in CSV trainer on a 406-row file shaped like the issue's (issue 38)."""
import dataclasses
import math

import numpy as np
import pytest

import trainer_util as tu
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.distributed_trainer.plan import length
from tfx_parallel.pipeline import config as config_lib


def test_a_small_csv_gets_the_floor_and_says_why():
  # The file: 329 train rows at batch 64 are 5 steps an epoch; 5 epochs were 25.
  got = length.choose(steps=0, epochs=0, min_steps=1000, patience=10, train_rows=329,
                      batch_size=64)
  assert (got.total_steps, got.steps_per_epoch, got.patience, got.automatic) == (
      1000, 5, 10, True)
  assert "min_steps 1000" in got.reason and "5 epochs would be only 25 steps" in got.reason
  assert "10 evaluations" in got.reason and "keeping the best weights" in got.reason


def test_large_data_keeps_five_epochs():
  got = length.choose(0, 0, 1000, 10, train_rows=20_000, batch_size=64)
  assert got.total_steps == 5 * 312 and got.automatic
  assert "5 epochs, at least min_steps 1000" in got.reason


def test_a_length_that_is_set_is_trained_in_full():
  got = length.choose(steps=0, epochs=5, min_steps=500, patience=10, train_rows=329,
                      batch_size=64)
  assert (got.total_steps, got.patience, got.automatic) == (25, 0, False)
  assert "5 epoch(s) as set (epochs)" in got.reason
  got = length.choose(steps=30, epochs=5, min_steps=500, patience=10, train_rows=329,
                      batch_size=64)
  assert (got.total_steps, got.patience) == (30, 0) and "as set (steps)" in got.reason
  assert length.choose(0, 0, 500, 0, 329, 64).patience == 0  # patience 0: never stops early.


def test_the_csv_default_is_the_automatic_length():
  trainer = config_lib.default_trainer("data.csv")
  assert (trainer.epochs, trainer.steps, trainer.min_steps, trainer.patience) == (
      0, 0, 1000, 10)


@pytest.mark.parametrize("key,value,fragment", [
    ("epochs", -1, "must be >= 0"), ("min_steps", -5, "must be an integer >= 0"),
    ("patience", 1.5, "must be an integer >= 0")])
def test_bad_length_settings_name_their_key(key, value, fragment):
  with pytest.raises(ConfigError, match=fragment) as e:
    dataclasses.replace(TrainerConfig(), **{key: value}).validate()
  assert e.value.key == key


def write_auto_mpg_like(root: str, seed: int = 0):
  """406 rows shaped like the issue's regression file (auto-mpg): 7 numeric columns on
  their raw scales (cylinders, displacement, horsepower, weight, acceleration, model
  year, origin), the label ``y`` (mpg) falling with weight roughly as 1/weight; 338 train and
  68 eval rows. Returns (feature keys, train x, train y, eval x, eval y)."""
  rng = np.random.default_rng(seed)
  n = 406
  weight = rng.uniform(1600, 5100, n)
  cylinders = np.clip(np.round(weight / 800 + rng.normal(0, 0.6, n)) * 1.0, 3, 8)
  displacement = 0.09 * weight + 25 * cylinders + rng.normal(0, 25, n)
  horsepower = 0.03 * weight + 0.2 * displacement + rng.normal(0, 12, n)
  acceleration = 22 - 0.04 * horsepower + rng.normal(0, 1.5, n)
  year = rng.integers(70, 83, n).astype(float)
  origin = rng.integers(1, 4, n).astype(float)
  mpg = 1.15e5 / weight + 0.75 * (year - 76) + 1.2 * (origin - 1) + rng.normal(0, 2.6, n)
  x = np.stack([cylinders, displacement, horsepower, weight, acceleration, year, origin], 1)
  keys = ["cylinders", "displacement", "horsepower", "weight", "acceleration", "model_year",
          "origin"]
  train = np.arange(n) % 6 != 0  # 338 / 68
  tu.write_rows(root, keys, "y", x[train], mpg[train], x[~train], mpg[~train])
  return keys, x[train], mpg[train], x[~train], mpg[~train]


def write_separable(root: str, seed: int = 1):
  """A small binary file a model gets fully right: 300 train and 60 eval rows of two
  uniform columns, label x0 + x1 / 2 > 0, rows within 0.1 of the boundary left out.
  Returns (eval labels)."""
  rng = np.random.default_rng(seed)
  x = rng.uniform(-1, 1, (600, 2))
  margin = x[:, 0] + 0.5 * x[:, 1]
  x, y = x[np.abs(margin) > 0.1][:360], (margin[np.abs(margin) > 0.1][:360] > 0) * 1.0
  tu.write_rows(root, ["x0", "x1"], "y", x[:300], y[:300], x[300:], y[300:])
  return y[300:]


@pytest.mark.slow
def test_the_default_trains_a_406_row_file_to_what_ridge_reaches(tmp_path):
  """The built-in CSV trainer (mlp on standardised columns, Adam 0.01) with the default
  length: the floor of 1,000 steps (5 epochs would be 25), early stopping on the 68-row
  eval set whose noise must not read as divergence, and an eval R^2 near what
  scikit-learn's Ridge gets on the same rows (the issue: R^2 -4.71 after 25 steps). And
  the same run at learning rate 10,000: diverged, and stopped at once (one process runs
  both jobs)."""
  from sklearn.linear_model import Ridge  # pylint: disable=g-import-not-at-top
  root = str(tmp_path / "ex")
  keys, x, y, ex, ey = write_auto_mpg_like(root)
  trainer = config_lib.default_trainer("data.csv")
  config = {k: v for k, v in dataclasses.asdict(trainer).items()
            if k in ("model", "normalize", "learning_rate", "optimizer", "epochs", "steps",
                     "min_steps", "patience", "batch_size", "hidden_units")}
  jobs = [tu.job_dict(str(tmp_path / name), root, keys, len(y), layout="single",
                      **dict(config, **extra))
          for name, extra in (("default", {}), ("lr1e4", {"learning_rate": 1e4}))]
  cls_eval = write_separable(str(tmp_path / "cls"))
  jobs.append(tu.job_dict(str(tmp_path / "separable"), str(tmp_path / "cls"), ["x0", "x1"],
                          300, layout="single", **dict(config, task="binary")))
  tu.run_jobs_in_one_process(jobs, str(tmp_path))
  history, blown, separable = (tu.read_history(job) for job in jobs)
  record = history["training_length"]
  assert record["automatic"] and record["total_steps"] == 1000, record
  assert "5 epochs would be only 25 steps" in record["reason"]
  stop = history["early_stopping"]
  assert stop["patience"] == 10 and stop["best_step"] <= history["steps_run"]
  best = min(e["eval_loss"] for e in history["epochs"])
  assert stop["best_eval_loss"] == pytest.approx(best)
  assert not history["diverged"], history["diverged_reason"]
  r2 = 1 - best / float(np.var(ey))
  peer = Ridge(alpha=1.0).fit(x, y)
  ridge_r2 = 1 - float(np.mean((peer.predict(ex) - ey) ** 2)) / float(np.var(ey))
  assert ridge_r2 > 0.7, ridge_r2  # The data is learnable.
  assert r2 > ridge_r2 - 0.05, (r2, ridge_r2, history["epochs"][-5:])
  # Every eval loss came with its standard error (the divergence rule's noise).
  assert all(math.isfinite(e["eval_loss_se"]) and e["eval_loss_se"] > 0
             for e in history["epochs"])
  # Learning rate 10,000: caught at the first record or evaluation, not after patience.
  assert blown["diverged"] and blown["stopped_early"], blown["diverged_reason"]
  assert blown["steps_run"] <= 20, (blown["steps_run"], blown["diverged_reason"])
  # The evaluator's verdicts on these real curves (convergence.py, with the trivial
  # predictors measured here): the regression run stopped improving, converged.
  from tfx_parallel.components.convergence_evaluator import convergence, reference  # pylint: disable=g-import-not-at-top
  verdict = convergence.analyze(convergence.curves_from_history(history), convergence.Rules(),
                                float(np.var(ey)), history["epochs"][-1]["eval_loss"])
  assert verdict.state == "converged", verdict.reason
  verdict = convergence.analyze(convergence.curves_from_history(blown), convergence.Rules(),
                                float(np.var(ey)), math.nan)  # Stopped before an eval.
  assert verdict.state == "diverged" and "exploded" in verdict.reason, verdict.reason
  # The separable classifier: its log loss falls toward 0. Judged as if the run had ended
  # at each evaluation, it is never "improving" for ever once below 0.5 % of the prior's.
  # Since the trend is judged against the recorded per-evaluation standard errors (#47),
  # that noise (measured: +-30 % of the loss on these 60 rows, a trend of -10 to -15 % +-
  # 50 % over 5 evaluations from step 500) already makes the run "stopped falling" there;
  # without those errors (a history that does not record eval_loss_se) the trend is judged
  # on its fit's residuals, still falls by more than plateau_tolerance (measured: steps
  # 500-1000), and the floor rule must call it converged at its floor.
  prior = reference.prior_log_loss([int((cls_eval == 0).sum()), int((cls_eval == 1).sum())])
  assert separable["epochs"][-1]["eval_loss"] < 0.01 * prior
  floor_cases = below_floor = 0
  for end in [e["step"] for e in separable["epochs"]]:
    epochs = [e for e in separable["epochs"] if e["step"] <= end]
    last = epochs[-1]["eval_loss"]
    if last >= 0.005 * prior:
      continue
    below_floor += 1
    for recorded_errors in (True, False):
      prefix = dict(separable, records=[r for r in separable["records"] if r["step"] <= end],
                    epochs=[e if recorded_errors else
                            {k: v for k, v in e.items() if k != "eval_loss_se"}
                            for e in epochs])
      curves = convergence.curves_from_history(prefix)
      no_floor = convergence.analyze(curves, convergence.Rules(trivial_fraction=1e-9), prior,
                                     last)
      verdict = convergence.analyze(curves, convergence.Rules(), prior, last)
      assert verdict.state == "converged", (end, recorded_errors, verdict.reason)
      if no_floor.state == "improving":
        floor_cases += 1
        assert "at its floor" in verdict.reason, verdict.reason
  assert below_floor, "the run never got below 0.5 % of the prior's log loss"
  assert floor_cases, "the run never sat at its floor while still falling"
