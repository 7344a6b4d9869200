"""What the machine says about its GPUs, for ``require_gpu`` and the GPU check.

TensorFlow reports a CUDA that fails to load (``libcuda.so.1`` not on the library path,
a driver too old for the wheel's CUDA) only as C++ log lines, which
``TF_CPP_MIN_LOG_LEVEL=2`` (this project's default, pipeline/tfenv.py) hides; the level
is read once per process. :func:`cuda_load_messages` therefore asks a fresh Python
process with the C++ log level at 0 and keeps the lines about CUDA, so the error a
``require_gpu`` run fails with is CUDA's own.
"""
import os
import re
import subprocess
import sys
from typing import List, Optional

# TensorFlow's C++ log lines about loading CUDA (dso_loader, cuda_diagnostics, the
# "Could not find cuda drivers" note of cuda_executor, cuInit failures).
_CUDA_LINE = re.compile(
    r"(dso_loader|cuda_diagnostics|cuda_driver|cuda_executor|Could not (load|find)|cuInit|"
    r"libcuda|libcudart|libcudnn|CUDA_ERROR|GPU will not be used|Cannot dlopen)", re.I)

_PROBE = ("import os, tensorflow as tf; "
          "print('GPUS=%d' % len(tf.config.list_physical_devices('GPU')), flush=True)")


class NoGpuError(RuntimeError):
  """``require_gpu`` (or ``device: gpu``) and TensorFlow sees no GPU."""


def cuda_load_messages(timeout: float = 120) -> List[str]:
  """TensorFlow's C++ log lines about loading CUDA, from a fresh process that lists GPUs
  with every C++ log level on (empty when it says nothing about CUDA)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_MAX_VLOG_LEVEL="0")
  try:
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
  except subprocess.TimeoutExpired:
    return [f"(listing GPUs in a fresh process took more than {timeout:.0f} s)"]
  return cuda_lines(proc.stderr)


def cuda_lines(stderr: str) -> List[str]:
  """The lines of a TensorFlow process's stderr that are about loading CUDA."""
  seen, out = set(), []
  for line in stderr.splitlines():
    text = line.strip().split("] ", 1)[-1]  # Without the timestamp and source prefix.
    if _CUDA_LINE.search(line) and text not in seen:
      seen.add(text)
      out.append(line.strip())
  return out


def nvidia_smi_gpus() -> Optional[List[str]]:
  """``nvidia-smi -L``'s GPU lines; None when nvidia-smi is not installed or fails."""
  try:
    proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60,
                          check=False)
  except (OSError, subprocess.TimeoutExpired):
    return None
  if proc.returncode != 0:
    return None
  return [line for line in proc.stdout.splitlines() if line.startswith("GPU ")]


def no_gpu_message(where: str, messages: Optional[List[str]] = None,
                   smi: Optional[List[str]] = None, environ=None) -> str:
  """Why ``where`` has no GPU: nvidia-smi's view, the library path and CUDA's own
  load errors (``messages``/``smi`` default to asking the machine)."""
  environ = os.environ if environ is None else environ
  messages = cuda_load_messages() if messages is None else messages
  smi = nvidia_smi_gpus() if smi is None else smi
  lines = [f"require_gpu: the {where} sees no GPU; TensorFlow would train on the CPU. "
           f"Received: require_gpu=True"]
  lines.append("nvidia-smi -L: " + ("not available" if smi is None else
                                    (f"{len(smi)} GPU(s): " + "; ".join(smi)) if smi
                                    else "no GPU"))
  lines.append(f"CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', '(unset)')} "
               f"LD_LIBRARY_PATH={environ.get('LD_LIBRARY_PATH', '(unset)')}")
  if messages:
    lines.append("TensorFlow's CUDA messages (hidden by TF_CPP_MIN_LOG_LEVEL):")
    lines.extend("  " + m for m in messages[:20])
  else:
    lines.append("TensorFlow printed no CUDA message (a CPU-only TensorFlow build, or no "
                 "NVIDIA driver in this container)")
  return "\n".join(lines)
