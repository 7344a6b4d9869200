"""CUDA's JIT cache: used where the image points it, or said once where kernels go instead.

The image sets ``CUDA_CACHE_PATH=/var/cache/cuda`` (kubeflow/Dockerfile), and
kubeflow/gpu.yaml mounts a PersistentVolumeClaim there so that the kernels CUDA
JIT-compiles from PTX (Hopper, with the TF 2.16.2 wheel) survive the pod. But KFP sets
no ``fsGroup`` on its pods (kubeflow/pipelines ``backend/src/v2/compiler/argocompiler/
argo.go``: the workflow's ``PodSecurityContext`` carries only ``runAsUser``/
``runAsGroup``/``runAsNonRoot`` from the admin's settings; ``kubernetes_executor_config.proto``
has no security context), and a mounted claim hides the image's ``chmod 1777``: a fresh
volume's root is usually ``root:root 0755``, where the image's uid 1000 cannot create a
file. CUDA does not fail on that, nor say so: every process compiles its kernels
again, silently.

:func:`check` tells, without touching the environment, whether the configured cache
directory is writable by this process and, if not, which directory CUDA should use
instead: CUDA's own default, ``$HOME/.nv/ComputeCache`` (the CUDA C Programming
Guide, "CUDA Environment Variables"), so at least the
processes of one pod share their kernels. :func:`prepare` applies that and prints one
line, once per run (child processes inherit a marker).
"""
import os
import sys
import tempfile
from typing import Mapping, NamedTuple, Optional

CACHE_ENV = "CUDA_CACHE_PATH"
DISABLE_ENV = "CUDA_CACHE_DISABLE"
_SAID_ENV = "TFX_PARALLEL_CUDA_CACHE_CHECKED"


class CacheCheck(NamedTuple):
  """What :func:`check` found: the directory to use, and a message when it moved."""
  path: Optional[str]       # The CUDA_CACHE_PATH to run with (None: leave it unset).
  message: Optional[str]    # One line for the console when the configured path fails.


def _writable(directory: str) -> Optional[str]:
  """None if a file can be created in `directory` (made if missing), else why not."""
  try:
    os.makedirs(directory, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".tfx-parallel-probe-"):
      pass
    return None
  except OSError as e:
    try:
      st = os.stat(directory)
      owner = f"owner uid {st.st_uid} gid {st.st_gid}, mode {st.st_mode & 0o7777:04o}"
    except OSError:
      owner = "cannot be created"
    return f"{owner}: {e.strerror or e}"


def check(environ: Mapping[str, str]) -> CacheCheck:
  """Where CUDA should keep its JIT cache in this process's environment."""
  configured = environ.get(CACHE_ENV)
  if not configured or environ.get(DISABLE_ENV) == "1":
    return CacheCheck(configured, None)
  problem = _writable(configured)
  if problem is None:
    return CacheCheck(configured, None)
  home = environ.get("HOME") or tempfile.gettempdir()
  fallback = os.path.join(home, ".nv", "ComputeCache")
  if _writable(fallback) is not None:
    fallback = os.path.join(tempfile.gettempdir(), f"cuda-cache-{os.getuid()}")
  return CacheCheck(fallback, (
      f"tfx-parallel: CUDA cache {configured} ({CACHE_ENV}) is not writable by uid "
      f"{os.getuid()} ({problem}); CUDA compiles its kernels into {fallback} instead, "
      f"for this pod only. To keep them across pods, make the volume's root writable "
      f"once (e.g. `chmod 1777` it from a pod running as root; docs/kubeflow.md, "
      f"\"CUDA's JIT cache\")."))


def prepare(environ=None, stream=None) -> CacheCheck:
  """Applies :func:`check` to `environ` (default os.environ); prints its message once."""
  environ = os.environ if environ is None else environ
  if environ.get(_SAID_ENV):
    return CacheCheck(environ.get(CACHE_ENV), None)
  result = check(environ)
  environ[_SAID_ENV] = "1"
  if result.message:
    environ[CACHE_ENV] = result.path
    print(result.message, file=stream or sys.stderr, flush=True)
  return result
