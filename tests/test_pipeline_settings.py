"""pipeline/settings.py: every setting within reach of `run` (--set, --config, flags),
one set of defaults for `run` and `compile`, and errors that name a setting in the form
the user types into the command they ran (issue 38, item 4)."""
import ast
import dataclasses
import os
import typing

import pytest
import yaml

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.pipeline import cli
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import settings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Component folder -> its config's PipelineConfig field (keys in its texts are relative).
SECTIONS = {"partitioned_example_gen": "example_gen", "distributed_trainer": "trainer",
            "convergence_evaluator": "evaluator"}
# Keys named in errors that are not config settings, each with the reason.
NOT_SETTINGS = {
    "home": "run's own --home flag (local_runner.check_home)",
    "dask_address": "run's own --dask-address flag",
    "--config": "the --config flag itself", "--set": "a malformed --set itself",
    "<file>": "the config file as a whole (not YAML)", "<root>": "the file's top level",
    "input_base": "PartitionedExampleGen(input_base=...): the stock ExampleGen's Python "
                  "argument (drop-in use); the CLI's source is example_gen.source",
    "input_config": "PartitionedExampleGen(input_config=...), the stock Python argument",
    "range_config": "PartitionedExampleGen(range_config=...), the stock Python argument",
    "trainer": "f'trainer.{module.config_key}': module_file or module_path, both settings",
    "metadata_connection_config": "run_pipeline(pipeline): the tfx Pipeline's own Python "
                                  "argument (the Python API; run has --home)",
    "hyperparameters": "DistributedTrainer(hyperparameters=...): an input channel (a "
                       "stock Tuner's best_hyperparameters), as the stock Trainer's",
    "base_model": "DistributedTrainer(base_model=...): an input channel (a Model to warm "
                  "start from)",
}


def _run_config(*argv):
  return cli.config_from_args(cli.build_parser().parse_args(["run", *argv]))


def _get(config, key):
  """The value at a dotted setting name (into a mapping field too)."""
  node = config
  path, inner, _ = settings.resolve(key, "")
  for name in path:
    node = getattr(node, name)
  return node if inner is None else (node or {}).get(inner)


# --- --set: parsing, landing, rejecting. -------------------------------------------------

@pytest.mark.parametrize("text,key,value", [
    ("trainer.skip_missing_labels=true", "trainer.skip_missing_labels", True),
    ("evaluator.skip_missing_labels=false", "evaluator.skip_missing_labels", False),
    ("example_gen.bad_row_policy=skip", "example_gen.bad_row_policy", "skip"),
    ("example_gen.column_types.species=string", "example_gen.column_types.species", "string"),
    ("example_gen.columns=a,b", "example_gen.columns", ("a", "b")),
    ("example_gen.columns=[a, 'b c']", "example_gen.columns", ("a", "b c")),
    ("example_gen.label=2020", "example_gen.label", "2020"),  # A str field keeps the text.
    ("trainer.hidden_units=32,16", "trainer.hidden_units", (32, 16)),
    ("trainer.learning_rate=1e-3", "trainer.learning_rate", 0.001),
    ("evaluator.regression.min_r2=0.5", "evaluator.regression.min_r2", 0.5),
    ("trainer.hparams.units=8", "trainer.hparams.units", 8),
    ("example_gen.split_ratios.test=1", "example_gen.split_ratios.test", 1),
    ("trainer.task=null", "trainer.task", None),
])
def test_set_parses_yaml_values_and_lands_in_the_config(text, key, value):
  config = _run_config("--data", "x.csv", "--set", text)
  assert _get(config, key) == value
  # A key inside a mapping field adds to the mapping; the other keys stay.
  if key == "example_gen.split_ratios.test":
    assert config.example_gen.split_ratios == {"train": 4, "eval": 1, "test": 1}


