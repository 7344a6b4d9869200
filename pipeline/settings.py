"""Every setting of the pipeline by one dotted name, from a YAML file, flags or ``--set``.

The schema is PipelineConfig's dataclasses (this folder's config.py and each component's
config.py); nothing here lists the settings. A setting's name is its path of field
names, ``trainer.skip_missing_labels`` or ``evaluator.regression.min_r2``, and a key
inside a mapping field continues the path: ``example_gen.column_types.species``. A field
added to a config dataclass is a setting at once: in the YAML file, in ``--set`` and in
the error texts.

Three doors, one result. ``tfx-parallel run --config FILE`` and ``tfx-parallel compile
--config FILE`` read the same file (its ``pipeline:`` section; kubeflow/config.py adds
the Kubernetes placement), ``run``'s flags are shorthands (pipeline/cli.py
``FLAG_SETTINGS``) and ``--set key=value`` reaches every key. Each becomes an
:class:`Assignment`; :func:`build` applies them in order over
``config.default_config(source)``, the defaults of the data source the assignments name:
a CSV gets the same trainer whether it runs locally or on Kubeflow.

Errors name the setting in the form the user types into the command they ran
(:class:`Form`): ``--set trainer.skip_missing_labels=true`` on ``run``, the YAML path
``pipeline.trainer.skip_missing_labels: true`` on ``compile``. Component code names a
setting as ``set KEY=VALUE`` (config_util.suggest), optionally with its section
(``set trainer.KEY=VALUE``); :func:`Form.message` rewrites those at the boundary, where
the command is known.
"""
import dataclasses
import difflib
import re
import typing
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from tfx_parallel.components.common.config_util import ConfigError, from_dict
from tfx_parallel.pipeline import config as config_lib

# The top-level keys of the one YAML schema (kubeflow/default_config.yaml): ``run`` reads
# ``pipeline``; ``pipeline_root`` and ``components`` are Kubernetes-only.
FILE_KEYS = ("pipeline_root", "pipeline", "components")
PIPELINE_SECTION = "pipeline"
# PipelineConfig field -> the component whose config it is (run_progress names it).
SECTION_OF_COMPONENT = {"PartitionedExampleGen": "example_gen",
                        "DistributedTrainer": "trainer", "ConvergenceEvaluator": "evaluator"}


@dataclasses.dataclass(frozen=True)
class Assignment:
  """One setting the user gave: ``key`` (dotted, from PipelineConfig), its value and
  ``origin``, how the user wrote it (echoed by errors: ``--set trainer.epochs=x``)."""
  key: str
  value: Any
  origin: str


# -- The schema: PipelineConfig's dataclasses, walked by their type hints. ---------------

def _unwrap(hint):
  """Optional[X] -> X (other hints unchanged)."""
  if typing.get_origin(hint) is typing.Union:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1:
      return args[0]
  return hint


def _is_mapping(hint) -> bool:
  return typing.get_origin(_unwrap(hint)) in (dict, typing.Mapping, typing.MutableMapping) \
      or _unwrap(hint) is dict


def _is_sequence(hint) -> bool:
  return typing.get_origin(_unwrap(hint)) in (tuple, list)


def _hints(cls) -> Dict[str, Any]:
  return {f.name: typing.get_type_hints(cls)[f.name] for f in dataclasses.fields(cls)}


def all_keys(cls=config_lib.PipelineConfig, prefix: str = "") -> List[str]:
  """Every setting's dotted name (mapping fields end the path), in field order."""
  out = []
  for name, hint in _hints(cls).items():
    inner = _unwrap(hint)
    if dataclasses.is_dataclass(inner):
      out.extend(all_keys(inner, f"{prefix}{name}."))
    else:
      out.append(prefix + name)
  return out


def _close_matches(key: str) -> List[str]:
  """Settings whose name is close to ``key``, or that end with its last part."""
  keys = all_keys()
  last = key.rsplit(".", 1)[-1]
  same_name = [k for k in keys if k.rsplit(".", 1)[-1] == last]
  close = difflib.get_close_matches(key, keys, n=3, cutoff=0.6)
  by_last = difflib.get_close_matches(last, sorted({k.rsplit(".", 1)[-1] for k in keys}),
                                      n=3, cutoff=0.75)
  close += [k for k in keys if k.rsplit(".", 1)[-1] in by_last]
  return list(dict.fromkeys(same_name + close))[:5]


