"""The docs' reference pages are generated from the code (docs/gen_reference.py): each page
on disk must be what the generator writes now, and every setting, Kubeflow key and CLI
flag must have its meaning written in the code (a dataclass docstring's ``Attributes:``,
an argparse ``help``). Fast: the generator only imports the configs and the CLI parser."""
import dataclasses
import os
import typing

import pytest

from script_util import REPO, load_script

gen = load_script("docs/gen_reference.py")


@pytest.fixture(scope="module")
def rendered():
  return gen.render()


@pytest.mark.parametrize("name", sorted(gen.PAGES))
def test_the_reference_page_on_disk_is_what_the_code_generates(rendered, name):
  path = os.path.join(REPO, "docs", "reference", name)
  assert os.path.exists(path), f"{path} is missing: run .venv/bin/python docs/gen_reference.py"
  with open(path, encoding="utf-8") as f:
    on_disk = f.read()
  assert on_disk == rendered[name], (
      f"docs/reference/{name} is stale (the code changed): run "
      ".venv/bin/python docs/gen_reference.py and commit the page")


def test_every_setting_has_its_meaning_in_a_docstring():
  from tfx_parallel.pipeline import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import settings  # pylint: disable=g-import-not-at-top
  documented = {key for key, _, _, doc in gen.walk(config_lib.PipelineConfig) if doc}
  missing = [k for k in settings.all_keys() if k not in documented]
  assert not missing, (f"settings without a meaning in their config dataclass's "
                       f"'Attributes:' docstring: {missing}")


def test_every_kubeflow_key_has_its_meaning_in_a_docstring():
  from tfx_parallel.kubeflow import config as kf  # pylint: disable=g-import-not-at-top
  for cls in (kf.KubeflowConfig, kf.ComponentPlacement, kf.Accelerator, kf.Toleration,
              kf.RetryPolicy):
    docs = gen.attribute_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not missing, f"{cls.__name__}: no meaning for {missing}"


def test_every_cli_flag_has_help(rendered):
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  parser = cli.build_parser()
  sub = next(a for a in parser._actions if a.dest == "command")  # pylint: disable=protected-access
  for name, command in sub.choices.items():
    for action in command._actions:  # pylint: disable=protected-access
      if action.dest == "help":
        continue
      assert action.help, f"tfx-parallel {name} {action.option_strings}: no help text"
      for flag in action.option_strings:
        assert f"`{flag}`" in rendered["cli.md"], flag


def test_attribute_docs_reads_google_style_with_shared_and_continued_entries():
  @dataclasses.dataclass
  class Example:
    """Summary.

    Attributes:
      a: first line
        continued.
      b, c: shared text.

    Returns:
      x: not an attribute.
    """
    a: int = 1
    b: typing.Optional[str] = None
    c: typing.Tuple[str, ...] = ()

  assert gen.attribute_docs(Example) == {"a": "first line continued.", "b": "shared text.",
                                         "c": "shared text."}
  hints = typing.get_type_hints(Example)
  assert [gen.type_name(hints[n]) for n in "abc"] == ["int", "str or null", "list of str"]
