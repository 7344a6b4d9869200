"""Convergence analysis of a training history (``history.json``); pure numpy, no TFX.

The reference is the **trivial predictor**, not the first logged loss: the loss of a
model that ignores the features, measured on the eval split by the evaluator
(reference.py): the label variance for regression (predicting the mean), the log loss
of the class priors for classification. ``loss_vs_trivial`` = the model's eval loss /
the trivial predictor's (eval MSE / label variance = 1 - R^2; eval log loss / prior
log loss): 1 means nothing was learned, 0 is perfect.

Quantities:

* ``target_loss`` = config ``target_loss`` if set, else ``target_fraction`` x the
  trivial predictor's loss; ``steps_to_target`` / ``seconds_to_target`` = step /
  ``wall_time`` of the first training record with loss <= target (``-1`` if none). A
  time-to-target measure; it decides the state only when ``target_loss`` is set.
* ``convergence_rate`` = least-squares slope of ln(loss) against step over the records
  whose loss is finite and > 0 (NaN with fewer than 2 such records).
* ``tail_change`` = exp(slope x span) - 1 of that fit over the last ``plateau_window``
  records: the fitted relative change of the training loss across the tail.
* ``eval_loss_change`` = (last eval loss - best earlier eval loss) / best earlier one,
  over the epochs with a finite eval loss (NaN with fewer than two): how much the last
  epoch improved on everything before it (negative = better). Reported, not judged on:
  one noisy last value decides it.
* ``eval_loss_trend`` = the fitted relative change of the eval loss over its last
  ``plateau_window`` values (least squares against the evaluation index), and
  ``eval_loss_trend_se`` its standard error (:func:`eval_trend`): what decides
  "still falling".

The state (:func:`classify`), checked in this order; ``reason`` says which rule fired:

1. ``diverged``: components/common/divergence.py (a NaN/inf loss; a negative loss of a
   loss that cannot be negative; a loss over ``explode_factor`` x the starting loss; an
   eval loss that rose by more than ``rise_tolerance`` in one epoch and by more than its
   noise, ``rise_noise_z`` standard errors, with the training loss rising by more than
   ``rise_tolerance`` too), or the trainer stopped the run for one of those, or (no two
   eval losses) the training tail rose by more than ``rise_tolerance``.
1b. ``overfitting``: the last eval loss is above the best earlier one by more than
   ``plateau_tolerance`` and ``rise_noise_z`` standard errors while the training loss
   fell (divergence.overfitting); the trainer exported the best evaluation's weights,
   and those beat the trivial predictor by ``min_gain`` (else ``plateaued``). Blessed
   as ``converged`` is: the exported model is the best one seen.
2. ``stalled``: the eval loss did not move (every epoch within ``stall_tolerance`` of
   the first, relative) and the model is no better than the trivial predictor: nothing
   was learned, e.g. a learning rate of 0. Not a divergence.
3. ``improving``: the loss is still falling: the fitted trend of the last
   ``plateau_window`` eval losses fell by more than ``plateau_tolerance`` and by more
   than :data:`TREND_Z` (2) of its standard errors (without two eval losses,
   ``tail_change < -plateau_tolerance``) and the model is not yet at its floor (below); or the run meets 4 from fewer than ``min_records``
   training records: too short to judge. More epochs would help.
4. ``converged``: the loss stopped falling, or it sits at the floor: the last two eval
   losses (without two, the training tail's first and last) are at most
   ``trivial_fraction`` x the trivial predictor's loss (1 % by default: R^2 >= 0.99), so
   any further fall changes the model by less than that fraction of what it learned,
   though a tiny loss still falls in relative terms; and the model beats the trivial
   predictor by at least ``min_gain`` (``loss_vs_trivial <= 1 - min_gain``), and
   ``target_loss``, when set, was reached (final loss or median tail loss <= target).
5. ``plateaued``: the loss stopped falling without meeting 4: stuck above the target, or
   too close to the trivial predictor.
"""
import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_parallel.components.common import divergence
from tfx_parallel.components.convergence_evaluator import properties as P

RECORD_FIELDS = ("step", "loss", "learning_rate", "examples_per_sec", "wall_time")


