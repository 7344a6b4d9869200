"""The planner wired to real tf_keras models (layout_choice.py): device_memory parsing and
validation, the model -> planner variables bridge under default and user layout rules,
``layout: auto`` rewriting the config, and the warning for an explicit layout."""
import pytest

from tfx_parallel.components.common import keys
from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer.plan import layout_choice, layout_search
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer.config import TrainerConfig

KIB, MIB = 1 << 10, 1 << 20


@pytest.mark.parametrize("value, expected", [
    (4096, 4096), ("4096", 4096), ("512MiB", 512 * MIB), ("2GiB", 2 << 30),
    ("1.5GB", 1_500_000_000), ("200 KiB", 200 * KIB), ("64kb", 64_000)])
def test_parse_bytes(value, expected):
  assert layout_choice.parse_bytes(value) == expected


@pytest.mark.parametrize("value", [0, -5, "lots", "12 parsecs", "", True, 1.5, "-1MiB"])
def test_bad_device_memory_is_a_config_error_naming_the_key(value):
  with pytest.raises(ConfigError, match=r"^device_memory: .*Received: " + repr(value)[:3]):
    TrainerConfig(layout="auto", device_memory=value).validate()


def test_auto_is_a_layout_and_device_memory_is_optional():
  assert TrainerConfig(layout="auto", device_memory="1GiB").validate().layout == "auto"
  assert TrainerConfig(layout="single").validate().device_memory is None


def _spec(hidden):
  return ms.ModelSpec(
      features=(ms.FeatureSpec("x0", ms.FLOAT32), ms.FeatureSpec("x1", ms.FLOAT32)),
      label_key="y", task=ms.REGRESSION, num_classes=1, hparams={"hidden_units": list(hidden)})


@pytest.fixture(scope="module")
def mlp():
  """The built-in mlp with one hidden layer of 4096: 2x4096 + 4096 + 4096x1 + 1 params."""
  module = user_module.load(builtin="mlp")
  spec = _spec([4096])
  return module, spec, user_module.build(module, spec)


def test_planner_variables_follow_the_default_rules(mlp):
  _, _, model = mlp
  at = layout_choice.planner_variables(model)
  one, two = at(1), at(2)
  assert sum(v.num_elements for v in one) == 4 * 4096 + 1
  # hidden_1 kernel column-split with its bias, output kernel row-split, output bias whole.
  split = {v.path: v.split_dims for v in two}
  assert split == {"hidden_1/kernel": (1,), "hidden_1/bias": (0,), "output/kernel": (0,),
                   "output/bias": ()}
  # (param + grad + 2 slots) at shard size, plus two blocks of the largest variable in
  # transit: hidden_1's kernel half, 2 x 2048 x 4 B.
  assert layout_search.state_bytes_per_device(two, 2, 2) == (
      (2 * 4096 + 1) * 4 * 4 + 2 * (2 * 2048 * 4))


def test_the_host_figure_counts_an_early_stops_snapshot(mlp):
  _, _, model = mlp
  one = layout_choice.planner_variables(model)(1)
  whole = sum(v.num_elements * 4 for v in one)
  assert (layout_search.host_bytes(one, snapshot=True)
          - layout_search.host_bytes(one)) == whole
  assert (layout_search.run_bytes(one, 1, 1, 2, snapshot=True)
          - layout_search.run_bytes(one, 1, 1, 2)) == whole
  # The automatic length (neither steps nor epochs) stops early with a patience.
  # Every run keeps its best evaluation's weights (an early stop, or an overfitting run of
  # a set length exports them), so every plan counts the snapshot.
  assert layout_choice.keeps_best_weights(TrainerConfig(patience=5).validate())
  assert layout_choice.keeps_best_weights(TrainerConfig(patience=5, steps=10).validate())


def test_the_planner_allocates_no_model_and_no_slots(tmp_path):
  """``apply`` counts on the lazy probe and the slot table: planning a 256 MiB model with
  Adam (768 MiB of parameters and slots) raises the process's peak RSS by far less than
  the model (the probe's variables hold no values)."""
  from hooks_site import rss  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  del tf  # Loaded before the peak is reset: its own start-up is not the planner's.
  module = user_module.load(builtin="mlp")
  spec = _spec([8192, 8192])  # hidden_2's kernel: 8192 x 8192 x 4 B = 256 MiB.
  config = TrainerConfig(layout="auto", devices=4, device_memory="64GiB", model="mlp",
                         hparams={"hidden_units": [8192, 8192]}, optimizer="adam",
                         batch_size=64).validate()
  layout_choice.apply(config, module, _spec([8, 8]), gpus=[])  # Traces and imports once.
  rss.reset_peak()
  before = rss.status()["VmRSS"]
  chosen, _ = layout_choice.apply(config, module, spec, gpus=[])
  grew = rss.status()["VmHWM"] - before
  assert chosen.layout == "mirrored"  # Fits one device: data parallel over the four.
  assert grew < 64 * MIB, f"planning grew the RSS by {grew / MIB:.0f} MiB"


