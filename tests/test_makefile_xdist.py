"""`make test` runs each test file's module-scoped fixtures once.

Many slow test files share one pipeline run between their tests through a module-scoped
fixture. pytest-xdist's default schedule (``--dist load``) hands consecutive chunks of a
file's tests to both workers, and each worker then runs the fixture: the pipeline twice.
The Makefile's ``XDIST`` flags must keep a file on one worker. Checked here with the
Makefile's own flags on a generated suite: a file of 6 tests and two of 3, each with a
module fixture that records the worker that ran it.
"""
import collections
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_FILE = '''import os
import pytest

@pytest.fixture(scope="module")
def shared():
    with open(os.environ["SETUPS_LOG"], "a") as f:
        f.write("{name} %d\\n" % os.getpid())

'''


def makefile_xdist() -> list:
  with open(os.path.join(REPO, "Makefile")) as f:
    [flags] = re.findall(r"^XDIST\s*:=\s*(.*)$", f.read(), re.M)
  return flags.split()


def test_make_test_runs_a_module_fixture_once_per_file(tmp_path):
  flags = makefile_xdist()
  assert "-n" in flags  # Two workers: the case where a file can be split.
  log = tmp_path / "setups.log"
  for name, tests in (("a", 6), ("b", 3), ("c", 3)):
    body = _FILE.format(name=name) + "".join(
        f"def test_{i}(shared):\n    pass\n\n" for i in range(tests))
    (tmp_path / f"test_{name}.py").write_text(body)
  proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                         *flags, str(tmp_path)], cwd=str(tmp_path), capture_output=True,
                        text=True, timeout=300, env=dict(os.environ, SETUPS_LOG=str(log)))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert "12 passed" in proc.stdout
  setups = collections.Counter(line.split()[0] for line in log.read_text().splitlines())
  assert setups == {"a": 1, "b": 1, "c": 1}, (flags, setups)
