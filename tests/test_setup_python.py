"""`make setup`'s choice of interpreter (.ci/find_python, issue 42): a Python 3.10
already on the machine, else uv's managed CPython 3.10 with one line saying so, else an
error naming what was tried and the command that fixes it.

The script runs with a PATH and HOME of the test's own. uv is a stand-in that records its
arguments: the real one would download CPython from GitHub. Its output is what the real
uv 0.13.9 printed on this machine (2026-12-04, `uv python install 3.10` with github.com
unreachable; with an installed 3.10: "Installed Python 3.10.13 in 414ms" and
" + cpython-3.10.13-linux-x86_64-gnu"), the lines astral-sh/uv writes in
crates/uv/src/commands/python/install.rs (perform_install: "Installed {} {}", then
" + {key}" per ChangeEventKind::Added; failures through write_error_chain as
"error: Failed to install {key}" and "  cause: ..." lines, exit 1), and
crates/uv/src/commands/python/find.rs (the interpreter's path on stdout).
"""
import hashlib
import io
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from script_util import load_script
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT = os.path.join(REPO, ".ci", "find_python")
BASH = shutil.which("bash")

# What uv 0.13.9 printed here when github.com could not be reached (see the docstring).
_DOWNLOAD = ("https://github.com/astral-sh/python-build-standalone/releases/download/20261009/"
             "cpython-3.10.22%2B20261009-x86_64-unknown-linux-gnu-install_only_stripped.tar.gz")
UV_OFFLINE = f"""error: Failed to install cpython-3.10.22-linux-x86_64-gnu
  cause: Request failed after 3 retries in 11.7s
  cause: Failed to download `{_DOWNLOAD}`
  cause: error sending request for url ({_DOWNLOAD})
  cause: client error (Connect)
  cause: dns error
  cause: error resolving DNS
  cause: failed to lookup address information: Name or service not known"""
UV_INSTALLED = "Installed Python 3.10.22 in 2.31s\n + cpython-3.10.22-linux-x86_64-gnu"

# A real Python 3.10 stands for the one uv would install: the test's own interpreter.
needs_310 = pytest.mark.skipif(sys.version_info[:2] != (3, 10),
                               reason="stands a real 3.10 in for uv's; this is "
                               f"{sys.version_info[0]}.{sys.version_info[1]}")


def standin_uv(bindir, calls, managed_python, offline=False):
  """A `uv` in ``bindir`` that appends its arguments to ``calls`` (one line per call):
  ``python install`` prints uv's success (or offline failure) output; ``python find``
  prints ``managed_python``."""
  # Shell builtins only: the PATH holds nothing else.
  install = (f"printf '%s\\n' '{UV_OFFLINE}' >&2; exit 1" if offline else
             f"printf '%s\\n' '{UV_INSTALLED}' >&2; exit 0")
  script = f"""#!/bin/sh
echo "$*" >> '{calls}'
case "$1 $2" in
  "python install") {install};;
  "python find") echo '{managed_python}'; exit 0;;
esac
echo "error: unexpected call: $*" >&2; exit 2
"""
  path = os.path.join(bindir, "uv")
  with open(path, "w") as f:
    f.write(script)
  os.chmod(path, 0o755)
  return path


def run_setup(tmp_path, *args):
  """.ci/find_python with PATH = tmp_path/bin only and HOME = tmp_path/home."""
  env = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path / "home"),
         "XDG_CACHE_HOME": str(tmp_path / "cache")}
  return subprocess.run([BASH, SCRIPT, *args], env=env, capture_output=True, text=True,
                        timeout=60)


@pytest.fixture
def machine(tmp_path):
  """A machine with no Python at all: tmp_path/bin, tmp_path/home; the calls file."""
  (tmp_path / "bin").mkdir()
  (tmp_path / "home").mkdir()
  return tmp_path, tmp_path / "uv-calls.txt"


def calls_of(calls):
  return calls.read_text().splitlines() if calls.exists() else []


@needs_310
def test_without_3_10_uv_installs_its_managed_3_10_and_says_so_in_one_line(machine):
  tmp_path, calls = machine
  uv = standin_uv(tmp_path / "bin", calls, sys.executable)
  out = run_setup(tmp_path)
  assert out.returncode == 0, out.stderr
  assert out.stdout == sys.executable + "\n"
  assert calls_of(calls) == ["python install --no-bin 3.10",
                             "python find --system --managed-python 3.10"]
  assert out.stderr.splitlines() == [
      f"No Python 3.10 on this machine: using uv's managed CPython 3.10 "
      f"({uv} python install 3.10): {sys.executable}"]


@needs_310
@pytest.mark.parametrize("where", ["PATH", "pyenv"])
def test_a_3_10_on_the_machine_is_chosen_and_uv_is_not_called(machine, where):
  tmp_path, calls = machine
  standin_uv(tmp_path / "bin", calls, "/nonexistent/python3.10")
  if where == "PATH":
    own = tmp_path / "bin" / "python3.10"
  else:
    own = tmp_path / "home" / ".pyenv" / "versions" / "3.10.13" / "bin" / "python3.10"
    own.parent.mkdir(parents=True)
  own.symlink_to(sys.executable)
  out = run_setup(tmp_path)
  assert out.returncode == 0, out.stderr
  assert out.stdout == f"{own}\n"
  assert out.stderr == ""
  assert calls_of(calls) == []