def resolve(key: str, origin: str) -> Tuple[Tuple[str, ...], Optional[str], Any]:
  """``key`` -> (field path, key inside a mapping field or None, the value's type hint).

  Raises ConfigError naming the key, with the settings whose names are close to it."""
  parts = key.split(".") if key else [""]
  cls, path = config_lib.PipelineConfig, []
  for i, part in enumerate(parts):
    hints = _hints(cls)
    if part not in hints:
      close = _close_matches(key)
      hint = f"close matches: {close}" if close else \
          f"keys under {'.'.join(path) or 'the top level'}: {sorted(hints)}"
      raise ConfigError(key, f"unknown setting; {hint}. Received: {origin}")
    path.append(part)
    hint = hints[part]
    inner = _unwrap(hint)
    rest = parts[i + 1:]
    if dataclasses.is_dataclass(inner) and rest:
      cls = inner
      continue
    if not rest:
      return tuple(path), None, hint
    if _is_mapping(hint):
      value_hint = typing.get_args(_unwrap(hint))
      return tuple(path), ".".join(rest), value_hint[1] if len(value_hint) == 2 else Any
    raise ConfigError(key, f"{'.'.join(path)} is not a mapping: it has no key "
                      f"{'.'.join(rest)!r}. Received: {origin}")
  raise AssertionError(key)  # The loop always returns or raises.


# -- Values: YAML scalar rules, checked against the field's type. ------------------------

def parse_value(text: str, hint) -> Any:
  """A ``--set`` value: YAML (``true``, ``5``, ``0.1``, ``null``, ``[a, b]``, ``{a: 1}``),
  kept as the text for a string field (a label named ``2020`` stays ``'2020'``), a number
  for a float field (``1e-3``); for a list field, ``a,b`` is the list ``[a, b]``."""
  import yaml  # pylint: disable=g-import-not-at-top
  try:
    value = yaml.safe_load(text) if text.strip() else None
  except yaml.YAMLError:
    value = text
  inner = _unwrap(hint)
  if inner is str and value is not None and not isinstance(value, str):
    return text
  if inner is float and isinstance(value, str):
    try:  # YAML 1.1 reads 1e-3 (no dot) as a string; Python, pandas and the user: 0.001.
      return float(value)
    except ValueError:
      return value
  if _is_sequence(hint) and isinstance(value, str):
    return [parse_value(item, Any) for item in value.split(",")]
  return value


_SCALARS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def check_type(key: str, value: Any, hint, origin: str) -> Any:
  """``value`` for a field of type ``hint``: a list becomes a tuple for a tuple field;
  a value of the wrong kind raises ConfigError (a string where a number goes, ...)."""
  inner = _unwrap(hint)
  if value is None:
    if inner is hint and hint in _SCALARS:  # Not Optional.
      raise ConfigError(key, f"must be {_SCALARS[hint]}, not null. Received: {origin}")
    return value
  if inner is bool:
    ok, kind = isinstance(value, bool), _SCALARS[bool]
  elif inner is int:
    ok, kind = isinstance(value, int) and not isinstance(value, bool), _SCALARS[int]
  elif inner is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    kind = _SCALARS[float]
  elif inner is str:
    ok, kind = isinstance(value, str), _SCALARS[str]
  elif _is_mapping(hint) or dataclasses.is_dataclass(inner):
    ok, kind = isinstance(value, dict), "a mapping"
  elif _is_sequence(hint):
    ok, kind = isinstance(value, (list, tuple)), "a list"
    if ok and typing.get_origin(inner) is tuple:
      value = tuple(value)
  else:  # Any, or a hint this check does not know: the config's validate() decides.
    ok, kind = True, ""
  if not ok:
    raise ConfigError(key, f"must be {kind}. Received: {origin}")
  return value


# -- The doors: --set, a YAML file, the flags. ------------------------------------------

def parse_set(text: str) -> Assignment:
  """``--set key=value`` -> an Assignment (key checked, value parsed by the field's type)."""
  origin = f"--set {text}"
  key, sep, raw = text.partition("=")
  key = key.strip()
  if not sep or not key:
    raise ConfigError("--set", f"must look like key=value, e.g. trainer.epochs=20. "
                      f"Received: {origin}")
  _, inner_key, hint = resolve(key, origin)
  value = parse_value(raw, hint)
  if inner_key is None:
    value = check_type(key, value, hint, origin)
  return Assignment(key, value, origin)