@pytest.mark.parametrize("text,key,message", [
    ("trainer.skip_missing_label=true", "trainer.skip_missing_label",
     r"unknown setting; close matches: \['trainer.skip_missing_labels', .*"
     r"'evaluator.skip_missing_labels'.*\]. Received: --set trainer.skip_missing_label=true$"),
    ("skip_missing_labels=true", "skip_missing_labels",
     r"close matches: \['trainer.skip_missing_labels', 'evaluator.skip_missing_labels'"),
    ("trainer.epochs=many", "trainer.epochs",
     r"must be an integer. Received: --set trainer.epochs=many$"),
    ("trainer.normalize=maybe", "trainer.normalize", r"must be true or false"),
    ("example_gen.rows.x=1", "example_gen.rows.x", r"example_gen.rows is not a mapping"),
    ("trainer.epochs", "--set", r"must look like key=value"),
])
def test_set_rejects_unknown_keys_and_wrong_types_naming_them(text, key, message):
  with pytest.raises(ConfigError, match=message) as e:
    _run_config("--set", text)
  assert e.value.key == key


def test_the_last_assignment_wins_file_then_flags_then_set(tmp_path):
  path = tmp_path / "run.yaml"
  path.write_text(yaml.safe_dump({"pipeline": {"trainer": {"epochs": 7, "batch_size": 32},
                                               "example_gen": {"bad_row_policy": "skip"}}}))
  config = _run_config("--config", str(path), "--epochs", "9", "--set", "trainer.epochs=11")
  assert (config.trainer.epochs, config.trainer.batch_size) == (11, 32)
  assert config.example_gen.bad_row_policy == "skip"
  assert _run_config("--config", str(path), "--epochs", "9").trainer.epochs == 9


def test_config_file_errors_name_the_file_and_the_yaml_path(tmp_path):
  path = tmp_path / "run.yaml"
  path.write_text("pipeline:\n  trainer:\n    epoch: 3\n")
  with pytest.raises(ConfigError, match=r"close matches: \['trainer.epochs'.*\(in .*run\.yaml\)"
                     ) as e:
    _run_config("--config", str(path))
  assert e.value.key == "pipeline.trainer.epoch"
  path.write_text("pipelines: {}\n")
  with pytest.raises(ConfigError, match=r"did you mean 'pipeline'\?") as e:
    _run_config("--config", str(path))
  path.write_text("pipeline:\n  trainer:\n    epochs: ten\n")
  with pytest.raises(ConfigError, match=r"must be an integer. Received: "
                     r"pipeline.trainer.epochs: 'ten' \(in .*run\.yaml\)"):
    _run_config("--config", str(path))


# --- One set of defaults: the same trainer for a CSV locally and on Kubeflow. -------

def _kubeflow_yaml(tmp_path, pipeline):
  from tfx_parallel.kubeflow import compiler  # pylint: disable=g-import-not-at-top
  with open(compiler.DEFAULT_CONFIG) as f:
    data = yaml.safe_load(f)
  data["pipeline"] = pipeline
  data["components"]["DistributedTrainer"].pop("accelerator")  # CPU pods: mesh 2x2.
  path = tmp_path / "kubeflow.yaml"
  path.write_text(yaml.safe_dump(data))
  return path


@pytest.mark.parametrize("source", ["data/*.csv", "taxi", "synthetic"])
def test_run_and_compile_give_a_source_the_same_config(tmp_path, source):
  """Issue 38: the Kubeflow YAML's pipeline section got TrainerConfig's defaults (linear,
  no normalisation) while `run` trained the mlp on standardised features."""
  from tfx_parallel.kubeflow import config as kubeflow_config  # pylint: disable=g-import-not-at-top
  path = _kubeflow_yaml(tmp_path, {"example_gen": {"source": source, "label": "y"}})
  compiled = kubeflow_config.load(str(path)).pipeline
  local = _run_config("--config", str(path), "--device", "cpu")
  assert dataclasses.replace(local.trainer, device="auto") == compiled.trainer
  assert (local.example_gen, local.evaluator) == (compiled.example_gen, compiled.evaluator)
  want = config_lib.default_trainer(source)
  assert (compiled.trainer.model, compiled.trainer.normalize,
          compiled.trainer.learning_rate) == (want.model, want.normalize, want.learning_rate)
  if source.endswith(".csv"):
    assert (compiled.trainer.model, compiled.trainer.normalize) == ("mlp", True)


# --- Errors name settings in the form of the command. ------------------------------------

