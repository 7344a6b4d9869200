"""kubeflow/image_check.py (the Dockerfile's build-time check) and the image's GPU env."""
import os

from tfx_parallel.kubeflow import image_check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_missing_cuda_wheels_are_named(tmp_path):
  problems = image_check.check_cuda(str(tmp_path), {"is_cuda_build": True})
  assert len(problems) == len(image_check.CUDA_LIBRARIES)
  assert problems[0] == (f"libcudart.so.12 not found under {tmp_path}/nvidia/*/lib "
                         f"(install tensorflow[and-cuda])")


def test_a_cpu_build_is_rejected_and_a_broken_library_is_reported(tmp_path):
  lib = tmp_path / "nvidia" / "cuda_runtime" / "lib"
  lib.mkdir(parents=True)
  (lib / "libcudart.so.12").write_bytes(b"not an ELF file")
  problems = image_check.check_cuda(str(tmp_path), {"is_cuda_build": False})
  assert problems[0].startswith("TensorFlow is not a CUDA build. Received: ")
  assert any(p.startswith(f"{lib}/libcudart.so.12 does not load: ") for p in problems), problems
  assert not any("libcudart.so.12 not found" in p for p in problems)


def test_dockerfile_puts_the_node_driver_on_the_path_and_keeps_the_jit_cache():
  with open(os.path.join(REPO, "kubeflow", "Dockerfile")) as f:
    text = f.read()
  assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib64" in text
  assert "CUDA_CACHE_PATH=/var/cache/cuda" in text and "CUDA_CACHE_MAXSIZE=" in text
  assert "RUN python -m tfx_parallel.kubeflow.image_check ${TF_EXTRAS:+--cuda}" in text