def test_user_rules_that_cannot_apply_on_an_axis_skip_it(mlp):
  module, _, model = mlp
  # 4096 splits over 2 and 4, but this rule names a dimension of size 2 (the features).
  at = layout_choice.planner_variables(model, lambda m: {"hidden_1/kernel": ("model", None)},
                                  module.name)
  assert at(2)[0].split_dims == (0,)
  assert at(4) is None
  # One device: (4 x 4096 + 1) x 4 B x 2 + two 2x4096 kernels in transit = 192 KiB; M=2
  # halves the split kernel only (1x4096: as large as the whole bias and output kernel,
  # 4096 x 4 B, two blocks in transit): 128 KiB.
  p = layout_search.plan(at, num_devices=4, memory_per_device=136 * KIB, global_batch=64,
                   slots_per_param=0)
  assert (p.layout, p.mesh, p.state_bytes_per_device) == ("mesh", (2, 2),
                                                          (3 * 4096 + 1) * 4 * 2 + 2 * 4096 * 4)
  with pytest.raises(layout_search.PlanError, match=r"M=2 of 4 device"):
    layout_search.plan(at, num_devices=4, memory_per_device=64 * KIB, global_batch=64,
                 slots_per_param=0)


def test_stock_sgd_keeps_a_slot_and_adam_two(mlp):
  module, spec, model = mlp
  assert layout_choice.slots_per_param(user_module.make_optimizer(module, spec, "adam", .1),
                                  model) == 2
  assert layout_choice.slots_per_param(user_module.make_optimizer(module, spec, "sgd", .1),
                                  model) == 1


def test_auto_over_budget_on_one_device_picks_model_axis_two(mlp):
  module, spec, _ = mlp
  config = TrainerConfig(layout="auto", devices=4, device_memory="200KiB", model="mlp",
                         optimizer="adam", batch_size=64).validate()
  chosen, record = layout_choice.apply(config, module, spec, gpus=[])
  assert (chosen.layout, chosen.mesh) == ("mesh", (2, 2))
  chosen.validate()
  assert record[keys.LAYOUT_CHOSEN] == "mesh 2x2"
  # 256 KiB of step state + two 2x4096 kernels (32 KiB each) in transit.
  assert "320.0 KiB on one device, more than its 200.0 KiB" in record[keys.LAYOUT_REASON]


def test_auto_that_fits_one_device_is_mirrored_over_all(mlp):
  module, spec, _ = mlp
  config = TrainerConfig(layout="auto", devices=4, device_memory="1MiB", model="mlp",
                         optimizer="adam").validate()
  chosen, record = layout_choice.apply(config, module, spec, gpus=[])
  assert (chosen.layout, chosen.devices, record[keys.LAYOUT_CHOSEN]) == (
      "mirrored", 4, "mirrored 4")


def test_auto_that_fits_nowhere_fails_with_the_numbers(mlp):
  module, spec, _ = mlp
  config = TrainerConfig(layout="auto", devices=4, device_memory="32KiB", model="mlp",
                         optimizer="adam").validate()
  # M=4: (4096 + 1) x 4 B x 4 + two of hidden_1's 2x1024 kernel blocks (8 KiB) in transit.
  with pytest.raises(layout_search.PlanError,
                     match=r"needs 80\.0 KiB per device even on the widest "
                           r"model axis possible here \(M=4 of 4 "
                           r"device\(s\)\), and each device has 32\.0 KiB"):
    layout_choice.apply(config, module, spec, gpus=[])


def test_auto_on_cpu_without_device_memory_plans_with_the_host_memory_shared(mlp, capsys):
  """Issue 31, case 3: no flag needed; the reason says which memory it planned with."""
  module, spec, _ = mlp
  config = TrainerConfig(layout="auto", devices=4, model="mlp").validate()
  budget = layout_choice.device_budget(config, gpus=[], host_memory=lambda: 8 << 30)
  assert (budget.num_devices, budget.memory_per_device) == (4, 2 << 30)
  chosen, record = layout_choice.choose(config, layout_choice.planner_variables(mlp[2]), budget, 2)
  assert chosen.layout == "mirrored" and chosen.devices == 4
  assert record[keys.LAYOUT_REASON].endswith(
      "; planned with 2.0 GiB per device: the 8.0 GiB of available host memory shared by "
      "4 logical CPU device(s)")
  # Through apply(), with this machine's MemAvailable: one line, no error.
  chosen, record = layout_choice.apply(config, module, spec, gpus=[])
  line, = capsys.readouterr().out.splitlines()
  assert line.startswith("[trainer] layout auto on 4 logical CPU device(s) of ")
  assert "of available host memory shared by 4 logical CPU device(s))" in line


