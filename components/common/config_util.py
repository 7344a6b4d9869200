"""Typed config plumbing shared by the components.

Each component's config is a frozen dataclass validated in its component constructor
(every error names the key), serialised once to a JSON execution property, and decoded
once at the executor boundary with :func:`from_json`. Nothing downstream parses JSON.
"""
import dataclasses
import json
import typing
from typing import Any, Dict, Type, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
  """A config value is invalid. ``key`` is the dotted name of the offending field."""

  def __init__(self, key: str, message: str):
    self.key = key
    self.message = message
    super().__init__(f"{key}: {message}")


def require(condition: bool, key: str, message: str):
  """Raises ConfigError(key, message) unless condition holds."""
  if not condition:
    raise ConfigError(key, message)


def suggest(key: str, value: Any) -> str:
  """How a message suggests a setting: ``set KEY=VALUE`` (VALUE in YAML, e.g. ``true``).
  KEY is the component config's field, or ``SECTION.KEY`` for another component's
  (``trainer.skip_missing_labels``). The command that shows the message rewrites it in
  the form its user types (pipeline/settings.py: ``--set trainer.KEY=VALUE`` on
  ``tfx-parallel run``, the YAML path on ``compile``); the Python API keeps it."""
  if isinstance(value, bool):
    value = "true" if value else "false"
  return f"set {key}={value}"


def to_json(config) -> str:
  return json.dumps(dataclasses.asdict(config), sort_keys=True)


def from_dict(cls: Type[T], data: Dict[str, Any], prefix: str = "") -> T:
  """Builds dataclass ``cls`` from a dict, rejecting unknown keys by name."""
  if not isinstance(data, dict):
    raise ConfigError(prefix.rstrip(".") or cls.__name__,
                      f"expected a mapping, received {type(data).__name__}")
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(data) - set(fields))
  if unknown:
    raise ConfigError(prefix + unknown[0],
                      f"unknown key; valid keys are {sorted(fields)}")
  hints = typing.get_type_hints(cls)
  kwargs = {}
  for name, value in data.items():
    hint = hints[name]
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
      value = from_dict(hint, value, prefix + name + ".")
    elif isinstance(value, list) and typing.get_origin(hint) is tuple:
      value = tuple(value)
    kwargs[name] = value
  return cls(**kwargs)


def from_json(cls: Type[T], text: str) -> T:
  return from_dict(cls, json.loads(text))
