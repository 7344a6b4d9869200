"""What the machine says about its GPUs, for ``require_gpu`` and the GPU check.

TensorFlow reports a CUDA that fails to load (``libcuda.so.1`` not on the library path,
a driver too old for the wheel's CUDA) only as C++ log lines, which
``TF_CPP_MIN_LOG_LEVEL=2`` (this project's default, components/common/tfenv.py) hides; the level
is read once per process. Worse, TF 2.16.2 logs the library and its dlerror only at
verbose level 1: ``GetDsoHandle`` in tsl/platform/default/dso_loader.cc ends with
``VLOG(1) << message`` ("Could not load dynamic library '...'; dlerror: ...", logged as
dso_loader.cc:70 by the 2.16.2 wheel; with ``TF_CPP_MAX_VLOG_LEVEL=0`` only cudart_stub's
"Could not find cuda drivers on your machine" is left, which names no library).
:func:`probe` therefore asks a fresh Python process with the C++ log level at 0 and
the verbose level at 1, and keeps the lines about CUDA, so the error a ``require_gpu``
run fails with is CUDA's own, naming the library. It also counts the GPUs there, so
the asking process never initialises CUDA itself.

:func:`preflight` is the one check before a run: when ``nvidia-smi`` lists GPUs and
TensorFlow sees none, ``require_gpu`` / ``device: gpu`` fail at once and a default run
prints one warning with the same facts (and trains on the CPU).
"""
import os
import re
import subprocess
import sys
from typing import List, Optional, Tuple

# TensorFlow's C++ log lines about loading CUDA (dso_loader, cuda_diagnostics, the
# "Could not find cuda drivers" note of cuda_executor, cuInit failures).
_CUDA_LINE = re.compile(
    r"(dso_loader|cuda_diagnostics|cuda_driver|cuda_executor|Could not (load|find)|cuInit|"
    r"libcuda|libcudart|libcudnn|CUDA_ERROR|GPU will not be used|Cannot dlopen)", re.I)

# Lines _CUDA_LINE matches that are not about loading CUDA (the registration note is
# console noise on every machine, pipeline/console.py; TensorRT is optional).
_NOT_CUDA = re.compile(r"Unable to register cu(FFT|DNN|BLAS) factory|libnvinfer|TF-TRT")

_PROBE = ("import os, tensorflow as tf; "
          "print('GPUS=%d' % len(tf.config.list_physical_devices('GPU')), flush=True)")
# The verbose level at which dso_loader.cc logs "Could not load dynamic library" (VLOG(1)).
DSO_LOADER_VLOG_LEVEL = "1"
# Set (to "1") by preflight() once it has checked this run: its child processes (the
# trainer) then do not print the same warning again.
CHECKED_ENV = "TFXP_GPU_PREFLIGHT_DONE"


class NoGpuError(RuntimeError):
  """``require_gpu`` (or ``device: gpu``) and TensorFlow sees no GPU."""


def probe(timeout: float = 120) -> Tuple[Optional[int], List[str]]:
  """(GPUs TensorFlow lists, its C++ log lines about loading CUDA) from a fresh process
  with every C++ log level on and verbose level 1 (dso_loader's dlerror); the count is
  None when the process failed or timed out."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_MAX_VLOG_LEVEL=DSO_LOADER_VLOG_LEVEL)
  try:
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
  except subprocess.TimeoutExpired:
    return None, [f"(listing GPUs in a fresh process took more than {timeout:.0f} s)"]
  found = re.search(r"^GPUS=(\d+)$", proc.stdout, re.M)
  return (int(found.group(1)) if found else None), cuda_lines(proc.stderr)


def cuda_load_messages(timeout: float = 120) -> List[str]:
  """TensorFlow's C++ log lines about loading CUDA, from a fresh process that lists GPUs
  (empty when it says nothing about CUDA)."""
  return probe(timeout)[1]


def cuda_lines(stderr: str) -> List[str]:
  """The lines of a TensorFlow process's stderr that are about loading CUDA."""
  seen, out = set(), []
  for line in stderr.splitlines():
    text = line.strip().split("] ", 1)[-1]  # Without the timestamp and source prefix.
    if _CUDA_LINE.search(line) and text not in seen and not _NOT_CUDA.search(line):
      seen.add(text)
      out.append(line.strip())
  # The load errors first: they name the library (dso_loader's dlerror).
  return sorted(out, key=lambda l: 0 if "Could not load dynamic library" in l else 1)