def test_auto_on_cpu_without_any_memory_figure_names_the_key(mlp):
  module, spec, _ = mlp
  config = TrainerConfig(layout="auto", devices=4, model="mlp").validate()
  budget = layout_choice.device_budget(config, gpus=[], host_memory=lambda: None)
  with pytest.raises(ConfigError, match=r"^device_memory: layout 'auto' on CPU needs"):
    layout_choice.choose(config, layout_choice.planner_variables(mlp[2]), budget, 2)
  # A configured device_memory wins over the host's memory.
  configured = TrainerConfig(layout="auto", devices=4, device_memory="1MiB").validate()
  assert layout_choice.device_budget(configured, gpus=[], host_memory=lambda: 8 << 30) == \
      layout_choice.Budget(4, 1 << 20, "4 logical CPU device(s), device_memory")


@pytest.mark.parametrize("layout, extra, cores, line", [
    ("mesh", {"mesh": (4, 4)}, 2,
     "mesh 4x4 runs 16 logical CPU devices on 2 CPU core(s): they take turns on the cores, "
     "so training is slower, not faster; at most 2 fit this machine"),
    ("mirrored", {"devices": 8}, 4, "mirrored x8 runs 8 logical CPU devices on 4 CPU core(s)"),
    ("multi_worker", {"workers": 6}, 2, "multi_worker x6 runs 6 worker processes on 2 CPU"),
    ("auto", {"devices": 8}, 2, "layout auto over 8 devices runs 8 logical CPU devices on 2"),
    ("mesh", {"mesh": (2, 4)}, 8, None),
    ("mesh", {"mesh": (2, 2)}, 2, None),  # the default CPU mesh: a stand-in, no warning
    ("mirrored", {}, 2, None),        # 0 = 2 logical devices without a GPU
    ("single", {}, 1, None),
])
def test_more_logical_devices_than_cores_is_one_line_with_both_numbers(layout, extra, cores,
                                                                       line):
  """Issue 31, case 4."""
  config = TrainerConfig(layout=layout, **extra)
  warning = layout_choice.oversubscription(config, cores=cores, gpu_count=0)
  assert warning == line if line is None else warning.startswith(line), warning
  # On GPUs devices.plan fits the layout to them instead.
  assert layout_choice.oversubscription(config, cores=cores, gpu_count=2) is None


def test_explicit_layout_over_budget_warns_with_the_numbers_and_runs_as_asked(mlp, capsys):
  module, spec, _ = mlp
  config = TrainerConfig(layout="single", device_memory="200KiB", model="mlp",
                         optimizer="adam").validate()
  chosen, record = layout_choice.apply(config, module, spec, gpus=[])
  assert chosen is config and record == {}
  out = capsys.readouterr().out.strip().splitlines()
  # 256 KiB of step state + two 2x4096 kernels (32 KiB each) in transit.
  assert out == ["[trainer] WARNING: layout single needs 320.0 KiB of training state per "
                 "device (parameters, gradients, 2 optimizer slot(s) per parameter and the "
                 "largest variable in transit at an update, the export or a restore), more "
                 "than the 200.0 KiB per device of 1 logical CPU device(s), device_memory; "
                 "running it as asked"]
  fits = TrainerConfig(layout="mesh", mesh=(1, 2), device_memory="200KiB", model="mlp",
                       optimizer="adam").validate()
  assert layout_choice.apply(fits, module, spec, gpus=[]) == (fits, {})
  assert capsys.readouterr().out == ""


def test_gpu_memory_is_read_from_tensorflow():
  if not layout_choice.gpu_names():
    pytest.skip("no GPU: memory per device comes from device_memory")
  budget = layout_choice.device_budget(TrainerConfig(layout="auto"))
  assert budget.num_devices == len(layout_choice.gpu_names())
  assert budget.memory_per_device and budget.memory_per_device > 0


def test_the_executor_runs_the_module_file_once_and_hands_it_on(tmp_path):
  """executor.Do loads the module once (executor.load_module) and hands it to the
  planner and the check on the layout; neither imports the file again."""
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.job import Job  # pylint: disable=g-import-not-at-top
  runs = tmp_path / "runs.txt"
  path = tmp_path / "counted.py"
  path.write_text(f"open({str(runs)!r}, 'a').write('run\\n')\n"
                  "from tfx_parallel.components.distributed_trainer.models.mlp import build_model\n")
  config = TrainerConfig(layout="auto", devices=4, device_memory="64GiB",
                         module_file=str(path), batch_size=64).validate()
  spec = _spec([8])
  job = Job(config={}, examples_uri="", feature_keys=[], label_key="y", train_rows=8,
            model_dir="", model_run_dir="", history_dir="", checkpoint_dir="",
            model_spec=spec.to_dict())
  module = executor.load_module(config)
  job, config, _ = layout_choice.plan_job(job, config, module)
  executor.check_on_layout(job, config, module)
  assert runs.read_text().splitlines() == ["run"]
  layout_choice.plan_job(job, config)  # Without the module: imported again (the control).
  assert runs.read_text().splitlines() == ["run", "run"]
