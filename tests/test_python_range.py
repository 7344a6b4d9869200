"""The Python versions README states ("Requirements": **Python: 3.10**) are the ones
constraints.txt allows, and the ones setup accepts (issue 42).

constraints.txt states its Python range in two places: the `--python-version` it was
resolved for (its header) and, per pinned package, that package's `Requires-Python`,
read here from the installed distributions (make setup installs exactly the pins).
"""
import importlib.metadata
import os
import re

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CANDIDATES = [f"3.{minor}" for minor in range(6, 16)]


def _read(name: str) -> str:
  with open(os.path.join(REPO, name), encoding="utf-8") as f:
    return f.read()


def readme_pythons() -> set:
  """The versions in README's "**Python: 3.10 or 3.9**" (Requirements)."""
  requirements = _read("README.md").split("## Requirements", 1)[1].split("\n## ", 1)[0]
  match = re.search(r"\*\*Python: (3\.\d+)(?: or (3\.\d+))?\*\*", requirements)
  assert match, "README's Requirements lost its '**Python: A or B**' line"
  return {v for v in match.groups() if v}


def constraint_pins() -> dict:
  """{name: version} of every `name==version` line of constraints.txt."""
  pins = {}
  for line in _read("constraints.txt").splitlines():
    match = re.match(r"([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;]+)", line)
    if match:
      pins[canonicalize_name(match.group(1))] = match.group(2)
  return pins


def allowed(requires_python: str) -> set:
  """The CANDIDATES minor versions a Requires-Python string admits (any patch release)."""
  spec = SpecifierSet(requires_python or "")
  return {v for v in CANDIDATES if any(spec.contains(f"{v}.{patch}") for patch in (0, 99))}


def pinned_range() -> tuple:
  """(the versions every pin admits, {pin: its Requires-Python} of every pin)."""
  versions, requires_of = set(CANDIDATES), {}
  for name, version in sorted(constraint_pins().items()):
    try:
      dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
      raise AssertionError(f"{name}=={version} (constraints.txt) is not installed: "
                           "run make setup") from None
    assert dist.version == version, (f"{name} {dist.version} installed, constraints.txt "
                                     f"pins {version}: run make setup")
    requires = dist.metadata.get("Requires-Python") or ""
    requires_of[f"{name}=={version}"] = requires
    versions &= allowed(requires)
  return versions, requires_of


def test_readme_states_the_python_versions_the_pins_allow():
  versions, requires_of = pinned_range()
  stated = readme_pythons()
  refusing = {v: sorted(p for p, r in requires_of.items() if v not in allowed(r))
              for v in sorted(stated - versions)}
  assert stated == versions, (
      f"README says Python {sorted(stated)}; the pins of constraints.txt allow "
      f"{sorted(versions)}. Pins refusing a stated version (first 5): "
      f"{ {v: pins[:5] for v, pins in refusing.items()} }")


def test_constraints_were_resolved_for_a_version_readme_states():
  [resolved] = re.findall(r"--python-version (3\.\d+)", _read("constraints.txt"))
  assert resolved in readme_pythons()


def test_setup_accepts_exactly_the_readme_versions():
  [accepted] = re.findall(r'case "\$ver" in ([0-9.|]+)\)', _read(".ci/find_python"))[:1]
  assert set(accepted.split("|")) == readme_pythons()
  [python_requires] = re.findall(r'python_requires="([^"]+)"', _read("setup.py"))
  assert readme_pythons() <= allowed(python_requires)


def test_allowed_reads_requires_python_as_pip_does():
  assert allowed(">=3.9,<3.11") == {"3.9", "3.10"}
  assert allowed("<3.11,>=3.9") == {"3.9", "3.10"}
  assert allowed(">=3.10") == set(CANDIDATES) - {"3.6", "3.7", "3.8", "3.9"}
  assert allowed(">=3.9.2") >= {"3.9"}  # 3.9.2 and later 3.9 releases
  assert allowed("") == set(CANDIDATES)
