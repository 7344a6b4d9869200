"""The ``hyperparameters`` input: a stock Tuner's ``best_hyperparameters`` (or any
HyperParameters artifact) merged with config ``trainer.hparams`` into ``spec.hparams``.

The artifact holds one file, a KerasTuner ``HyperParameters.get_config()`` JSON
(``{"space": [...], "values": {name: value}}``): the stock Tuner writes it as
``best_hyperparameters.txt`` (tfx 1.16.0 tfx/components/tuner/executor.py
``write_best_hyperparameters``, l.58-70) and the stock Trainer reads the one file in the
directory (tfx/components/trainer/executor.py ``_GetFnArgs``, l.90-95, with
``io_utils.get_only_uri_in_dir``). Only ``values`` reach the module.

Merge rule (:func:`merge`): a name in only one of the two is taken from there; a name in
both with equal values is fine; a name in both with different values is a config error
naming the name, both values and ``trainer.hparams``: neither silently wins, so a
search result is never overridden unnoticed, nor a fixed setting replaced by the search.
"""
import json
from typing import Any, Dict, Mapping

from tfx_parallel.components.common.config_util import ConfigError

# The setting a conflict names.
HPARAMS_SETTING = "trainer.hparams"


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
    if configured[name] != tuned[name]:
      raise ConfigError(
          HPARAMS_SETTING,
          f"hparam {name!r} is {configured[name]!r} in {HPARAMS_SETTING} but "
          f"{tuned[name]!r} in {source}: remove {name!r} from {HPARAMS_SETTING} to train "
          f"with the tuned value, or drop it from the tuner_fn's search space (or leave "
          f"the hyperparameters input out) to keep yours")
  return dict(configured, **tuned)
