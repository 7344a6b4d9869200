"""Starts training processes: one for local layouts, N workers for `multi_worker`.

With TF_CONFIG already set (a Kubeflow TFJob / Vertex worker pool), this task trains
as its own worker. Without it, `multi_worker` launches `config.workers` processes on
127.0.0.1, each with its own TF_CONFIG. If any process fails, the others are stopped
within a bounded time and the error names the worker and its exit code: a dead peer
never leaves the pipeline hanging.

Of the local workers only the chief (worker 0) writes to the console: every worker
trains the same steps and would print the same lines. The others' output (their
``[trainer]`` lines and TensorFlow's C++ logs) goes to the log, as absl INFO records
``worker N: ...``; when such a worker fails, its last lines are printed with the error.
"""
import collections
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional

from absl import logging

from tfx_parallel.components.distributed_trainer.run import checkpoint
from tfx_parallel.components.distributed_trainer.plan import devices as devices_lib
from tfx_parallel.components.distributed_trainer import failures
from tfx_parallel.components.distributed_trainer.run import prestart
from tfx_parallel.components.distributed_trainer.job import Job

# Seconds the surviving workers get to exit after a peer failed.
PEER_FAILURE_GRACE_SECONDS = 20
# Lines of a non-chief worker's output kept to show when it fails.
FAILED_WORKER_TAIL_LINES = 40


def _free_ports(n: int) -> List[int]:
  socks, ports = [], []
  for _ in range(n):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
    ports.append(s.getsockname()[1])
  for s in socks:
    s.close()
  return ports


def _command(job_path: str) -> List[str]:
  return [sys.executable, "-m", "tfx_parallel.components.distributed_trainer.run.train",
          "--job", job_path]


def _to_log(stream, name: str, tail: collections.deque):
  """Drains a worker's output into absl INFO records (the log), keeping its tail."""
  for line in stream:
    line = line.rstrip("\n")
    tail.append(line)
    logging.info("%s: %s", name, line)


def _start_logged(command: List[str], env, name: str):
  """A worker process whose stdout and stderr go to the log; (process, reader, tail)."""
  proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
  tail = collections.deque(maxlen=FAILED_WORKER_TAIL_LINES)
  reader = threading.Thread(target=_to_log, args=(proc.stdout, name, tail), daemon=True)
  reader.start()
  return proc, reader, tail


def _wait_all(procs: List[subprocess.Popen], names: List[str], logged=None):
  """Waits for every process; on the first failure stops the rest and raises.
  ``logged``: name -> (reader thread, tail) of the workers whose output goes to the
  log; a failed one's tail is printed to stderr before the error is raised."""
  while True:
    codes = [p.poll() for p in procs]
    failed = [(n, c) for n, c in zip(names, codes) if c not in (None, 0)]
    if failed:
      for name, code in failed:
        if logged and name in logged:
          reader, tail = logged[name]
          reader.join(timeout=5)
          print(f"[trainer] {name} exited with code {code}; its last lines:\n"
                + "\n".join(f"  {line}" for line in tail), file=sys.stderr, flush=True)
      deadline = time.time() + PEER_FAILURE_GRACE_SECONDS
      for p in procs:
        if p.poll() is None:
          p.terminate()
      for p in procs:
        try:
          p.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
          p.kill()
          p.wait()
      raise failures.process_failed(*failed[0])
    if all(c == 0 for c in codes):
      return
    time.sleep(0.2)


def worker_environments(workers: int, device: str, environ, gpu_count: int,
                        batch_size: Optional[int] = None, logical_gpus: int = 0):
  """Each local worker's extra environment: its own GPUs (CUDA_VISIBLE_DEVICES, see
  devices.worker_gpus, fitted so workers x GPUs divides ``batch_size``), none on
  ``device: cpu``; and the reason line ("" if none). Raises ConfigError (naming the
  numbers) when no GPU count per worker divides the batch: before any worker starts."""
  if device == "cpu" or gpu_count == 0:
    return [{} for _ in range(workers)], ""
  ids = devices_lib.parse_visible(environ.get(devices_lib.WORKER_GPUS_ENV), gpu_count)
  if logical_gpus > 1 and batch_size is not None:  # Each worker: its first GPU as N.
    devices_lib.check_multi_worker_batch(workers, logical_gpus, batch_size,
                                         f"multi_worker with logical_gpus {logical_gpus}")
    batch_size = None
  visible, reason = devices_lib.worker_gpus(workers, ids, batch_size)
  return [{devices_lib.WORKER_GPUS_ENV: v} if v is not None else {} for v in visible], reason


def launch(job: Job, layout: str, workers: int, device: Optional[str] = None,
           gpu_count: Optional[int] = None) -> None:
  """Runs the training job in child process(es); raises RuntimeError on failure.

  Holds the job's checkpoint directory exclusively while training runs. ``device``:
  config ``device`` (default: the job's); ``gpu_count``: the GPUs present (default:
  TensorFlow's list), shared out among local workers.
  """
  device = device or job.config.get("device", "auto")
  with checkpoint.Lock(job.checkpoint_dir), \
      tempfile.TemporaryDirectory(prefix="tfx_parallel_train_") as tmp:
    job_path = os.path.join(tmp, "job.json")
    with open(job_path, "w") as f:
      json.dump(dataclasses.asdict(job), f)
    if layout != "multi_worker" or os.environ.get("TF_CONFIG"):
      env = dict(os.environ)  # The process started early if it matches (prestart.py).
      proc = prestart.take(_command(job_path), env)
      if proc is None:
        logging.info("Starting training process: %s", " ".join(_command(job_path)))
        proc = subprocess.Popen(_command(job_path), env=env)
      try:
        _wait_all([proc], ["trainer"])
      finally:
        if proc.poll() is None:
          proc.kill()
      return
    if gpu_count is None:
      gpu_count = len(devices_lib.visible_gpus()) if device != "cpu" else 0
    extra, reason = worker_environments(workers, device, os.environ, gpu_count,
                                        job.config.get("batch_size"),
                                        int(job.config.get("logical_gpus") or 0))
    if reason:
      logging.info("%s", reason)
      print(f"[trainer] devices: {reason}", flush=True)
    ports = _free_ports(workers)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs, names, logged = [], [], {}
    try:
      for i in range(workers):
        env = dict(os.environ, **extra[i],
                   TF_CONFIG=json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": i}}))
        names.append(f"worker {i}")
        if i == 0:  # The chief (strategies.is_chief: worker 0 without a "chief" task).
          procs.append(subprocess.Popen(_command(job_path), env=env))
        else:
          proc, reader, tail = _start_logged(_command(job_path), env, names[-1])
          procs.append(proc)
          logged[names[-1]] = (reader, tail)
      logging.info("Started %d multi-worker training processes on %s", workers, cluster)
      _wait_all(procs, names, logged)
    finally:
      for p in procs:
        if p.poll() is None:
          p.kill()