def load_errors(messages: List[str]) -> List[str]:
  """The "Could not load dynamic library ...; dlerror: ..." parts of ``messages``."""
  return [m.split("] ", 1)[-1] for m in messages if "Could not load dynamic library" in m]


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


def unused_gpus_message(smi: List[str], messages: List[str], environ=None) -> str:
  """nvidia-smi lists GPUs and TensorFlow sees none: the facts, CUDA's load error first."""
  environ = os.environ if environ is None else environ
  errors = load_errors(messages)
  lines = [f"nvidia-smi lists {len(smi)} GPU(s) but TensorFlow sees none, so training "
           f"would run on the CPU. " + (f"CUDA's load error: {errors[0]}" if errors else
                                        "TensorFlow printed no library load error."),
           "nvidia-smi -L: " + "; ".join(smi),
           f"CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', '(unset)')} "
           f"LD_LIBRARY_PATH={environ.get('LD_LIBRARY_PATH', '(unset)')}"]
  lines += ["  " + m for m in messages[:12]]
  return "\n".join(lines)


def preflight(config, out=None, environ=None, remote: bool = False) -> bool:
  """The GPU check before a run, in a fresh process (this one never initialises CUDA).
  When nvidia-smi lists GPUs (or a GPU is required) and TensorFlow sees none:
  ``require_gpu`` / ``device: gpu`` print the error and return False (stop the run);
  ``device: auto`` prints one warning (``out``, default stderr) and returns True.
  Nothing is probed for ``device: cpu``, a remote (TFJob) trainer, the stand-in test
  hook, or a default run on a machine without nvidia-smi GPUs. ``config``: the
  TrainerConfig (``device``, ``require_gpu``, ``layout``); ``remote``: training runs on
  Kubernetes replicas (the caller asks ``kube.settings.opted_in``), which check their own."""
  from tfx_parallel.components.distributed_trainer.plan import devices  # pylint: disable=g-import-not-at-top
  environ = os.environ if environ is None else environ
  out = sys.stderr if out is None else out
  device = config.device
  required = bool(config.require_gpu) or device == "gpu"
  if device == "cpu" or remote or devices.standin_gpus(environ) is not None:
    return True
  smi = nvidia_smi_gpus()
  if not required and not smi:
    return True
  count, messages = probe()
  environ[CHECKED_ENV] = "1"
  if count:
    return True
  if required:
    print(f"tfx-parallel: {no_gpu_message('run', messages, smi, environ)}", file=out,
          flush=True)
    return False
  print(f"tfx-parallel: warning: {unused_gpus_message(smi, messages, environ)}", file=out,
        flush=True)
  return True


def no_gpu_message(where: str, messages: Optional[List[str]] = None,
                   smi: Optional[List[str]] = None, environ=None) -> str:
  """Why ``where`` has no GPU: nvidia-smi's view, the library path and CUDA's own
  load errors (``messages``/``smi`` default to asking the machine)."""
  environ = os.environ if environ is None else environ
  messages = cuda_load_messages() if messages is None else messages
  smi = nvidia_smi_gpus() if smi is None else smi
  errors = load_errors(messages)
  lines = [f"require_gpu: the {where} sees no GPU; TensorFlow would train on the CPU. "
           + (f"CUDA's load error: {errors[0]}. " if errors else "")
           + "Received: require_gpu=True"]
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
