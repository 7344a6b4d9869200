"""Build-time check of the image (kubeflow/Dockerfile): TensorFlow is a CUDA build and
finds the CUDA libraries it links against.

  python -m tfx_parallel.kubeflow.image_check [--cuda]

At build time there is no GPU and no driver (GKE mounts ``libcuda.so.1`` from the node
at /usr/local/nvidia/lib64), so this checks what the image itself must bring: the
TensorFlow build and the NVIDIA wheels of ``tensorflow[and-cuda]``, loaded from where
TensorFlow's RUNPATH looks (``site-packages/nvidia/<package>/lib``). A GPU pod checks
the driver at start (trainer ``require_gpu``).
"""
import argparse
import ctypes
import glob
import os
import sys
from typing import Dict, List

# Libraries TensorFlow 2.16's GPU kernels load, by NVIDIA wheel directory.
CUDA_LIBRARIES = {
  "cuda_runtime": "libcudart.so.12",
  "cublas": "libcublas.so.12",
  "cudnn": "libcudnn.so.8",
  "cufft": "libcufft.so.11",
  "cusparse": "libcusparse.so.12",
  "nccl": "libnccl.so.2",
}


# Loaded at build time (they need nothing but libc); the others are only found, since
# they load their NVIDIA dependencies through TensorFlow's RUNPATH.
LOADED = ("libcudart.so.12", "libcudnn.so.8", "libnccl.so.2")


def find_cuda_libraries(site_packages: str) -> Dict[str, List[str]]:
  """Library name -> paths found under ``site_packages/nvidia/<package>/lib``."""
  return {name: sorted(glob.glob(os.path.join(site_packages, "nvidia", package, "lib", name)))
          for package, name in CUDA_LIBRARIES.items()}


def check_cuda(site_packages: str, build_info: Dict) -> List[str]:
  """Problems with the image's CUDA (empty when none); loads the LOADED libraries."""
  problems = []
  if not build_info.get("is_cuda_build"):
    problems.append(f"TensorFlow is not a CUDA build. Received: {dict(build_info)}")
  for name, paths in find_cuda_libraries(site_packages).items():
    if not paths:
      problems.append(f"{name} not found under {site_packages}/nvidia/*/lib "
                      f"(install tensorflow[and-cuda])")
      continue
    if name not in LOADED:
      continue
    try:
      ctypes.CDLL(paths[0])
    except OSError as e:
      problems.append(f"{paths[0]} does not load: {e}")
  return problems


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument("--cuda", action="store_true", help="also check TensorFlow's CUDA")
  args = parser.parse_args(argv)
  import tfx_parallel.pipeline.tfenv  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
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
    print("image: CUDA libraries OK (libcuda.so.1 comes from the GPU node)")
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