@dataclasses.dataclass(frozen=True)
class Curves:
  """History records as float64 arrays sorted by step (a missing field is NaN)."""
  step: np.ndarray
  loss: np.ndarray
  learning_rate: np.ndarray
  examples_per_sec: np.ndarray
  wall_time: np.ndarray
  epochs: Tuple[Dict[str, float], ...]  # {"epoch", "step", "train_loss", "eval_loss", ...}
  initial_eval_loss: float = math.nan   # The untrained model's eval loss (NaN: unknown).

  @property
  def eval_losses(self) -> List[float]:
    """The eval loss of every epoch that measured one, in epoch order (NaN included)."""
    return [e["eval_loss"] for e in self.epochs if e["eval_loss"] is not None]

  @property
  def eval_train_losses(self) -> List[Optional[float]]:
    """The training loss at each of :attr:`eval_losses` (None: not recorded)."""
    return [e["train_loss"] if math.isfinite(e["train_loss"]) else None
            for e in self.epochs if e["eval_loss"] is not None]

  @property
  def eval_errors(self) -> List[float]:
    """The standard error of each of :attr:`eval_losses` (NaN: not recorded)."""
    return [e.get("eval_loss_se", math.nan) for e in self.epochs
            if e["eval_loss"] is not None]


@dataclasses.dataclass(frozen=True)
class Rules:
  """The tolerances of :func:`classify` (EvaluatorConfig holds the same fields)."""
  target_loss: Optional[float] = None
  target_fraction: float = 0.01
  plateau_window: int = 5
  plateau_tolerance: float = 0.02
  rise_tolerance: float = divergence.RISE_TOLERANCE
  explode_factor: float = divergence.EXPLODE_FACTOR
  stall_tolerance: float = 1e-4
  min_gain: float = 0.1
  min_records: int = 5
  trivial_fraction: float = 0.01
  rise_noise_z: float = divergence.RISE_NOISE_Z

  @classmethod
  def of(cls, config) -> "Rules":
    return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Convergence:
  """What :func:`analyze` found; field meanings are in the module docstring."""
  initial_loss: float
  final_loss: float
  best_loss: float
  target_loss: float
  steps_to_target: int
  seconds_to_target: float
  convergence_rate: float
  tail_change: float
  eval_loss_change: float
  eval_loss_trend: float
  eval_loss_trend_se: float
  state: str
  reason: str
  trivial_loss: float
  loss_vs_trivial: float


def _float(value) -> float:
  return math.nan if value is None else float(value)


def curves_from_history(history: Dict[str, Any]) -> Curves:
  """Builds :class:`Curves` from a parsed history.json; raises if it has no records."""
  records = sorted(history.get("records") or [], key=lambda r: r["step"])
  if not records:
    raise ValueError("history has no records: the trainer logged no step "
                     f"(keys present: {sorted(history)})")
  columns = {f: np.array([_float(r.get(f)) for r in records], np.float64)
             for f in RECORD_FIELDS}
  epochs = tuple(
      {"epoch": int(e["epoch"]), "step": int(e.get("step", -1)),
       "train_loss": _float(e.get("train_loss")),
       # None: not measured in that epoch (NaN: measured, and not a number).
       "eval_loss": None if e.get("eval_loss") is None else float(e["eval_loss"]),
       "eval_loss_se": _float(e.get("eval_loss_se"))}
      for e in sorted(history.get("epochs") or [], key=lambda e: e["epoch"]))
  return Curves(epochs=epochs, initial_eval_loss=_float(history.get("initial_eval_loss")),
                **columns)


def linear_slope(x: Sequence[float], y: Sequence[float]) -> float:
  """Least-squares slope of y on x over the finite pairs; NaN with < 2 distinct x."""
  x = np.asarray(x, np.float64)
  y = np.asarray(y, np.float64)
  keep = np.isfinite(x) & np.isfinite(y)
  x, y = x[keep], y[keep]
  if x.size < 2 or np.ptp(x) == 0:
    return math.nan
  xc = x - x.mean()
  return float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))


def log_slope(steps: Sequence[float], loss: Sequence[float]) -> float:
  """Least-squares slope of ln(loss) vs step over the records with finite loss > 0."""
  loss = np.asarray(loss, np.float64)
  positive = np.isfinite(loss) & (loss > 0)
  with np.errstate(divide="ignore", invalid="ignore"):
    log_loss = np.where(positive, np.log(np.where(positive, loss, 1.0)), np.nan)
  return linear_slope(steps, log_loss)


