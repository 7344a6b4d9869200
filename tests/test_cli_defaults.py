"""Issue #25, one place per fact: `tfx-parallel run`'s defaults are the config's.

Every run flag that sets a config key takes its default from the config (ExampleGenConfig,
PipelineConfig, and config_lib.default_trainer: TrainerConfig's defaults with what the CLI
changes for a data source, listed once). A literal default in the argparse setup that
differs from the config fails here, key by key; so does a new flag nobody classified."""
import argparse
import dataclasses

import pytest

from tfx_parallel.components.common import keys
from tfx_parallel.components.distributed_trainer import config as trainer_lib
from tfx_parallel.components.distributed_trainer.plan import devices
from tfx_parallel.components.distributed_trainer.config import TrainerConfig
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.pipeline import cli
from tfx_parallel.pipeline import config as config_lib

# flag dest -> (which config, key)
TRAINER_FLAGS = {
    "layout": "layout", "device": "device", "require_gpu": "require_gpu",
    "gpu_memory": "gpu_memory", "device_memory": "device_memory", "workers": "workers",
    "module_file": "module_file", "module_path": "module_path", "hparams": "hparams",
    "task": "task", "steps": "steps", "epochs": "epochs", "batch_size": "batch_size",
    "optimizer": "optimizer", "input_cache": "cache"}
EXAMPLE_GEN_FLAGS = {"data": "source", "label": "label", "rows": "rows",
                     "features": "num_features"}
PIPELINE_FLAGS = {"pipeline_name": "pipeline_name", "with_tfma": "with_tfma",
                  "enable_cache": "enable_cache"}
# Default None: the value depends on --data (default_trainer) or on the devices and the
# layout (devices.default_mesh, cli._devices), and is checked below through the config.
LATE_FLAGS = {"model", "learning_rate", "mesh", "devices"}
# Flags that set no config key.
CLI_ONLY = {"help", "home", "verbose", "beam_arg", "runner", "dask_address"}
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


def test_every_flag_is_classified():
  assert set(_actions()) == (set(TRAINER_FLAGS) | set(EXAMPLE_GEN_FLAGS) | set(PIPELINE_FLAGS)
                             | LATE_FLAGS | CLI_ONLY)


def test_every_flag_default_is_the_configs_key_by_key():
  actions = _actions()
  trainer = config_lib.default_trainer(ExampleGenConfig().source)
  wrong = {}
  for dests, config in ((TRAINER_FLAGS, trainer), (EXAMPLE_GEN_FLAGS, ExampleGenConfig()),
                        (PIPELINE_FLAGS, config_lib.PipelineConfig())):
    for dest, key in dests.items():
      if actions[dest].default != getattr(config, key):
        wrong[dest] = (actions[dest].default, getattr(config, key))
  assert not wrong, f"flag default != config default: {wrong}"
  assert actions["home"].default == config_lib.DEFAULT_HOME
  assert all(actions[dest].default is None for dest in LATE_FLAGS)


def test_every_choice_list_is_the_configs_enum():
  actions = _actions()
  assert {d: tuple(actions[d].choices) for d in CHOICES} == CHOICES


@pytest.mark.parametrize("data", ["synthetic", "taxi", "my/data-*.csv"])
def test_a_run_without_flags_trains_default_trainer_of_its_source(data):
  """The whole trainer config, key by key; the mesh is fitted to the devices (2x2 on
  logical CPU devices)."""
  got = dataclasses.asdict(_run("--data", data, "--device", "cpu").trainer)
  want = dataclasses.asdict(config_lib.default_trainer(data))
  assert got.pop("mesh") == devices.default_mesh(0, want["batch_size"])
  assert got.pop("device") == "cpu"
  want.pop("mesh"), want.pop("device")
  assert got == want


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


def test_default_trainer_differs_from_trainer_config_only_where_listed():
  """What `tfx-parallel run` changes from the Python defaults, per source; anything else
  differing is a second definition of a default."""
  base = dataclasses.asdict(TrainerConfig())
  for source, changed in (("synthetic", {"layout": "mesh", "learning_rate": 0.05}),
                          ("taxi", {"layout": "mesh", "model": "mlp", "normalize": True})):
    run = dataclasses.asdict(config_lib.default_trainer(source))
    assert {k: v for k, v in run.items() if base[k] != v} == changed, source


def test_the_python_defaults_are_adam_at_0_01():
  """#26: SGD at 0.1 diverged on the raw taxi columns; the README's drop-in block had to
  set Adam at 0.01. That is now the default."""
  assert (TrainerConfig().optimizer, TrainerConfig().learning_rate) == ("adam", 0.01)


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