def test_suggestions_are_rewritten_for_the_command_that_shows_them():
  text = ("fix the data, or set skip_missing_labels=true to skip and count them; "
          "Set column_types.species='float' to make ...; Received: epochs=0")
  assert settings.RUN.message(text, "trainer") == (
      "fix the data, or add --set trainer.skip_missing_labels=true to skip and count them; "
      "Set column_types.species='float' to make ...; Received: epochs=0")
  assert cli.RUN_FORM.message(text, "example_gen").count("--set example_gen.column_types"
                                                         ".species=float") == 1
  assert settings.COMPILE.message("set trainer.skip_missing_labels=true") == \
      "set pipeline.trainer.skip_missing_labels: true"
  # A pipeline of one's own (local_runner.run_pipeline): the config dataclass to pass.
  assert settings.PYTHON.message(text, "trainer").startswith(
      "fix the data, or use TrainerConfig(skip_missing_labels=True) to skip")
  assert settings.PYTHON.message("Set column_types.species='float'", "example_gen") == \
      "Use ExampleGenConfig(column_types={'species': 'float'})"
  assert settings.PYTHON.setting("evaluator.regression.min_r2", "0.5") == \
      "EvaluatorConfig(regression=RegressionThresholds(min_r2=0.5))"
  # Not a setting: left as written.
  assert settings.RUN.message("set nothing_here=1", "trainer") == "set nothing_here=1"


def test_run_prints_a_bad_setting_with_its_flag_and_set_form(capsys):
  assert cli.main(["run", "--epochs", "-1"]) == 2
  assert capsys.readouterr().err.strip() == (
      "tfx-parallel: invalid config: trainer.epochs: must be >= 0 (0: chosen from the data). "
      "Received: epochs=-1 [set with --epochs or --set trainer.epochs=...]")
  assert cli.main(["run", "--set", "example_gen.bad_row_policy=drop"]) == 2
  assert capsys.readouterr().err.strip().endswith(
      "Received: 'drop' [set with --set example_gen.bad_row_policy=...]")
  # A section is no setting: a training process's config error names it (failures.py
  # process_failed), and "--set trainer=..." would set nothing.
  assert cli.RUN_FORM.key_hint("trainer") == ""
  assert cli.RUN_FORM.key_hint("trainer.epochs").endswith("--set trainer.epochs=...]")


# --- Every setting named in an error is reachable from the CLI. --------------------------

def _literal(node):
  """A string constant, or an f-string's text up to its first placeholder."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value
  if isinstance(node, ast.JoinedStr):
    head = []
    for part in node.values:
      if not isinstance(part, ast.Constant):
        break
      head.append(part.value)
    return "".join(head)
  return None


def _texts(node):
  """Every string in the module but its docstrings, an f-string's placeholders as '{}'."""
  docstrings = {id(n.body[0].value) for n in ast.walk(node)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr)}
  for n in ast.walk(node):
    if id(n) in docstrings:
      continue
    if isinstance(n, ast.JoinedStr):
      yield "".join(p.value if isinstance(p, ast.Constant) else "{}" for p in n.values)
    elif isinstance(n, ast.Constant) and isinstance(n.value, str):
      yield n.value


def named_settings():
  """(key, section, file) of every key named by ``require(cond, KEY, ...)`` or
  ``ConfigError(KEY, ...)`` and every ``set KEY=VALUE`` in the texts of components/ and
  pipeline/ (a component's keys are relative to its section)."""
  found = set()
  for folder in ("components", "pipeline"):
    for directory, _, files in os.walk(os.path.join(REPO, folder)):
      for name in sorted(f for f in files if f.endswith(".py")):
        path = os.path.join(directory, name)
        rel = os.path.relpath(path, REPO)
        section = next((s for d, s in SECTIONS.items() if f"/{d}/" in f"/{rel}"), None)
        with open(path) as f:
          tree = ast.parse(f.read())
        for n in ast.walk(tree):
          if isinstance(n, ast.Call):
            func = n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
            index = {"require": 1, "ConfigError": 0}.get(func)
            if index is not None and len(n.args) > index:
              key = (_literal(n.args[index]) or "").split("{")[0].rstrip(".[")
              if key:
                found.add((key, section, rel))
        for key in settings.keys_named_in(_texts(tree)):
          if "{}" not in key.split(".")[0]:
            found.add((key.split(".{}")[0], section, rel))
  return sorted(found, key=lambda f: (f[0], f[1] or "", f[2]))