def tail_change(steps: np.ndarray, loss: np.ndarray, window: int) -> float:
  """Fitted relative change of the loss across the last ``window`` records."""
  steps, loss = steps[-window:], loss[-window:]
  if steps.size < 2:
    return 0.0
  slope = log_slope(steps, loss)
  if math.isnan(slope):
    return 0.0
  return float(math.expm1(slope * (steps[-1] - steps[0])))


def first_reached(curves: Curves, target: float) -> Tuple[int, float]:
  """(step, wall_time) of the first record with loss <= target; (-1, -1.0) if none."""
  if not math.isfinite(target):
    return P.NOT_AVAILABLE, float(P.NOT_AVAILABLE)
  with np.errstate(invalid="ignore"):
    hits = np.flatnonzero(curves.loss <= target)
  if hits.size == 0:
    return P.NOT_AVAILABLE, float(P.NOT_AVAILABLE)
  seconds = curves.wall_time[hits[0]]
  return int(curves.step[hits[0]]), float(seconds) if math.isfinite(seconds) else -1.0


def eval_loss_change(curves: Curves) -> float:
  """(last eval loss - best earlier one) / best earlier one, over the epochs with a
  finite eval loss; NaN with fewer than two (or a best earlier loss of 0)."""
  losses = [v for v in curves.eval_losses if math.isfinite(v)]
  if len(losses) < 2:
    return math.nan
  best = min(losses[:-1])
  return (losses[-1] - best) / abs(best) if best else math.nan


TREND_Z = 2.0  # A trend "falls" when it is below 0 by more than this many standard errors.


def eval_trend(curves: Curves, window: int) -> Tuple[float, float]:
  """(fitted relative change of the eval loss over its last ``window`` finite values,
  its standard error); (NaN, NaN) with fewer than two.

  Least squares of the eval loss against its evaluation index; the change is slope x
  span / the fitted first value. Its standard error is the larger of the fit's (the
  residuals' spread, from three values) and the one the recorded per-evaluation
  standard errors (``eval_loss_se``) give the slope: a small eval set's noise counts
  even when a few values happen to line up."""
  pairs = [(v, e) for v, e in zip(curves.eval_losses, curves.eval_errors)
           if math.isfinite(v)][-window:]
  n = len(pairs)
  if n < 2:
    return math.nan, math.nan
  y = np.array([v for v, _ in pairs])
  se = np.array([e if math.isfinite(e) else 0.0 for _, e in pairs])
  xc = np.arange(n, dtype=np.float64) - (n - 1) / 2.0
  sxx = float(np.dot(xc, xc))
  slope = float(np.dot(xc, y - y.mean()) / sxx)
  first = float(y.mean() - slope * (n - 1) / 2.0)
  measured = math.sqrt(float(np.dot(xc * xc, se * se))) / sxx
  fitted = 0.0
  if n >= 3:
    residuals = y - (y.mean() + slope * xc)
    fitted = math.sqrt(float(np.dot(residuals, residuals)) / (n - 2) / sxx)
  if first <= 0:
    return math.nan, math.nan
  span = (n - 1) / first
  return slope * span, max(measured, fitted) * span


def _pct(value: float) -> str:
  return f"{100 * value:+.2f} %"


