"""Convergence analysis of a training history (``history.json``); pure numpy, no TFX.

Definitions (W = ``plateau_window`` records, the "tail"):

* ``target_loss`` = the configured absolute target, else ``target_fraction`` x the first
  record's loss. ``steps_to_target`` / ``seconds_to_target`` = step / ``wall_time`` of
  the first record whose loss <= target (``-1`` if none; ``wall_time`` is seconds since
  training started).
* ``convergence_rate`` = least-squares slope of ln(loss) against step over the records
  whose loss is finite and > 0 (NaN with fewer than 2 such records).
* ``tail_change`` = exp(slope x span) - 1 of the same fit over the last W records: the
  fitted relative change across the tail (0 with fewer than 2 records).
* ``eval_loss_change`` = relative change of the eval loss over the last epoch,
  (e_k - e_k-1) / e_k-1, from the last two epochs with a finite eval loss (NaN with
  fewer than two).
* The run "ends at target" when the final loss *or* the median loss of the tail is
  <= ``target_loss`` (the median keeps one noisy last batch from deciding).
* The loss is "still falling" when the eval loss fell by more than
  ``plateau_tolerance`` over the last epoch (``eval_loss_change < -plateau_tolerance``);
  without two epochs' eval losses, when the training tail fell by more than that
  (``tail_change < -plateau_tolerance``). The eval loss decides when it exists: the
  training loss of one batch is noisy (a few large labels make it jump), the eval loss
  over the whole split is not.
* The state (:func:`classify`), checked in this order:
  1. ``diverged``: a loss is NaN/inf, or the trainer flagged divergence, or
     final loss > initial loss, or the loss is rising at the end while the run does not
     end at target: ``tail_change > rise_tolerance`` (training loss) or
     ``eval_loss_change > rise_tolerance`` (eval loss, last epoch);
  2. ``converged``: the run ends at target;
  3. ``improving``: above target, and the loss is still falling: the training budget
     ended before the loss settled (more steps or a larger learning rate would help);
  4. ``plateaued``: above target, and the loss stopped falling.
"""
import dataclasses
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_parallel.components.convergence_evaluator import properties as P

RECORD_FIELDS = ("step", "loss", "learning_rate", "grad_norm", "examples_per_sec",
                 "wall_time")


@dataclasses.dataclass(frozen=True)
class Curves:
  """History records as float64 arrays sorted by step (a missing field is NaN)."""
  step: np.ndarray
  loss: np.ndarray
  learning_rate: np.ndarray
  grad_norm: np.ndarray
  examples_per_sec: np.ndarray
  wall_time: np.ndarray
  epochs: Tuple[Dict[str, float], ...]  # {"epoch", "step", "train_loss", "eval_loss"}


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
  state: str
  grad_norm_first: float
  grad_norm_last: float
  grad_norm_trend: float


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
       "train_loss": _float(e.get("train_loss")), "eval_loss": _float(e.get("eval_loss"))}
      for e in sorted(history.get("epochs") or [], key=lambda e: e["epoch"]))
  return Curves(epochs=epochs, **columns)


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
  """Relative change of the eval loss between the last two epochs that have a finite
  one; NaN with fewer than two such epochs (or a zero previous loss)."""
  losses = [e["eval_loss"] for e in curves.epochs if math.isfinite(e["eval_loss"])]
  if len(losses) < 2 or losses[-2] == 0:
    return math.nan
  return (losses[-1] - losses[-2]) / abs(losses[-2])


def classify(loss: np.ndarray, target: float, tail: float, window: int,
             rise_tolerance: float, flagged_diverged: bool = False,
             eval_change: float = math.nan, plateau_tolerance: float = 0.02) -> str:
  """``converged`` | ``improving`` | ``plateaued`` | ``diverged`` (module docstring)."""
  if flagged_diverged or not np.all(np.isfinite(loss)) or loss[-1] > loss[0]:
    return P.DIVERGED
  tail_median = float(np.median(loss[-window:]))
  above_target = not (loss[-1] <= target or tail_median <= target)  # True if target NaN.
  rising = tail > rise_tolerance or (math.isfinite(eval_change)
                                     and eval_change > rise_tolerance)
  if rising and above_target:
    return P.DIVERGED
  if not above_target:
    return P.CONVERGED
  change = eval_change if math.isfinite(eval_change) else tail
  return P.IMPROVING if change < -plateau_tolerance else P.PLATEAUED


def _first_last_finite(values: np.ndarray) -> Tuple[float, float]:
  finite = values[np.isfinite(values)]
  if finite.size == 0:
    return math.nan, math.nan
  return float(finite[0]), float(finite[-1])


def analyze(curves: Curves, target_loss: Optional[float], target_fraction: float,
            plateau_window: int, rise_tolerance: float,
            flagged_diverged: bool = False, plateau_tolerance: float = 0.02) -> Convergence:
  """Computes the convergence summary of ``curves`` (see the module docstring)."""
  loss = curves.loss
  initial = float(loss[0])
  target = float(target_loss) if target_loss is not None else target_fraction * initial
  finite = loss[np.isfinite(loss)]
  step, seconds = first_reached(curves, target)
  tail = tail_change(curves.step, loss, plateau_window)
  eval_change = eval_loss_change(curves)
  grad_first, grad_last = _first_last_finite(curves.grad_norm)
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
      state=classify(loss, target, tail, plateau_window, rise_tolerance, flagged_diverged,
                     eval_change, plateau_tolerance),
      grad_norm_first=grad_first,
      grad_norm_last=grad_last,
      grad_norm_trend=linear_slope(curves.step, curves.grad_norm))


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
      "steps_to_target": summary.steps_to_target if summary.steps_to_target >= 0 else None,
      "state": summary.state,
      "records": {f: ([int(v) for v in curves.step] if f == "step" else
                      [_json_float(v) for v in getattr(curves, f)]) for f in RECORD_FIELDS},
      "epochs": [{k: (_json_float(v) if isinstance(v, float) else v) for k, v in e.items()}
                 for e in curves.epochs],
  }