def test_when_uv_cannot_download_the_error_says_what_was_tried_and_the_fix(machine):
  tmp_path, calls = machine
  uv = standin_uv(tmp_path / "bin", calls, "/nonexistent/python3.10", offline=True)
  out = run_setup(tmp_path)
  assert out.returncode == 1
  assert out.stdout == ""
  assert calls_of(calls) == ["python install --no-bin 3.10"]
  err = out.stderr
  assert err.startswith("ERROR: tfx-parallel needs Python 3.10 "), err
  tried = err.split("Tried:", 1)[1]
  assert "- python3.10, ~/.pyenv/versions/3.10*, python3: none is 3.10" in tried
  assert f"- '{uv} python install --no-bin 3.10'" in tried
  assert "github.com, astral-sh/python-build-standalone" in err
  assert f"| error: Failed to install cpython-3.10.22-linux-x86_64-gnu" in err
  assert f"|   cause: Failed to download `{_DOWNLOAD}`" in err
  [fix] = [line.strip() for line in err.splitlines() if line.strip().startswith("Fix:")]
  assert fix.startswith(f"Fix: {uv} python install 3.10 "), fix


def test_a_named_interpreter_that_is_not_3_10_is_refused(machine):
  tmp_path, calls = machine
  standin_uv(tmp_path / "bin", calls, "/nonexistent/python3.10")
  out = run_setup(tmp_path, BASH)
  assert out.returncode == 1
  assert f"- PYTHON={BASH} (not a working Python)" in out.stderr
  assert "Fix: make run PYTHON=/path/to/python3.10" in out.stderr
  assert calls_of(calls) == []


def test_the_makefile_installs_the_uv_version_the_script_fetches():
  with open(SCRIPT) as f:
    [script_version] = [line.split("=", 1)[1].split()[0] for line in f
                        if line.startswith("UV_VERSION=")]
  with open(os.path.join(REPO, "Makefile")) as f:
    makefile = f.read()
  assert f"uv=={script_version}" in makefile
  assert "uv==" not in makefile.replace(f"uv=={script_version}", "")


def _fetch_uv():
  return load_script(".ci/fetch_uv.py")


# Entries of https://pypi.org/simple/uv/ (PEP 691 JSON, "files"), as served on 2026-12-04.
_FILES = [
    {"filename": "uv-0.13.9-py3-none-linux_armv6l.whl", "hashes": {"sha256": "56ec37616c00220032fc7b8c9d0ef51367fd0d70d9cd6ddd841660f949f84fed"},
     "url": "https://files.pythonhosted.org/packages/f9/f1/0bb95394ef73f480ac3a66d8c570a1eb22187c331b6a9e3ef6c953f885dd/uv-0.13.9-py3-none-linux_armv6l.whl"},
    {"filename": "uv-0.13.9-py3-none-macosx_10_12_x86_64.whl", "hashes": {"sha256": "c16ed11e013557536b3e60065f1b912f6407bd6518e041b961e23ef9e6b4fbf5"},
     "url": "https://files.pythonhosted.org/packages/1e/db/08e9ef4879bd667e6d7b4705e594e5bd3e4585f10fc63cb16b9fa2fac63e/uv-0.13.9-py3-none-macosx_10_12_x86_64.whl"},
    {"filename": "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "hashes": {"sha256": "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19"},
     "url": "https://files.pythonhosted.org/packages/3d/aa/26d64642d808de4a652579ef950d7cd2d37f080a8babf9c67c6b75fc4c3f/uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"},
]


def test_fetch_uv_picks_this_machines_wheel_and_unpacks_its_binary(tmp_path):
  fetch_uv = _fetch_uv()
  wheel = fetch_uv.pick(_FILES, "0.13.9", ("manylinux", "_x86_64"))
  assert wheel["filename"] == "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
  assert fetch_uv.pick(_FILES, "0.13.9", ("macosx", "_x86_64")) is _FILES[1]
  with pytest.raises(SystemExit, match=r"no uv 0.13.9 wheel for \('manylinux', '_sparc64'\)"):
    fetch_uv.pick(_FILES, "0.13.9", ("manylinux", "_sparc64"))
  data = io.BytesIO()
  with zipfile.ZipFile(data, "w") as z:
    z.writestr("uv/__init__.py", "")
    z.writestr("uv-0.13.9.data/scripts/uv", "#!/bin/sh\necho uv 0.13.9\n")
  wheel = {"filename": "uv.whl", "hashes": {"sha256": hashlib.sha256(data.getvalue()).hexdigest()}}
  fetch_uv.check_digest(data.getvalue(), wheel)
  with pytest.raises(SystemExit, match="sha256 of uv.whl is .*, the index lists"):
    fetch_uv.check_digest(data.getvalue() + b"x", wheel)
  path = fetch_uv.unpack(data.getvalue(), "0.13.9", str(tmp_path / "cache"))
  assert path == str(tmp_path / "cache" / "bin" / "uv")
  assert subprocess.run([path], capture_output=True, text=True).stdout == "uv 0.13.9\n"