def classify(curves: Curves, rules: Rules, loss_vs_trivial: float, tail: float,
             trend: Tuple[float, float], target: float, flagged_diverged: bool = False,
             flagged_reason: str = "", non_negative: bool = True) -> Tuple[str, str]:
  """(state, reason): the module docstring's rules 1-6, in order. ``trend``: (the eval
  loss's fitted relative change over the last ``plateau_window`` evaluations, its
  standard error), :func:`eval_trend`."""
  loss = curves.loss
  evals = curves.eval_losses
  why = divergence.reason(loss, evals, non_negative, rules.explode_factor,
                          rules.rise_tolerance, curves.eval_errors, rules.rise_noise_z,
                          curves.initial_eval_loss, curves.eval_train_losses)
  if why:
    return P.DIVERGED, why
  if flagged_diverged:
    return P.DIVERGED, flagged_reason or "the trainer flagged the run as diverged"
  finite_evals = [v for v in evals if math.isfinite(v)]
  if len(finite_evals) < 2 and tail > rules.rise_tolerance:
    return P.DIVERGED, (f"training loss rose {_pct(tail)} over the last "
                        f"{rules.plateau_window} records (no two eval losses to judge by), "
                        f"more than rise_tolerance {rules.rise_tolerance:g}")
  gain = 1.0 - loss_vs_trivial  # NaN when the trivial predictor's loss is unknown.
  beats = math.isfinite(gain) and gain >= rules.min_gain
  gain_text = (f"{100 * gain:.1f} % below the trivial predictor's loss"
               if math.isfinite(gain) else
               "not compared with the trivial predictor (its loss is unknown)")
  overfit = divergence.overfitting(evals, curves.eval_train_losses, curves.eval_errors,
                                   rules.plateau_tolerance, rules.rise_noise_z)
  if overfit and beats:
    return P.OVERFITTING, (f"{overfit}; the trainer exported the best evaluation's "
                           f"weights, which these metrics measure: {gain_text}")
  if overfit:
    return P.PLATEAUED, (f"{overfit}, and the model is {gain_text}; converged needs at "
                         f"least min_gain {100 * rules.min_gain:g} %")
  if len(finite_evals) >= 2 and not beats:
    first = finite_evals[0]
    moved = max(abs(v - first) for v in finite_evals)
    if moved <= rules.stall_tolerance * abs(first):
      return P.STALLED, (f"the eval loss did not move over {len(finite_evals)} epochs "
                         f"(within {rules.stall_tolerance:g} of {first:.6g}) and the model "
                         f"is {gain_text}: nothing was learned (a learning rate of 0?)")
  trend_change, trend_se = trend
  if len(finite_evals) >= 2 and math.isfinite(trend_change):
    n = min(len(finite_evals), rules.plateau_window)
    change = trend_change
    what = (f"the fitted trend of the last {n} eval losses {_pct(trend_change)} "
            f"(+-{100 * trend_se:.2f} % standard error)")
    falling = (trend_change < -rules.plateau_tolerance
               and trend_change + TREND_Z * trend_se < 0)
  else:
    change = tail
    what = f"the training loss over the last {rules.plateau_window} records {_pct(tail)}"
    falling = change < -rules.plateau_tolerance
  if falling:
    floor = _at_floor(loss, finite_evals, loss_vs_trivial, rules)
    if not floor:
      return P.IMPROVING, (f"still falling: {what}, beyond plateau_tolerance "
                           f"{rules.plateau_tolerance:g}" + (
                               f" and {TREND_Z:g} standard errors"
                               if what.startswith("the fitted") else ""))
    stopped = f"at its floor ({floor}), though {what}"
  else:
    stopped = f"stopped falling ({what})"
  if not beats:
    return P.PLATEAUED, (f"{stopped}, but the model is {gain_text}; converged needs at "
                         f"least min_gain {100 * rules.min_gain:g} %")
  if rules.target_loss is not None:
    tail_median = float(np.median(loss[-rules.plateau_window:]))
    if not (loss[-1] <= target or tail_median <= target):
      return P.PLATEAUED, (f"{stopped}, {gain_text}, but the training loss "
                           f"{loss[-1]:.6g} is above target_loss {target:.6g}")
  if loss.size < rules.min_records:
    return P.IMPROVING, (f"too short to judge: {stopped}, {gain_text}, but from "
                         f"{loss.size} training record(s); converged needs at least "
                         f"min_records {rules.min_records}: train longer")
  return P.CONVERGED, f"{stopped}, {gain_text}"


def _at_floor(loss: np.ndarray, evals: List[float], loss_vs_trivial: float,
              rules: Rules) -> str:
  """How the model sits at its floor (module docstring, rule 4), or "" if it does not:
  its last two eval losses (without two, the training tail's first and last) are each
  at most ``trivial_fraction`` x the trivial predictor's loss. The earlier loss is put
  on the trivial scale through its ratio to the last one (``loss_vs_trivial`` is the
  last model's, in the evaluator's metric)."""
  if not (math.isfinite(loss_vs_trivial) and 0 <= loss_vs_trivial <= rules.trivial_fraction):
    return ""
  if len(evals) >= 2:
    earlier, last, what = evals[-2], evals[-1], "the last two eval losses"
  else:
    tail = loss[-rules.plateau_window:]
    earlier, last, what = tail[0], tail[-1], "the training tail's first and last losses"
  if not (math.isfinite(earlier) and math.isfinite(last) and last > 0):
    return ""
  earlier_vs_trivial = earlier / last * loss_vs_trivial
  if earlier_vs_trivial > rules.trivial_fraction:
    return ""
  return (f"{what} are {100 * earlier_vs_trivial:.2g} % and {100 * loss_vs_trivial:.2g} % "
          f"of the trivial predictor's, within trivial_fraction "
          f"{100 * rules.trivial_fraction:g} %")