def assign(key: str, value: Any, origin: str) -> Assignment:
  """An Assignment of a value already typed (a flag's, a YAML file's)."""
  _, inner_key, hint = resolve(key, origin)
  if inner_key is None:
    value = check_type(key, value, hint, origin)
  return Assignment(key, value, origin)


def from_mapping(data: Any, prefix: str = "") -> List[Assignment]:
  """The assignments of a YAML ``pipeline:`` section: one per field it sets (a mapping
  under a sub-config is walked; a mapping field's value replaces the default whole).
  ``prefix`` is the section's path in the file. The caller names the file in errors."""
  if data is None:
    return []
  if not isinstance(data, dict):
    raise ConfigError(prefix.rstrip(".") or PIPELINE_SECTION,
                      f"must be a mapping. Received: {type(data).__name__}")
  out = []
  for name, value in data.items():
    key = f"{prefix}{name}"
    origin = f"{PIPELINE_SECTION}.{key}: {value!r}"
    path, inner_key, hint = resolve(key, origin)
    if inner_key is None and dataclasses.is_dataclass(_unwrap(hint)) and \
        (isinstance(value, dict) or value is None):
      out.extend(from_mapping(value, key + "."))
    else:
      out.append(assign(key, value, origin))
  return out


def read_file(path: str) -> Dict[str, Any]:
  """The YAML file of ``--config`` (the schema of kubeflow/default_config.yaml), as a
  mapping whose top-level keys are checked; errors name the file."""
  import yaml  # pylint: disable=g-import-not-at-top
  try:
    with open(path) as f:
      data = yaml.safe_load(f)
  except OSError as e:
    raise ConfigError("--config", f"cannot read {path}: {e.strerror}") from None
  except yaml.YAMLError as e:
    raise ConfigError("<file>", f"{path} is not valid YAML: {e}") from None
  data = {} if data is None else data
  if not isinstance(data, dict):
    raise ConfigError("<root>", f"expected a mapping, received {type(data).__name__} "
                      f"(in {path})")
  for key in data:
    if key not in FILE_KEYS:
      close = difflib.get_close_matches(str(key), FILE_KEYS, n=1)
      hint = f"did you mean {close[0]!r}? " if close else ""
      raise ConfigError(str(key), f"unknown key; {hint}valid keys are {sorted(FILE_KEYS)}; "
                        f"the pipeline's settings go under 'pipeline:' (in {path})")
  return data


def from_file(path: str) -> List[Assignment]:
  """The assignments of a config file's ``pipeline:`` section; errors name the file and
  the key as the file spells it (``pipeline.trainer.epochs``)."""
  data = read_file(path).get(PIPELINE_SECTION)
  try:
    given = from_mapping(data)
  except ConfigError as e:
    raise ConfigError(f"{PIPELINE_SECTION}.{e.key}", f"{e.message} (in {path})") from None
  return [dataclasses.replace(a, origin=f"{a.origin} (in {path})") for a in given]


# -- Building the config. -----------------------------------------------------------------

def last(assignments: Sequence[Assignment], key: str) -> Optional[Assignment]:
  """The assignment that decides ``key`` (the last one to it), else None."""
  found = [a for a in assignments if a.key == key]
  return found[-1] if found else None


def source_of(assignments: Sequence[Assignment]) -> str:
  given = last(assignments, "example_gen.source")
  return given.value if given is not None and given.value else \
      config_lib.PipelineConfig().example_gen.source


def build(assignments: Sequence[Assignment]) -> config_lib.PipelineConfig:
  """``config.default_config(source)`` with the assignments applied in order (not yet
  validated: PipelineConfig.validate names the key of a bad value)."""
  tree = dataclasses.asdict(config_lib.default_config(source_of(assignments)))
  for a in assignments:
    path, inner_key, _ = resolve(a.key, a.origin)
    node = tree
    for name in path[:-1]:
      node = node[name]
    if inner_key is None:
      node[path[-1]] = a.value
    else:
      mapping = dict(node[path[-1]] or {})
      mapping[inner_key] = a.value
      node[path[-1]] = mapping
  return from_dict(config_lib.PipelineConfig, tree)


# -- Naming a setting in the form of the command the user ran. ------------------------

