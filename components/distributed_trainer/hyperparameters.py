"""The ``hyperparameters`` input: a stock Tuner's ``best_hyperparameters`` (or any
HyperParameters artifact) merged with config ``trainer.hparams`` into ``spec.hparams``.

The artifact holds one file, a KerasTuner ``HyperParameters.get_config()`` JSON
(``{"space": [...], "values": {name: value}}``): the stock Tuner writes it as
``best_hyperparameters.txt`` (tfx 1.16.0 tfx/components/tuner/executor.py
``write_best_hyperparameters``, l.58-70) and the stock Trainer reads the one file in the
directory (tfx/components/trainer/executor.py ``_GetFnArgs``, l.90-95, with
``io_utils.get_only_uri_in_dir``). Only ``values`` reach the module.

Merge rule (:func:`merge`): a name in only one of the two is taken from there; a name in
both with equal values of the same type is fine; a name in both with different values
(or types: ``1``, ``1.0`` and ``true`` differ) is a config error naming the name, both
values and ``trainer.hparams``: neither silently wins, so a search result is never
overridden unnoticed, nor a fixed setting replaced by the search.

Settings rule (:func:`tuned_settings`): a tuned value named like a trainer setting
(:data:`SETTINGS`: ``learning_rate``, ``optimizer``, ``batch_size``) sets that setting for
this run, as a stock module rebuilds its optimizer from the tuned values (tfx 1.16.0
tfx/examples/penguin/penguin_utils_keras.py: ``HyperParameters.from_config`` in
``run_fn``, l.150-151, and ``Adam(hparams.get('learning_rate'))``, l.65). The config
cannot tell a value the user set from its default (config_util.to_json writes every
field), so the Tuner wins, loudly: each change is printed (old -> new), logged and
recorded (history.json ``tuned_settings``).

Built-in models (:func:`check_builtin`): the hparams the built-in ``mlp`` reads must have
its types; a tuned ``hidden_units`` int (KerasTuner values are scalars) fails before
training, naming the name, where it came from, the value and the fix.
"""
import json
import numbers
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from tfx_parallel.components.common.config_util import ConfigError

# The setting a conflict names.
HPARAMS_SETTING = "trainer.hparams"
# Where a bad tuned value is named.
INPUT = "hyperparameters"


def _number(value) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _positive_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# Trainer settings a tuned hparam of the same name sets: name -> (check, expected). The
# config's own validation checks the rest (an optimizer name it knows, a batch the
# replicas divide): the executor names the tuned value there too.
SETTINGS: Dict[str, Tuple[Callable[[Any], bool], str]] = {
    "learning_rate": (lambda v: _number(v) and v > 0, "a number > 0, e.g. 0.01"),
    "optimizer": (lambda v: isinstance(v, str), "an optimizer name, e.g. 'adam'"),
    "batch_size": (_positive_int, "an integer >= 1, e.g. 64"),
}
# What the built-in models read from spec.hparams (models/mlp.py): name -> (check, expected).
BUILTIN_HPARAMS: Dict[str, Dict[str, Tuple[Callable[[Any], bool], str]]] = {
    "linear": {},
    "mlp": {
        "hidden_units": (lambda v: isinstance(v, (list, tuple)) and bool(v)
                         and all(_positive_int(h) for h in v),
                         "a list of positive integer widths, e.g. [64, 64]"),
        "embedding_dim": (_positive_int, "a positive integer, e.g. 8"),
    },
}


def _typed(value) -> str:
  return f"{value!r} ({type(value).__name__})"


def read_values(uri: str) -> Dict[str, Any]:
  """The ``values`` of the one KerasTuner config file under the HyperParameters
  artifact ``uri``, as the stock Trainer reads it."""
  from tfx.utils import io_utils  # pylint: disable=g-import-not-at-top
  path = io_utils.get_only_uri_in_dir(uri)
  text = io_utils.read_string_file(path)
  try:
    config = json.loads(text)
  except ValueError as e:
    raise ConfigError("hyperparameters", f"{path} is not JSON ({e}); expected a KerasTuner "
                      f"HyperParameters.get_config() (the stock Tuner's "
                      f"best_hyperparameters). Received: {text[:200]!r}") from e
  values = config.get("values") if isinstance(config, dict) else None
  if not isinstance(values, dict):
    raise ConfigError("hyperparameters", f"{path} has no 'values' object; expected a "
                      f"KerasTuner HyperParameters.get_config(). Received keys: "
                      f"{sorted(config) if isinstance(config, dict) else type(config).__name__}")
  return dict(values)