def analyze(curves: Curves, rules: Rules = Rules(), trivial_loss: float = math.nan,
            model_loss: float = math.nan, flagged_diverged: bool = False,
            flagged_reason: str = "", non_negative: bool = True) -> Convergence:
  """The convergence summary of ``curves`` (module docstring).

  Args:
    curves: the training history.
    rules: the tolerances (from EvaluatorConfig).
    trivial_loss, model_loss: the trivial predictor's and the model's loss on the eval
      split, in the evaluator's metric (reference.py); NaN: unknown.
    flagged_diverged, flagged_reason: the trainer's own verdict (history.json).
    non_negative: the training loss cannot be negative (divergence.py).
  """
  loss = curves.loss
  initial = float(loss[0])
  target = (float(rules.target_loss) if rules.target_loss is not None
            else rules.target_fraction * trivial_loss)
  finite = loss[np.isfinite(loss)]
  step, seconds = first_reached(curves, target)
  tail = tail_change(curves.step, loss, rules.plateau_window)
  eval_change = eval_loss_change(curves)
  ratio = model_loss / trivial_loss if trivial_loss > 0 else math.nan  # NaN stays NaN.
  trend = eval_trend(curves, rules.plateau_window)
  state, reason = classify(curves, rules, ratio, tail, trend, target,
                           flagged_diverged, flagged_reason, non_negative)
  return Convergence(
      initial_loss=initial,
      final_loss=float(loss[-1]),
      best_loss=float(finite.min()) if finite.size else math.nan,
      target_loss=target,
      steps_to_target=step,
      seconds_to_target=seconds,
      convergence_rate=log_slope(curves.step, loss),
      tail_change=tail,
      eval_loss_change=eval_change,
      eval_loss_trend=trend[0], eval_loss_trend_se=trend[1],
      state=state, reason=reason,
      trivial_loss=trivial_loss, loss_vs_trivial=ratio)


def parameter_error(weights: Optional[Dict[str, Any]], true_weights: Optional[List[float]],
                    true_bias: Optional[float]) -> Tuple[float, float]:
  """(max_i |w_hat_i - w_i|, |b_hat - b|), each -1 when either side is missing.

  ``weights`` is history.json's ``{"kernel": [[w], ...], "bias": [b]}`` in feature
  order. A kernel longer than ``true_weights`` (features padded to the model axis) is
  compared against zeros for the padding; a shorter one is an error.
  """
  weight_error = bias_error = float(P.NOT_AVAILABLE)
  if not weights:
    return weight_error, bias_error
  if true_weights is not None and "kernel" in weights:
    kernel = np.asarray(weights["kernel"], np.float64).reshape(-1)
    truth = np.asarray(true_weights, np.float64).reshape(-1)
    if kernel.size < truth.size:
      raise ValueError(f"history weights have {kernel.size} kernel entries but the "
                       f"examples have {truth.size} true weights")
    truth = np.pad(truth, (0, kernel.size - truth.size))
    weight_error = float(np.max(np.abs(kernel - truth))) if kernel.size else math.nan
  if true_bias is not None and weights.get("bias") is not None:
    bias = np.asarray(weights["bias"], np.float64).reshape(-1)
    bias_error = float(abs(bias[0] - float(true_bias)))
  return weight_error, bias_error


def _json_float(value: float) -> Optional[float]:
  return float(value) if math.isfinite(value) else None


def curves_document(curves: Curves, summary: Convergence) -> Dict[str, Any]:
  """The ``curves.json`` content: strict JSON, non-finite values written as null."""
  return {
      "target_loss": _json_float(summary.target_loss),
      "trivial_loss": _json_float(summary.trivial_loss),
      "steps_to_target": summary.steps_to_target if summary.steps_to_target >= 0 else None,
      "state": summary.state,
      "reason": summary.reason,
      "records": {f: ([int(v) for v in curves.step] if f == "step" else
                      [_json_float(v) for v in getattr(curves, f)]) for f in RECORD_FIELDS},
      "epochs": [{k: (_json_float(v) if isinstance(v, float) else v) for k, v in e.items()}
                 for e in curves.epochs],
  }
