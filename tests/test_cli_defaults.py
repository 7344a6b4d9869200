"""`tfx-parallel run`'s defaults are the config's, for the data source: behaviour, not
constants. Each flag is a shorthand for one setting (cli.FLAG_SETTINGS) and changes only
that setting; a run without flags trains config.default_config(source) (issue 25, one
place per fact; issue 38, one set of defaults for run and compile)."""
import argparse
import dataclasses

import pytest

from tfx_parallel.components.common import keys
from tfx_parallel.components.distributed_trainer import config as trainer_lib
from tfx_parallel.components.distributed_trainer.plan import devices
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.pipeline import cli
from tfx_parallel.pipeline import config as config_lib
from tfx_parallel.pipeline import settings

# Flags that set no config key.
CLI_ONLY = {"help", "home", "verbose", "beam_arg", "runner", "dask_address", "config", "set"}
# Enums: flag dest -> the config's one list of names.
CHOICES = {"layout": trainer_lib.LAYOUTS, "model": trainer_lib.MODELS,
           "optimizer": trainer_lib.OPTIMIZERS, "input_cache": trainer_lib.CACHE_MODES,
           "task": keys.TASKS, "device": devices.DEVICE_KINDS}


def _actions():
  p = argparse.ArgumentParser()
  cli.add_run_arguments(p)
  return {a.dest: a for a in p._actions}  # pylint: disable=protected-access


def _run(*flags):
  return cli.config_from_args(cli.build_parser().parse_args(["run", *flags]))


def _get(config, key):
  for name in key.split("."):
    config = getattr(config, name)
  return config


def _flag_value(dest, action, default):
  """argv for one flag and the value it must put at its key: not the default."""
  if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):  # pylint: disable=protected-access
    return [], not default
  if action.choices:
    value = next(c for c in action.choices if c != default)
    return [value], value
  if dest == "mesh":
    return ["1x3"], (1, 3)
  if dest == "hparams":
    return ['{"units": 8}'], {"units": 8}
  if action.type in (int, float):
    return [str((default or 0) + 2)], action.type((default or 0) + 2)
  return ["given-value"], "given-value"


def test_every_flag_sets_its_setting_or_is_cli_only():
  assert set(_actions()) == set(cli.FLAG_SETTINGS) | CLI_ONLY
  for dest, key in cli.FLAG_SETTINGS.items():
    settings.resolve(key, dest)  # A real setting (raises otherwise).


@pytest.mark.parametrize("dest", sorted(cli.FLAG_SETTINGS))
def test_each_flag_changes_its_setting_and_nothing_else(dest):
  """The flag's value lands at its key; every other key keeps the run's default."""
  key = cli.FLAG_SETTINGS[dest]
  base = _run("--data", "x.csv", "--device", "cpu", "--layout", "single")
  action = _actions()[dest]
  args, want = _flag_value(dest, action, _get(base, key))
  flag = cli.flag_of(dest)
  assert flag in action.option_strings
  fixed = [f for f in (["--data", "x.csv"], ["--device", "cpu"], ["--layout", "single"])
           if f[0] != flag]
  got = _run(*[x for f in fixed for x in f], flag, *args)
  assert _get(got, key) == want
  before, after = dataclasses.asdict(base), dataclasses.asdict(got)
  changed = {f"{section}.{k}" for section in ("example_gen", "trainer", "evaluator")
             for k in before[section] if before[section][k] != after[section][k]}
  changed |= {k for k in before if not isinstance(before[k], dict) and before[k] != after[k]}
  if dest == "data":  # The source decides the trainer's and the evaluator's defaults.
    return
  if dest == "label":  # A CSV's pipeline is named after its file and label (issue 47).
    assert changed == {key, "pipeline_name"} and got.pipeline_name == f"x-{want}", changed
    return
  assert changed == {key}, changed


def test_every_flag_defaults_to_not_given():
  """No flag carries a default of its own: the config's defaults apply, so a flag left
  out never overrides --config's file."""
  actions = _actions()
  assert all(actions[dest].default is None for dest in cli.FLAG_SETTINGS)
  assert actions["home"].default == config_lib.DEFAULT_HOME


def test_every_choice_list_is_the_configs_enum():
  actions = _actions()
  assert {d: tuple(actions[d].choices) for d in CHOICES} == CHOICES


@pytest.mark.parametrize("data", ["synthetic", "taxi", "my/data-*.csv"])
def test_a_run_without_flags_trains_the_default_config_of_its_source(data):
  """The whole config, key by key; the mesh is fitted to the devices (2x2 on logical CPU
  devices)."""
  got = _run("--data", data, "--device", "cpu")
  want = config_lib.default_config(data)
  assert got.trainer.mesh == devices.default_mesh(0, want.trainer.batch_size)
  assert dataclasses.replace(got.trainer, mesh=want.trainer.mesh, device=want.trainer.device) \
      == want.trainer
  assert (got.example_gen, got.evaluator) == (want.example_gen, want.evaluator)


def test_a_csv_trains_the_mlp_on_standardised_features_and_synthetic_the_linear_model():
  """What the source changes, seen in the config a run gets (not restated: the model
  each trains is decided by default_trainer alone)."""
  csv, synthetic = _run("--data", "my.csv").trainer, _run().trainer
  assert (csv.model, csv.normalize) == ("mlp", True)
  assert (synthetic.model, synthetic.normalize) == ("linear", False)
  assert _run("--data", "my.csv", "--model", "linear").trainer.model == "linear"
  assert _run("--set", "example_gen.source=my.csv").trainer.model == "mlp"


def test_devices_default_to_the_configs_for_mirrored_and_auto():
  """Without --devices, mirrored and auto keep config devices 0: every GPU, or
  devices.CPU_DEVICES logical CPU devices, the same number the planner plans for."""
  from tfx_parallel.components.distributed_trainer.plan import layout_choice  # pylint: disable=g-import-not-at-top
  for layout in ("mirrored", "auto"):
    trainer = _run("--layout", layout).trainer
    assert trainer.devices == TrainerConfig().devices == 0
  budget = layout_choice.device_budget(trainer, gpus=[], host_memory=lambda: 8 << 30)
  assert budget.num_devices == devices.CPU_DEVICES
  assert _run("--layout", "auto", "--devices", "4").trainer.devices == 4


def test_multi_worker_sizes_the_shards_for_its_workers_unless_told():
  assert _run("--layout", "multi_worker", "--workers", "3").example_gen.num_workers == 3
  assert _run("--layout", "single", "--workers", "3").example_gen.num_workers == 1
  assert _run("--layout", "multi_worker", "--set",
              "example_gen.num_workers=1").example_gen.num_workers == 1


def test_help_prints_the_configs_defaults():
  p = argparse.ArgumentParser()
  cli.add_run_arguments(p)
  text = " ".join(p.format_help().split())
  t, csv = config_lib.default_trainer("synthetic"), config_lib.default_trainer("taxi")
  assert f"(default: {t.optimizer})" in text
  assert f"(default: {t.layout}, a batch x model DTensor mesh)" in text
  assert f"default: {t.learning_rate:g} for synthetic data, {csv.learning_rate:g} for " \
         f"CSV/taxi" in text
  assert f"default: {t.model} for synthetic data, {csv.model} for CSV/taxi" in text
  assert f"(default: {t.epochs})" in text