def merge(configured: Mapping[str, Any], tuned: Mapping[str, Any],
          source: str = "the hyperparameters input") -> Dict[str, Any]:
  """``configured`` (config ``trainer.hparams``) and ``tuned`` (the artifact's values),
  by the module's rule. Raises ConfigError naming the first conflicting name."""
  for name in sorted(set(configured) & set(tuned)):
    mine, theirs = configured[name], tuned[name]
    if mine != theirs or type(mine) is not type(theirs):  # 1 == True == 1.0 in Python.
      shown = ((_typed(mine), _typed(theirs)) if mine == theirs
               else (repr(mine), repr(theirs)))
      raise ConfigError(
          HPARAMS_SETTING,
          f"hparam {name!r} is {shown[0]} in {HPARAMS_SETTING} but "
          f"{shown[1]} in {source}: remove {name!r} from {HPARAMS_SETTING} to train "
          f"with the tuned value, or drop it from the tuner_fn's search space (or leave "
          f"the hyperparameters input out) to keep yours")
  return dict(configured, **tuned)


def tuned_settings(current: Mapping[str, Any], tuned: Mapping[str, Any],
                   source: str = "the hyperparameters input"
                   ) -> Dict[str, Dict[str, Any]]:
  """{setting: {"config": old, "tuned": new}} for each tuned value named like a trainer
  setting (:data:`SETTINGS`; ``current``: the config's values), including those equal to
  the config's. Raises ConfigError naming the hyperparameters input, the name, what was
  received and what the setting takes."""
  out = {}
  for name, (ok, expected) in SETTINGS.items():
    if name not in tuned:
      continue
    value = tuned[name]
    if not ok(value):
      raise ConfigError(INPUT, f"tuned {name!r} sets trainer.{name} for this run, which "
                        f"takes {expected}. Received: {_typed(value)} from {source}. Fix "
                        f"the tuner_fn's search space (hp.Choice({name!r}, [...]) with such "
                        f"values), or rename the hparam if it is not the trainer's {name}")
    out[name] = {"config": current[name], "tuned": value}
  return out


def check_builtin(model: Optional[str], hparams: Mapping[str, Any],
                  tuned: Mapping[str, Any], source: str = "the hyperparameters input"
                  ) -> None:
  """The hparams a built-in ``model`` reads (:data:`BUILTIN_HPARAMS`) have its types
  (``model`` None: a user module, which reads what it likes). Raises ConfigError naming
  the name, where it came from (``source`` when it is in ``tuned``, else
  ``trainer.hparams``), what was received and the fix."""
  for name, (ok, expected) in BUILTIN_HPARAMS.get(model or "", {}).items():
    if name not in hparams or ok(hparams[name]):
      continue
    value = hparams[name]
    where = source if name in tuned else HPARAMS_SETTING
    key = INPUT if name in tuned else HPARAMS_SETTING
    raise ConfigError(key, (
        f"the built-in {model} reads hparam {name!r} as {expected}. Received: "
        f"{_typed(value)} from {where}. "
        + (f"KerasTuner values are scalars, so a Tuner cannot search it: leave {name!r} "
           f"out of the tuner_fn's search space and set trainer.hparams.{name} (or "
           f"trainer.{name}) to {expected.split('e.g. ')[-1]}, or train a module_file "
           f"whose build_model(spec) reads your tuned names (examples/tuned_model.py)"
           if name in tuned and name == "hidden_units" else
           f"Set it to {expected.split('e.g. ')[-1]} (the built-in {model} reads "
           f"{sorted(BUILTIN_HPARAMS[model])})")))
