"""The GPU check: what a first run on a GPU machine must show, in under 10 minutes on
one GPU. Run it as-is with the project's venv:

    .venv/bin/python benchmarks/gpu_check.py [--output gpu_check.md]

Sections (each training run is a fresh process through the trainer's real entry point,
``python -m tfx_parallel.components.distributed_trainer.run.train --job job.json``):

1. **Environment:** ``nvidia-smi``, TensorFlow's build info, the CUDA load messages
   TensorFlow prints (hidden by TF_CPP_MIN_LOG_LEVEL elsewhere), and the time of the
   first GPU kernel in two fresh processes: cold (CUDA context; on Hopper the PTX JIT
   fills ``CUDA_CACHE_PATH``) and warm (the second process reuses that cache).
2. **Layouts on the GPUs present** (``device: gpu``): single, mirrored over every GPU,
   the 2x2 mesh (shrunk to fit; the plan's reason is printed).
3. **Several GPUs emulated on one:** the first GPU split into 4 logical GPUs
   (``logical_gpus: 4``): mirrored x2, meshes 2x1, 1x2 and 2x2, each compared with
   ``single`` (max |weight difference|), with TF32 on and off.
4. **Local multi_worker, 2 workers** (each worker gets its own GPUs; with one GPU the
   workers run on the CPU and the reason is printed).

Every row gives examples/s and memory per device (the trainer's measured training
state per device, and TensorFlow's peak allocation per GPU).

``--device cpu`` runs the same sections with logical CPU devices standing in for GPUs
(tests/test_benchmarks_gpu_check.py runs it with ``--small``): no GPU needed. So does
the default ``--device auto`` on a machine where ``nvidia-smi`` lists no GPU; the report
then says in its first lines that no GPU was used, and why.

It fails (exit 2, before any training) when ``nvidia-smi`` lists GPUs and TensorFlow sees
none: the very failure it exists to catch. The message names CUDA's own load error
(gpu_env.probe: "Could not load dynamic library ...; dlerror: ...").
"""
import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchutil as bu  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

# Exact float32 agrees to ~1e-6 over a few hundred steps here; TF32 (10-bit mantissa
# products) does not, which is why the parity tests turn it off.
PARITY_TOLERANCE = 1e-4
SIZES = {  # rows, steps, global batch
    "full": dict(train_rows=65536, eval_rows=4096, steps=300, batch=512),
    "small": dict(train_rows=1024, eval_rows=128, steps=6, batch=32),
}
EMULATED = [("mirrored x2", {"layout": "mirrored", "devices": 2}),
            ("mesh 2x1", {"layout": "mesh", "mesh": [2, 1]}),
            ("mesh 1x2", {"layout": "mesh", "mesh": [1, 2]}),
            ("mesh 2x2", {"layout": "mesh", "mesh": [2, 2]})]
SMALL_EMULATED = ("mirrored x2", "mesh 1x2")

_FIRST_KERNEL = """
import json, time
t0 = time.perf_counter()
from tfx_parallel.components.common import tfenv
tfenv.prepare()  # An entry point: before TensorFlow is imported.
import tensorflow as tf
t_import = time.perf_counter() - t0
kind = {kind!r}
if kind == "CPU":
  tf.config.set_visible_devices([], "GPU")
else:
  for g in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(g, True)
with tf.device(kind + ":0"):
  x = tf.random.normal([1024, 1024])
  t1 = time.perf_counter(); first = float(tf.reduce_sum(tf.matmul(x, x))); t_first = time.perf_counter() - t1
  t2 = time.perf_counter(); second = float(tf.reduce_sum(tf.matmul(x, x))); t_second = time.perf_counter() - t2
info = dict(tf.sysconfig.get_build_info(), version=tf.__version__)
print(json.dumps({{"import_s": t_import, "first_kernel_s": t_first, "next_kernel_s": t_second,
                  "build_info": info}}))
"""


def _sh(args: List[str]) -> str:
  try:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
  except (OSError, subprocess.TimeoutExpired) as e:
    return f"({args[0]}: {e})"
  return (proc.stdout + proc.stderr).strip() or f"({args[0]} printed nothing)"