def _other_value(value, hint):
  """A value of type ``hint`` different from ``value`` (to see it land)."""
  inner = settings._unwrap(hint)  # pylint: disable=protected-access
  if inner is bool or isinstance(value, bool):
    return not value
  if inner is int or isinstance(value, int):
    return (value or 0) + 1
  if inner is float or isinstance(value, float):
    return (value or 0.0) + 0.5
  if settings._is_mapping(hint):  # pylint: disable=protected-access
    return dict(value or {}, reached="string")
  if settings._is_sequence(hint):  # pylint: disable=protected-access
    element = typing.get_args(inner)[0] if typing.get_args(inner) else str
    return (7,) if element is int else ("reached",)
  return "reached"


def _candidates(key, section):
  return [key] + ([f"{section}.{key}"] if section else [])


def unreachable_settings(found):
  """The keys of ``found`` that are no setting (nor NOT_SETTINGS), or that `--set
  KEY=VALUE` does not put into the config (a value other than the default)."""
  unreachable = []
  for key, section, where in found:
    resolved = None
    for candidate in _candidates(key, section):
      try:
        resolved = (candidate, settings.resolve(candidate, ""))
        break
      except ConfigError:
        continue
    if resolved is None:
      if key.split(".")[0] not in NOT_SETTINGS:
        unreachable.append(f"{where}: {key}")
      continue
    candidate, (_, inner, hint) = resolved
    if dataclasses.is_dataclass(settings._unwrap(hint)):  # pylint: disable=protected-access
      if key not in NOT_SETTINGS:  # A section, not a setting: a key made at run time.
        unreachable.append(f"{where}: {key} (a section)")
      continue
    default = _get(_run_config("--data", "x.csv"), candidate)
    value = _other_value(default, hint)
    text = yaml.safe_dump(value, default_flow_style=True).strip()
    text = text[:-len("\n...")].strip() if text.endswith("...") else text
    if _get(_run_config("--data", "x.csv", "--set", f"{candidate}={text}"),
            candidate) != value:
      unreachable.append(f"{where}: {key} (--set {candidate}={text} did not land)")
  return unreachable


def test_every_setting_an_error_names_is_reachable_with_set():
  """Each key an error names resolves to a setting (or is one of NOT_SETTINGS), and
  `--set KEY=VALUE` puts a value other than the default into the config at that key."""
  found = named_settings()
  assert len(found) > 60, found  # The scan sees the validate() keys...
  assert ("trainer.skip_missing_labels", "trainer",  # ...and the suggestions in error texts.
          "components/distributed_trainer/inputs/stats.py") in found
  assert not unreachable_settings(found)


def test_the_reachability_check_fails_on_a_key_that_is_no_setting():
  """The check above can fail: a key named in an error that no config has."""
  assert unreachable_settings([("max_missing_label_shares", "trainer", "x.py"),
                               ("epochs", "trainer", "y.py")]) == \
      ["x.py: max_missing_label_shares"]


def test_a_new_config_field_is_a_setting_at_once(monkeypatch):
  """Nothing lists the settings: a field added to a config dataclass (as issue 38's
  label and missing-value settings are) is reachable by --set without other change."""
  from tfx_parallel.components.partitioned_example_gen import config as eg_config  # pylint: disable=g-import-not-at-top
  base = eg_config.ExampleGenConfig
  grown = dataclasses.make_dataclass(
      "ExampleGenConfig", [("na_values", typing.Optional[typing.Tuple[str, ...]], None)],
      bases=(base,), frozen=True)
  monkeypatch.setattr(config_lib.PipelineConfig, "__annotations__",
                      dict(config_lib.PipelineConfig.__annotations__, example_gen=grown))
  monkeypatch.setattr(config_lib, "ExampleGenConfig", grown)
  assert "example_gen.na_values" in settings.all_keys()
  assert settings.parse_set("example_gen.na_values=NA,n/a").value == ("NA", "n/a")
