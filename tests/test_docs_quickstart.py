"""The README's and the docs' quick-start blocks, read from the Markdown at test time (fast).

* Every ``tfx-parallel`` command in a README shell block, and in a docs shell block marked
  ``<!-- quick start ... -->``, parses with the real CLI parser; a ``run`` command's
  settings build and validate (pipeline/cli.py ``config_from_args``, no I/O), so a flag or
  setting renamed in the code fails here.
* Every ``make TARGET`` there is a Makefile target; every file a ``docker build -f``
  or a ``cp`` names exists.
* The README's tour model (``build_model``) passes the trainer's own pre-training check
  (user_module.check) on float, int and string features, for regression and 3 classes.

The README's drop-in pipeline runs in tests/test_readme.py, the ML Metadata recipe in
tests/test_metrics_report.py (both now in docs/stock-tfx.md and docs/results.md).
"""
import glob
import os
import re
import shlex

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK_START = "<!-- quick start"
TOUR_MODEL = "<!-- tour model: checked by a test -->"


def _read(path):
  with open(os.path.join(REPO, path), encoding="utf-8") as f:
    return f.read()


def shell_blocks(text: str, marked_only: bool):
  """The ```sh blocks of ``text`` (only those right after a quick-start marker)."""
  pattern = r"(<!--[^\n]*-->\n)?```(?:sh|bash)\n(.*?)\n```"
  for match in re.finditer(pattern, text, re.S):
    if marked_only and not (match.group(1) or "").startswith(QUICK_START):
      continue
    yield match.group(2)


def commands(block: str):
  """The block's commands: comments dropped, continuation lines joined."""
  joined = re.sub(r"\\\n\s*", " ", block)
  for line in joined.splitlines():
    line = line.split(" #", 1)[0].strip()
    if line and not line.startswith("#"):
      yield line


def quick_start_commands():
  found = []
  for block in shell_blocks(_read("README.md"), marked_only=False):
    found += [("README.md", c) for c in commands(block)]
  for path in sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True)):
    rel = os.path.relpath(path, REPO)
    for block in shell_blocks(_read(rel), marked_only=True):
      found += [(rel, c) for c in commands(block)]
  return found


COMMANDS = quick_start_commands()


def test_the_quick_starts_hold_commands():
  where = {path for path, _ in COMMANDS}
  assert "README.md" in where and "docs/getting-started.md" in where, where
  assert any(c.startswith("tfx-parallel run") for _, c in COMMANDS)


@pytest.mark.parametrize("path,command",
                         [c for c in COMMANDS if shlex.split(c[1])[0].endswith("tfx-parallel")],
                         ids=lambda v: v if "/" in v or v.endswith(".md") else v[:60])
def test_each_tfx_parallel_command_parses_and_its_settings_validate(path, command):
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  argv = shlex.split(command)[1:]
  try:
    args = cli.build_parser().parse_args(argv)
  except SystemExit as e:
    raise AssertionError(f"{path}: `{command}` does not parse (exit {e.code})") from None
  if args.command == "run":
    cli.config_from_args(args).validate()


def test_each_make_target_and_dockerfile_exists():
  targets = set(re.findall(r"^([A-Za-z][\w-]*):", _read("Makefile"), re.M))
  for path, command in COMMANDS:
    argv = shlex.split(command)
    if argv[0] == "make":
      named = [a for a in argv[1:] if "=" not in a] or ["all"]
      assert set(named) <= targets, f"{path}: `{command}`: no such Makefile target"
    if argv[:2] == ["docker", "build"]:
      dockerfile = argv[argv.index("-f") + 1]
      assert os.path.exists(os.path.join(REPO, dockerfile)), f"{path}: {dockerfile}"
    if argv[0] == "cp":  # A file the docs tell you to copy from the repository.
      assert os.path.exists(os.path.join(REPO, argv[1])), f"{path}: `{command}`: no {argv[1]}"


def test_the_readme_tour_model_passes_the_trainers_check(tmp_path):
  text = _read("README.md")
  assert TOUR_MODEL in text, "README.md lost its tour model marker"
  code = re.match(r"\s*```python\n(.*?)\n```", text.split(TOUR_MODEL, 1)[1], re.S).group(1)
  (tmp_path / "my_model.py").write_text(code)
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  features = (ms.FeatureSpec("weight", ms.FLOAT32), ms.FeatureSpec("year", "int64"),
              ms.FeatureSpec("origin", "string", vocabulary=("eu", "jp", "us"), num_ids=4))
  module = user_module.load(module_file=str(tmp_path / "my_model.py"))
  for task, classes in (("regression", 1), ("multiclass", 3)):
    spec = ms.ModelSpec(features=features, label_key="y", task=task, num_classes=classes)
    model = user_module.check(module, spec)
    assert model.output_shape[-1] == spec.output_units


def test_the_pandas_index_message_in_the_data_page_is_the_codes(tmp_path):
  """docs/data.md quotes the line a CSV written with pandas' default index gets: the
  index is left out (#47; it used to stop the run)."""
  from tfx_parallel.components.partitioned_example_gen import sources  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig  # pylint: disable=g-import-not-at-top
  path = tmp_path / "f.csv"
  path.write_text(",a,b,y\n" + "".join(f"{i},{i % 3},{i % 5},{i % 2}\n" for i in range(30)))
  plan = sources.plan_source(ExampleGenConfig(source=str(path), label="y").validate())
  [line] = plan.choice.lines()
  quoted = line[:line.index("row index:") + len("row index:")]
  assert f"`{quoted} ...`" in _read("docs/data.md"), quoted
