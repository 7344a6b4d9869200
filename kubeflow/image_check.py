"""Build-time check of the image (kubeflow/Dockerfile): TensorFlow is a CUDA build, and
every CUDA library it opens loads with the image's ``LD_LIBRARY_PATH``.

  python -m tfx_parallel.kubeflow.image_check [--cuda]

At build time there is no GPU and no driver (GKE mounts ``libcuda.so.1`` from the node
at /usr/local/nvidia/lib64), so this checks what the image itself must bring: the
NVIDIA wheels of ``tensorflow[and-cuda]``. The list of library directories is not kept
here; it is read from the installed wheel (:func:`required_library_dirs`):

* the ``nvidia/<package>/lib`` entries of the RUNPATH of TensorFlow's own libraries
  (``readelf -d``: ``libtensorflow_framework.so.2`` covers cublas, cudnn, cufft,
  cusolver, cusparse and cuda_runtime; ``python/_pywrap_tensorflow_internal.so`` covers
  nccl; ``libtensorflow_cc.so.2`` adds cuda_cupti), read by :func:`elf_dynamic`, a
  small ELF reader (python:3.10-slim has no binutils);
* every ``nvidia-*-cu12`` package the wheel's ``and-cuda`` extra requires (its METADATA),
  which adds the libraries the NVIDIA libraries themselves need and no TensorFlow
  RUNPATH covers: cusparse and cusolver need ``libnvJitLink.so.12``
  (``nvidia/nvjitlink/lib``). TensorFlow issues #63362 and #65842: 2.16 ``[and-cuda]``
  sees no GPU until ``LD_LIBRARY_PATH`` lists every ``site-packages/nvidia/*/lib``.

RUNPATH is not inherited: when TensorFlow dlopens ``libcusparse.so.12`` through its own
RUNPATH, cusparse's NEEDED ``libnvJitLink.so.12`` is searched only in cusparse's RUNPATH
and ``LD_LIBRARY_PATH``. So :func:`load_each` loads every library of those directories
in a fresh process of its own (nothing preloaded), with the image's environment, and
the check fails when a directory is missing from ``LD_LIBRARY_PATH`` or a library does
not load. A GPU pod checks the driver at start (trainer ``require_gpu``).
"""
import argparse
import glob
import os
import re
import struct
import subprocess
import sys
from typing import Dict, List, Mapping, Optional, Sequence

# TensorFlow's libraries whose RUNPATH says where it looks for CUDA (tensorflow wheel).
TF_LIBRARIES = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2",
                "python/_pywrap_tensorflow_internal.so")
# The names TF 2.16.2 dlopens (tsl/platform/default/dso_loader.cc: GetDsoHandle("cudart"),
# "cublas", "cublasLt", "cufft", "cusolver", "cusparse", "cupti", "cudnn", "nccl"),
# found by glob in the wheel directories ("libcuda.so.1" comes from the node).
DSO_NAMES = ("cudart", "cublas", "cublasLt", "cufft", "cusolver", "cusparse", "cupti",
             "cudnn", "nccl")
_NVIDIA_DIR = re.compile(r"\$ORIGIN/(?:\.\./)+nvidia/([A-Za-z0-9_]+)/lib$")
_EXTRA_REQ = re.compile(r"^Requires-Dist:\s*nvidia-([a-z0-9-]+?)-cu\d+\b.*extra\s*==\s*"
                        r"['\"]and-cuda['\"]", re.M)

_DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 1, 5, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2


def elf_dynamic(path: str) -> Dict[str, List[str]]:
  """``{"NEEDED": [...], "RUNPATH": [...]}`` of a 64-bit little-endian ELF shared
  library (what ``readelf -d`` prints; RPATH is folded into RUNPATH).

  Raises:
    ValueError: ``path`` is not a 64-bit little-endian ELF file (names it).
  """
  with open(path, "rb") as f:
    head = f.read(64)
    if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
      raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
      f.seek(phoff + i * phentsize)
      p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack("<IIQQQQQQ", f.read(56))
      if p_type == _PT_LOAD:
        loads.append((p_vaddr, p_offset, p_filesz))
      elif p_type == _PT_DYNAMIC:
        dynamic = (p_offset, p_filesz)
    if dynamic is None:
      return {"NEEDED": [], "RUNPATH": []}
    f.seek(dynamic[0])
    raw = f.read(dynamic[1])
    entries = [struct.unpack_from("<qQ", raw, o) for o in range(0, len(raw) - 15, 16)]
    strtab = next(v for t, v in entries if t == _DT_STRTAB)
    base = next(off + strtab - va for va, off, size in loads if va <= strtab < va + size)

    def string(at: int) -> str:
      f.seek(base + at)
      out = b""
      while b"\0" not in out:
        out += f.read(256)
      return out.split(b"\0", 1)[0].decode()

    out: Dict[str, List[str]] = {"NEEDED": [], "RUNPATH": []}
    for tag, value in entries:
      if tag == 0:
        break
      if tag == _DT_NEEDED:
        out["NEEDED"].append(string(value))
      elif tag in (_DT_RPATH, _DT_RUNPATH):
        out["RUNPATH"].extend(string(value).split(":"))
    return out


