"""kubeflow/image_check.py (the Dockerfile's build-time check) and the image's GPU env.

The library list is the installed tensorflow wheel's own: the RUNPATH of its libraries
(checked against ``readelf -d``) plus the NVIDIA wheels of its ``and-cuda`` extra.
"""
import os
import re
import shutil
import subprocess
import sysconfig

import pytest

from tfx_parallel.kubeflow import image_check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = sysconfig.get_paths()["purelib"]  # This venv's site-packages: the installed wheel.
TF_DIR = os.path.join(SITE, "tensorflow")


def _dockerfile() -> str:
  with open(os.path.join(REPO, "kubeflow", "Dockerfile")) as f:
    return f.read()


def _readelf(path):
  out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                       check=True).stdout
  needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
  runpath = [d for m in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*?)\]",
                                   out) for d in m.split(":")]
  return {"NEEDED": needed, "RUNPATH": runpath}


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not installed")
@pytest.mark.parametrize("name", image_check.TF_LIBRARIES)
def test_elf_reader_agrees_with_readelf_on_the_installed_wheel(name):
  path = os.path.join(TF_DIR, name)
  assert image_check.elf_dynamic(path) == _readelf(path)


def test_the_wheels_runpath_covers_some_nvidia_dirs_and_never_nvjitlink():
  """The facts of issue #29 item 1, read from this venv's TF 2.16.2 wheel."""
  framework = image_check.elf_dynamic(os.path.join(TF_DIR, "libtensorflow_framework.so.2"))
  assert {m.group(1) for m in map(image_check._NVIDIA_DIR.match, framework["RUNPATH"]) if m} \
      == {"cublas", "cudnn", "cufft", "cusolver", "cusparse", "cuda_runtime"}
  packages = image_check.runpath_packages(TF_DIR)
  assert "nccl" in packages and "nvjitlink" not in packages
  assert "nvjitlink" in image_check.and_cuda_packages(image_check.tensorflow_metadata(SITE))


def test_dockerfile_ld_library_path_covers_every_library_dir_of_the_wheel():
  text = _dockerfile()
  python = re.search(r"^FROM python:(\d+\.\d+)", text, re.M).group(1)
  site = f"/usr/local/lib/python{python}/site-packages"
  path = re.search(r"LD_LIBRARY_PATH=(\S+)", text).group(1)
  covered = sorted(re.findall(re.escape(site) + r"/nvidia/([A-Za-z0-9_]+)/lib(?::|$)", path))
  required = image_check.required_packages(SITE)
  assert covered == required
  assert "nvjitlink" in covered
  assert path.endswith(":/usr/local/nvidia/lib64:/usr/local/nvidia/lib")


def _fake_wheel(tmp_path, packages):
  """A site-packages with the real TF METADATA and empty nvidia/<p>/lib dirs; returns it
  and a real system library (zlib) to copy in under CUDA's names."""
  site = tmp_path / "site"
  info = site / "tensorflow-2.16.2.dist-info"
  info.mkdir(parents=True)
  (info / "METADATA").write_text(image_check.tensorflow_metadata(SITE))
  libz = next(p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1")
              if os.path.exists(p))
  for p in packages:
    lib = site / "nvidia" / p / "lib"
    lib.mkdir(parents=True)
  return site, libz


def test_a_directory_missing_from_ld_library_path_is_named(tmp_path):
  site, lib = _fake_wheel(tmp_path, image_check.and_cuda_packages(
      image_check.tensorflow_metadata(SITE)))
  for name in image_check.DSO_NAMES:
    shutil.copy(lib, site / "nvidia" / "cublas" / "lib" / f"lib{name}.so.12")
  dirs = image_check.required_library_dirs(str(site))
  full = ":".join(dirs)
  assert image_check.check_cuda(str(site), {"is_cuda_build": True},
                                {"LD_LIBRARY_PATH": full}) == []
  without = ":".join(d for d in dirs if "/nvjitlink/" not in d)
  problems = image_check.check_cuda(str(site), {"is_cuda_build": True},
                                    {"LD_LIBRARY_PATH": without})
  assert len(problems) == 1 and problems[0].startswith(
      f"{site}/nvidia/nvjitlink/lib is not on LD_LIBRARY_PATH"), problems


def test_missing_wheels_a_cpu_build_and_a_broken_library_are_reported(tmp_path):
  site, _ = _fake_wheel(tmp_path, ["cuda_runtime"])
  (site / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12").write_bytes(b"not an ELF file")
  problems = image_check.check_cuda(str(site), {"is_cuda_build": False},
                                    {"LD_LIBRARY_PATH": str(site / "nvidia" / "cuda_runtime" / "lib")})
  assert problems[0].startswith("TensorFlow is not a CUDA build. Received: ")
  assert f"{site}/nvidia/nvjitlink not found (install tensorflow[and-cuda])" in problems
  assert any(p.startswith("libcudnn.so.* (TensorFlow dlopens it) not found") for p in problems)
  assert any(p.startswith(f"{site}/nvidia/cuda_runtime/lib/libcudart.so.12 does not load: ")
             and "file too short" in p for p in problems), problems


def test_each_library_loads_in_a_fresh_process_so_a_dependency_is_not_preloaded(tmp_path):
  """A library whose NEEDED entry is found only on LD_LIBRARY_PATH fails alone, as
  cusparse does without nvjitlink; the check loads it in a process of its own."""
  libz = next(p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1")
              if os.path.exists(p))
  assert image_check.load_each([libz], {"PATH": os.environ["PATH"]}) == {}
  failed = image_check.load_each([str(tmp_path / "libnothere.so.12")], {"PATH": os.environ["PATH"]})
  assert "libnothere.so.12" in failed[str(tmp_path / "libnothere.so.12")]


def test_dockerfile_keeps_the_jit_cache_and_runs_the_check():
  text = _dockerfile()
  assert "CUDA_CACHE_PATH=/var/cache/cuda" in text and "CUDA_CACHE_MAXSIZE=" in text
  assert "RUN python -m tfx_parallel.kubeflow.image_check ${TF_EXTRAS:+--cuda}" in text