@dataclasses.dataclass(frozen=True)
class Form:
  """How one command spells a setting. ``run``: ``--set trainer.epochs=20``;
  ``compile``: ``pipeline.trainer.epochs: 20`` (its YAML path); ``python``:
  ``TrainerConfig(epochs=20)`` (run_pipeline, a pipeline of the user's own)."""
  name: str
  flags: Dict[str, str] = dataclasses.field(default_factory=dict)  # setting -> flag

  def setting(self, key: str, value: Optional[str] = None) -> str:
    """``key`` (relative to PipelineConfig) as the user would type it."""
    if self.name == "run":
      return f"--set {key}={'...' if value is None else value}"
    if self.name == "python":
      return _python_form(key, value)
    return f"{PIPELINE_SECTION}.{key}: {'...' if value is None else value}"

  def key_hint(self, key: str) -> str:
    """" [set with --epochs or --set trainer.epochs=...]" for a setting's key, else ""."""
    if self.name != "run":
      return ""  # compile's keys are already the YAML path.
    flag = self.flags.get(key)
    try:
      _, inner, hint = resolve(key, "")
    except ConfigError:  # Not a setting: a flag of the command's own (--home), or none.
      return f" [set with {flag}]" if flag else ""
    if inner is None and dataclasses.is_dataclass(_unwrap(hint)):
      return f" [set with {flag}]" if flag else ""  # A section (trainer): no one value.
    return f" [set with {flag + ' or ' if flag else ''}{self.setting(key)}]"

  def message(self, text: str, section: Optional[str] = None) -> str:
    """``text`` with each ``set KEY=VALUE`` of a setting rewritten in this form.

    KEY is a setting's dotted name relative to ``section`` (the config of the
    component that wrote the text), or to the pipeline when it starts with a section
    (``set trainer.KEY=VALUE``)."""
    def rewrite(match):
      key, value = match.group("key"), match.group("value")
      value = value[1:-1] if value[:1] in "'\"" and value[-1:] == value[:1] else value
      for candidate in ([key, f"{section}.{key}"] if section else [key]):
        try:
          resolve(candidate, "")
        except ConfigError:
          continue
        verb = match.group("verb")
        if self.name != "compile":  # "add --set ...", "use TrainerConfig(...)"
          word = "add" if self.name == "run" else "use"
          verb = word if verb[0] == "s" else word.capitalize()
        return f"{verb} {self.setting(candidate, value)}"
      return match.group(0)
    return _SUGGESTION_RE.sub(rewrite, text)


# "set KEY=VALUE": the form config_util.suggest writes.
_SUGGESTION_RE = re.compile(
    r"\b(?P<verb>[Ss]et) (?P<key>[A-Za-z_][\w]*(?:\.[^\s=.]+)*)="
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s,;)]+)")

def _python_form(key: str, value: Optional[str]) -> str:
  """``trainer.skip_missing_labels`` = ``true`` as Python: the config dataclass to pass
  it to, e.g. ``TrainerConfig(skip_missing_labels=True)``;
  ``example_gen.column_types.x`` = ``float``: ``ExampleGenConfig(column_types={'x':
  'float'})``."""
  import yaml  # pylint: disable=g-import-not-at-top
  path, inner_key, _ = resolve(key, "")
  literal = "..." if value is None else repr(yaml.safe_load(value))
  if inner_key is not None:
    literal = f"{{{inner_key!r}: {literal}}}"
  classes, cls = [], config_lib.PipelineConfig
  for name in path[:-1]:
    cls = _unwrap(_hints(cls)[name])
    classes.append(cls.__name__)
  if not classes:
    return f"PipelineConfig({path[-1]}={literal})"
  text = f"{path[-1]}={literal}"
  for name, cls_name in zip(reversed(path[1:-1]), reversed(classes[1:])):
    text = f"{name}={cls_name}({text})"
  return f"{classes[0]}({text})"


RUN = Form("run")
COMPILE = Form("compile")
PYTHON = Form("python")


def error_text(error: ConfigError, form: Form, section: Optional[str] = None) -> str:
  """A ConfigError as the command prints it: its key, its message with the settings it
  suggests in ``form``, and how to set the key."""
  message = getattr(error, "message", None)
  if message is None:
    message = str(error).split(": ", 1)[-1]
  return f"{error.key}: {form.message(message, section)}{form.key_hint(error.key)}"


def keys_named_in(texts: Iterable[str]) -> List[str]:
  """The settings a text suggests (``set KEY=VALUE``), as written (tests collect them)."""
  return [m.group("key") for text in texts for m in _SUGGESTION_RE.finditer(text)]