def runpath_packages(tf_dir: str) -> List[str]:
  """The ``nvidia/<package>/lib`` packages in the RUNPATH of TensorFlow's libraries."""
  found = set()
  for name in TF_LIBRARIES:
    path = os.path.join(tf_dir, name)
    if os.path.exists(path):
      for entry in elf_dynamic(path)["RUNPATH"]:
        match = _NVIDIA_DIR.match(entry)
        if match:
          found.add(match.group(1))
  return sorted(found)


def and_cuda_packages(metadata: str) -> List[str]:
  """The ``nvidia/<package>`` directories of the NVIDIA wheels the ``and-cuda`` extra
  requires (``nvidia-cuda-runtime-cu12`` -> ``cuda_runtime``), from the wheel METADATA."""
  return sorted({name.replace("-", "_") for name in _EXTRA_REQ.findall(metadata)})


def tensorflow_metadata(site_packages: str) -> str:
  """The text of the installed tensorflow wheel's METADATA ("" when not found)."""
  for path in sorted(glob.glob(os.path.join(site_packages, "tensorflow-*.dist-info",
                                            "METADATA"))):
    with open(path, encoding="utf-8") as f:
      return f.read()
  return ""


def required_packages(site_packages: str) -> List[str]:
  """Every ``nvidia/<package>/lib`` a CUDA TensorFlow here needs on the loader's path:
  RUNPATH entries of its libraries plus the ``and-cuda`` extra's NVIDIA wheels."""
  tf_dir = os.path.join(site_packages, "tensorflow")
  return sorted(set(runpath_packages(tf_dir))
                | set(and_cuda_packages(tensorflow_metadata(site_packages))))


def required_library_dirs(site_packages: str) -> List[str]:
  return [os.path.join(site_packages, "nvidia", p, "lib") for p in required_packages(site_packages)]


def path_gaps(dirs: Sequence[str], ld_library_path: str) -> List[str]:
  """The directories of ``dirs`` that exist and are not on ``ld_library_path``."""
  on_path = {os.path.normpath(d) for d in ld_library_path.split(":") if d}
  return [d for d in dirs if os.path.isdir(d) and os.path.normpath(d) not in on_path]


_LOAD = "import ctypes, sys\ntry:\n  ctypes.CDLL(sys.argv[1])\nexcept OSError as e:\n  print(e)\n  sys.exit(1)"


def load_each(paths: Sequence[str], environ: Optional[Mapping[str, str]] = None
              ) -> Dict[str, str]:
  """Loads each library in a fresh process of its own (so no library is found only
  because another one loaded it first); returns {path: dlerror} of those that fail."""
  env = dict(os.environ if environ is None else environ)
  failed = {}
  for path in paths:
    proc = subprocess.run([sys.executable, "-c", _LOAD, path], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    if proc.returncode != 0:
      failed[path] = (proc.stdout + proc.stderr).strip()
  return failed


def check_cuda(site_packages: str, build_info: Mapping,
               environ: Optional[Mapping[str, str]] = None) -> List[str]:
  """Problems with the image's CUDA (empty when none)."""
  environ = os.environ if environ is None else environ
  problems = []
  if not build_info.get("is_cuda_build"):
    problems.append(f"TensorFlow is not a CUDA build. Received: {dict(build_info)}")
  dirs = required_library_dirs(site_packages)
  if not dirs:
    return problems + [f"no nvidia/*/lib directory named by the tensorflow wheel under "
                       f"{site_packages} (RUNPATH or the and-cuda extra)"]
  # A wheel not installed at all; an installed one without lib/ (cuda_nvcc ships
  # binaries) needs nothing on the path.
  missing = [d for d in dirs if not os.path.isdir(os.path.dirname(d))]
  problems += [f"{os.path.dirname(d)} not found (install tensorflow[and-cuda])"
               for d in missing]
  libraries = sorted(p for d in dirs for p in glob.glob(os.path.join(d, "lib*.so*")))
  for name in DSO_NAMES:
    if not any(os.path.basename(p).startswith(f"lib{name}.so.") for p in libraries):
      problems.append(f"lib{name}.so.* (TensorFlow dlopens it) not found in any of "
                      f"{[os.path.relpath(d, site_packages) for d in dirs]}")
  ld_path = environ.get("LD_LIBRARY_PATH", "")
  for d in path_gaps(dirs, ld_path):
    problems.append(f"{d} is not on LD_LIBRARY_PATH (the libraries there are found only "
                    f"through a RUNPATH, which their dependents do not inherit). "
                    f"Received: LD_LIBRARY_PATH={ld_path!r}")
  for path, error in load_each(libraries, environ).items():
    problems.append(f"{path} does not load: {error}")
  return problems


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--cuda", action="store_true", help="also check TensorFlow's CUDA")
  args = parser.parse_args(argv)
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # The image check is an entry point: before TensorFlow is imported.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tfx  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  import tf_keras  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  info = tf.sysconfig.get_build_info()
  print(f"image: TensorFlow {tf.__version__}, CUDA build {info.get('is_cuda_build')}, "
        f"cuda {info.get('cuda_version')}, cudnn {info.get('cudnn_version')}, "
        f"compute {info.get('cuda_compute_capabilities')}")
  if not args.cuda:
    return 0
  site = os.path.dirname(os.path.dirname(tf.__file__))
  problems = check_cuda(site, info)
  for p in problems:
    print(f"image check: {p}", file=sys.stderr)
  if not problems:
    print(f"image: CUDA libraries OK: every library of {required_packages(site)} loads "
          f"(libcuda.so.1 comes from the GPU node)")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