def _first_kernel(kind: str, log_level: str) -> Dict:
  """A fresh process: its first-kernel times, build info and (stderr) CUDA lines."""
  from tfx_parallel.components.distributed_trainer.plan import gpu_env  # pylint: disable=g-import-not-at-top
  proc = subprocess.run([sys.executable, "-c", _FIRST_KERNEL.format(kind=kind)],
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL=log_level), cwd=bu.REPO,
                        capture_output=True, text=True, timeout=600, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"first-kernel probe on {kind} failed (exit {proc.returncode}):\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
  return dict(bu.last_json_line(proc.stdout), cuda_messages=gpu_env.cuda_lines(proc.stderr))


def environment(kind: str, warm_probe: bool = True) -> Dict:
  """nvidia-smi, TF build info, CUDA messages, cold / warm first-kernel times (the warm
  process is skipped with ``warm_probe=False``: --small)."""
  cold = _first_kernel(kind, "0")   # Every C++ log line: CUDA's own load messages.
  warm = _first_kernel(kind, "2") if warm_probe else dict(cold, skipped=True)
  return {"nvidia_smi": _sh(["nvidia-smi"]), "build_info": cold.pop("build_info"),
          "cuda_messages": cold.pop("cuda_messages"),
          "cuda_cache": {k: os.environ.get(k, "(unset)")
                         for k in ("CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE")},
          "first_kernel": {"cold": cold, "warm": {k: v for k, v in warm.items()
                                                   if k not in ("build_info", "cuda_messages")}}}


