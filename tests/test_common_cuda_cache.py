"""CUDA's JIT cache on a volume the image's user cannot write (components/common/cuda_cache.py).

KFP sets no fsGroup, so a claim mounted at the image's CUDA_CACHE_PATH keeps its root's
owner, typically root with mode 0755 (docs/kubeflow.md). The image runs as uid 1000.
Here the volume is a directory owned by root with mode 0755, and the step is a process
running as uid 1000 (when the tests run as root), or the directory is 0555 (otherwise).
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from tfx_parallel.components.common import cuda_cache

_IMAGE_UID = 1000  # kubeflow/Dockerfile: USER 1000.
_PROBE = """
import io, json, os, sys
sys.path.insert(0, os.path.dirname({path!r}))
import cuda_cache
if os.geteuid() == 0:  # The step runs as the image's user (this interpreter is root's).
  os.setgid({uid}); os.setuid({uid})
env = {{"CUDA_CACHE_PATH": {cache!r}, "HOME": {home!r}}}
out = io.StringIO()
first = cuda_cache.prepare(env, out)
second = cuda_cache.prepare(env, out)
print(json.dumps({{"path": env["CUDA_CACHE_PATH"], "first": first.message,
                   "second": second.message, "console": out.getvalue()}}))
"""


def _run_as_image_user(cache, home):
  """prepare() twice in a process of the image's uid; what it left and printed."""
  code = _PROBE.format(path=cuda_cache.__file__, cache=str(cache), home=str(home),
                       uid=_IMAGE_UID)
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=60)
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout)


@pytest.fixture()
def pod():
  """A directory every user can traverse (pytest's tmp_path is private to its user)."""
  directory = tempfile.mkdtemp(prefix="cuda-cache-test-")
  os.chmod(directory, 0o755)
  yield pathlib.Path(directory)
  for sub, _, _ in os.walk(directory):
    os.chmod(sub, 0o755)
  shutil.rmtree(directory)


@pytest.fixture()
def volume(pod):
  """A mounted claim's root as KFP leaves it: root-owned 0755 (0555 when not root)."""
  root = pod / "var-cache-cuda"
  root.mkdir()
  os.chmod(root, 0o755 if os.geteuid() == 0 else 0o555)
  return root


@pytest.fixture()
def home(pod):
  home = pod / "home-tfx"
  home.mkdir()
  if os.geteuid() == 0:
    os.chown(home, _IMAGE_UID, _IMAGE_UID)
  return home


def test_unwritable_volume_is_said_once_and_kernels_go_home(volume, home):
  result = _run_as_image_user(volume, home)
  fallback = str(home / ".nv" / "ComputeCache")
  assert result["path"] == fallback
  assert result["first"] and result["second"] is None
  assert result["console"].count("\n") == 1, result["console"]
  assert f"CUDA cache {volume} (CUDA_CACHE_PATH) is not writable by uid" in result["console"]
  assert f"CUDA compiles its kernels into {fallback} instead" in result["console"]
  assert os.path.isdir(fallback) and not os.listdir(volume)


def test_writable_volume_is_used_silently(volume, home):
  os.chmod(volume, 0o1777)  # What the image's `chmod 1777` gives when nothing hides it.
  result = _run_as_image_user(volume, home)
  assert result == {"path": str(volume), "first": None, "second": None, "console": ""}
  assert not os.listdir(volume)  # The probe file is gone.


def test_no_cache_path_or_disabled_cache_is_left_alone(tmp_path):
  assert cuda_cache.check({}) == cuda_cache.CacheCheck(None, None)
  missing = str(tmp_path / "nowhere" / "cache")
  assert cuda_cache.check({"CUDA_CACHE_PATH": missing, "CUDA_CACHE_DISABLE": "1"}) == (
      cuda_cache.CacheCheck(missing, None))
  assert not os.path.exists(missing)