class Runner:
  """Runs trainer jobs on one data set; returns their history.json."""

  def __init__(self, work: str, sizes: Dict, device: str):
    self.work, self.sizes, self.device = work, sizes, device
    self.data = bu.write_tfrecords(os.path.join(work, "data"),
                                   {"train": sizes["train_rows"], "eval": sizes["eval_rows"]},
                                   shards=4)

  def job(self, name: str, overrides: Dict) -> Dict:
    tmp = os.path.join(self.work, "runs", name.replace(" ", "_"))
    config = dict(dict(layout="single", device=self.device, batch_size=self.sizes["batch"],
                       steps=self.sizes["steps"], learning_rate=0.05, optimizer="adam",
                       log_every=max(1, self.sizes["steps"] // 10), checkpoint_every=0,
                       model="linear", seed=0), **overrides)
    return dict(config=config, examples_uri=self.data, feature_keys=bu.feature_keys(),
                label_key="y", train_rows=self.sizes["train_rows"],
                model_dir=os.path.join(tmp, "model", "Format-Serving"),
                model_run_dir=os.path.join(tmp, "model_run"),
                history_dir=os.path.join(tmp, "history"),
                checkpoint_dir=os.path.join(tmp, "ckpt", f"{os.getpid()}-{time.time_ns()}"),
                num_shards=4)

  def train(self, name: str, overrides: Dict) -> Dict:
    job = self.job(name, overrides)
    os.makedirs(job["history_dir"], exist_ok=True)
    path = os.path.join(os.path.dirname(job["history_dir"]), "job.json")
    with open(path, "w") as f:
      json.dump(job, f)
    res = bu.run_python(["-m", "tfx_parallel.components.distributed_trainer.run.train",
                         "--job", path], timeout=900)
    return dict(_history(job), process_s=res["seconds"],
                plan_lines=[l for l in res["stdout"].splitlines() if "[trainer] devices:" in l])

  def multi_worker(self, name: str, workers: int) -> Dict:
    from tfx_parallel.components.distributed_trainer.run import launcher  # pylint: disable=g-import-not-at-top
    from tfx_parallel.components.distributed_trainer.run.train import Job  # pylint: disable=g-import-not-at-top
    # device auto: with fewer GPUs than workers the workers fall back to the CPU (printed).
    job = self.job(name, {"layout": "multi_worker", "workers": workers,
                          "device": "cpu" if self.device == "cpu" else "auto"})
    start = time.perf_counter()
    launcher.launch(Job(**job), "multi_worker", workers, job["config"]["device"])
    return dict(_history(job), process_s=time.perf_counter() - start, plan_lines=[])


def _history(job: Dict) -> Dict:
  with open(os.path.join(job["history_dir"], "history.json")) as f:
    return json.load(f)


def weight_gap(a: Dict, b: Dict) -> float:
  """max |a - b| over the linear model's kernel and bias."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return max(float(np.max(np.abs(np.asarray(a["weights"][k]) - np.asarray(b["weights"][k]))))
             for k in ("kernel", "bias"))


def summarize(case: str, h: Dict, reference: Optional[Dict] = None) -> Dict:
  """One row: layout actually run, devices, collective, ex/s, memory per device, parity."""
  row = {"case": case, "ran": f"{h['layout']} {h['mesh_shape'][0]}x{h['mesh_shape'][1]} "
                              f"replicas {h['replicas']}",
         "device_type": h.get("device_type"), "devices": len(h["devices"]),
         "collective": h.get("collective"), "tf32": h.get("tf32"),
         "examples_per_sec": h["examples_per_sec"],
         "state_bytes_per_device": h.get("state_bytes_per_device"),
         "gpu_memory_peak_bytes": h.get("gpu_memory_peak_bytes", {}),
         "final_loss": h["records"][-1]["loss"] if h["records"] else None,
         "plan": h.get("device_plan_reason", "")}
  if reference is not None:
    row["max_weight_gap_vs_single"] = weight_gap(h, reference)
  return row


class GpusUnused(RuntimeError):
  """nvidia-smi lists GPUs and TensorFlow sees none."""


def gpus_present(device: str):
  """(GPUs TensorFlow sees, why no GPU is used: "" when one is). Counted in a fresh
  process (gpu_env.probe), so this one never initialises CUDA.

  Raises:
    GpusUnused: nvidia-smi lists GPUs and TensorFlow sees none (names the load error).
  """
  from tfx_parallel.components.distributed_trainer.plan import devices, gpu_env  # pylint: disable=g-import-not-at-top
  if device == "cpu":
    return 0, "--device cpu: logical CPU devices stand in for GPUs"
  smi = gpu_env.nvidia_smi_gpus()
  count, messages = gpu_env.probe()
  if smi and not count:
    raise GpusUnused(gpu_env.unused_gpus_message(smi, messages))
  if count:
    return count, ""
  return 0, ("nvidia-smi " + ("is not installed" if smi is None else "lists no GPU")
             + " and TensorFlow sees no GPU: logical CPU devices stand in for GPUs")


def run(device: str = "auto", small: bool = False, work: Optional[str] = None,
        sections=("environment", "layouts", "emulated", "multi_worker")) -> Dict:
  """Runs the check; returns {section: result}. ``device: cpu`` = logical CPUs stand in.

  Raises:
    GpusUnused: nvidia-smi lists GPUs and TensorFlow sees none (before any training).
  """
  gpus, no_gpu = gpus_present(device)
  kind = "GPU" if gpus else "CPU"
  train_device = "gpu" if gpus else "cpu"
  sizes = SIZES["small" if small else "full"]
  runner = Runner(work or bu.work_dir("gpu_check", "small" if small else "full"), sizes,
                  train_device)
  out: Dict = {"device_type": kind, "gpus": gpus, "sizes": sizes, "no_gpu": no_gpu}
  if "environment" in sections:
    out["environment"] = environment(kind, warm_probe=not small)
  if "layouts" in sections:
    single = runner.train("single", {})
    out["layouts"] = [summarize("single", single)]
    cases = [("mirrored (every GPU)", {"layout": "mirrored", "devices": 0}),
             ("mesh 2x2 (fitted)", {"layout": "mesh", "mesh": [2, 2]})]
    for case, overrides in cases[:1] if small else cases:
      out["layouts"].append(summarize(case, runner.train(case, overrides), single))
  if "emulated" in sections:
    rows = []
    for tf32 in ((False,) if small else (True, False)):
      logical = {"logical_gpus": 4} if gpus else {}
      ref = runner.train(f"e single tf32 {tf32}", dict(logical, tf32=tf32))
      rows.append(summarize(f"single, tf32 {'on' if tf32 else 'off'}", ref))
      for case, overrides in EMULATED:
        if small and case not in SMALL_EMULATED:
          continue
        h = runner.train(f"e {case} tf32 {tf32}", dict(overrides, tf32=tf32, **logical))
        row = summarize(f"{case}, tf32 {'on' if tf32 else 'off'}", h, ref)
        row["parity"] = ("ok" if row["max_weight_gap_vs_single"] <= PARITY_TOLERANCE
                         else ("expected (TF32)" if tf32 and kind == "GPU" else "FAILED"))
        rows.append(row)
    out["emulated"] = rows
  if "multi_worker" in sections:
    out["multi_worker"] = [summarize("multi_worker x2", runner.multi_worker("mw2", 2))]
  return out


def _mib(n) -> str:
  if n is None:
    return "-"
  return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.2f} KiB"


def format_report(result: Dict) -> str:
  lines = [f"# GPU check ({result['device_type']}, {result['gpus']} GPU(s); "
           f"{result['sizes']['steps']} steps of batch {result['sizes']['batch']})", ""]
  if result.get("no_gpu"):
    lines += [f"**No GPU was used.** {result['no_gpu']}.", ""]
  env = result.get("environment")
  if env:
    info = env["build_info"]
    lines += ["## Environment", "", "```", env["nvidia_smi"], "```", "",
              f"TensorFlow {info.get('version')}: cuda {info.get('cuda_version')}, cudnn "
              f"{info.get('cudnn_version')}, compute {info.get('cuda_compute_capabilities')}",
              f"CUDA cache: {env['cuda_cache']}", "", "CUDA load messages:", ""]
    lines += [f"    {m}" for m in env["cuda_messages"]] or ["    (none)"]
    for name in ("cold", "warm"):
      k = env["first_kernel"][name]
      if k.get("skipped"):
        lines.append(f"- first kernel, {name} process: skipped (--small)")
        continue
      lines.append(f"- first kernel, {name} process: {k['first_kernel_s'] * 1e3:.1f} ms "
                   f"(next {k['next_kernel_s'] * 1e3:.2f} ms, import {k['import_s']:.1f} s)")
    lines.append("")
  header = ("| case | ran | devices | collective | ex/s | state per device | peak per GPU "
            "| max weight gap vs single | parity | plan |")
  for section in ("layouts", "emulated", "multi_worker"):
    if section not in result:
      continue
    lines += [f"## {section}", "", header, "|" + "---|" * 10]
    for r in result[section]:
      peaks = ", ".join(f"{d} {_mib(b)}" for d, b in r["gpu_memory_peak_bytes"].items()) or "-"
      gap = r.get("max_weight_gap_vs_single")
      lines.append(f"| {r['case']} | {r['ran']} | {r['devices']} {r['device_type']} | "
                   f"{r['collective']} | {r['examples_per_sec']:.0f} | "
                   f"{_mib(r['state_bytes_per_device'])} | {peaks} | "
                   f"{'-' if gap is None else f'{gap:.2e}'} | {r.get('parity', '-')} | "
                   f"{r['plan'] or '-'} |")
    lines.append("")
  return "\n".join(lines)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--device", default="auto", choices=["auto", "cpu"],
                      help="cpu: logical CPU devices stand in for GPUs")
  parser.add_argument("--small", action="store_true", help="tiny sizes and fewer cases")
  parser.add_argument("--sections", default="environment,layouts,emulated,multi_worker")
  parser.add_argument("--work", default=None, help="scratch directory")
  parser.add_argument("--output", default=None, help="also write the report (markdown) here")
  parser.add_argument("--json", default=None, help="also write the raw result (JSON) here")
  args = parser.parse_args(argv)
  start = time.perf_counter()
  try:
    result = run(args.device, args.small, args.work, tuple(args.sections.split(",")))
  except GpusUnused as e:
    print(f"gpu_check: FAILED: {e}", file=sys.stderr, flush=True)
    return 2
  report = format_report(result) + f"\n(check took {time.perf_counter() - start:.0f} s)\n"
  print(report)
  if args.output:
    with open(args.output, "w") as f:
      f.write(report)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  failed = [r["case"] for r in result.get("emulated", []) if r.get("parity") == "FAILED"]
  if failed:
    print(f"gpu_check: parity FAILED for {failed}", file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
