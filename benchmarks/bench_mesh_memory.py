"""Peak memory of a whole training run on a mesh against one device (issue #39 item 1).

The model state dominates: the built-in mlp 16 -> 6144 -> 6144 -> 1 (37.9M parameters,
152 MB), Adam (two slots per parameter), 30 steps on synthetic data. Each run is the real
training process (``python -m tfx_parallel.components.distributed_trainer.run.train
--job job.json``, as the Trainer's launcher starts it) and so crosses every boundary:
build, the untrained model's eval, train, a checkpoint at step 15, per-epoch eval, export.

Layouts ``single`` and ``mesh`` 1x4 (4 logical CPU devices; the default rules make the
two hidden layers a Megatron pair, column- then row-split) run side by side, alternating,
``--rounds`` times. The figure is the child process's peak RSS (``os.wait4`` rusage,
``ru_maxrss``: benchutil.run_python) and the ratio mesh / single per round. On logical
CPU devices every shard lives in the one host memory, so a mesh that never holds a whole
copy of a split variable on a device peaks near one copy of the state, as single does.

``--phases`` instead runs each layout twice with the test hook tests/hooks_site/rss.py
(the peak RSS of each phase: build, eval, train, checkpoint, restore, export; the second
run of the same job resumes from the first one's checkpoint, so it restores) and writes
the phase trace, each phase's peak over the RSS before the build.

Usage:
  .venv/bin/python benchmarks/bench_mesh_memory.py                  # 2 rounds, full size
  .venv/bin/python benchmarks/bench_mesh_memory.py --hidden 512 --rounds 1   # smoke
  .venv/bin/python benchmarks/bench_mesh_memory.py --phases         # the phase trace
  .venv/bin/python benchmarks/bench_mesh_memory.py --rounds 1 --steps-per-execution 1
Writes benchmarks/mesh_memory.json and (full size, default steps per execution)
benchmarks/results/mesh_memory.md
(``--phases``: benchmarks/results/mesh_memory_phases.md).
"""
import argparse
import json
import os
import statistics
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import benchutil as bu  # pylint: disable=g-import-not-at-top,wrong-import-position

SECTION = os.path.join(HERE, "results", "mesh_memory.md")
PHASES_SECTION = os.path.join(HERE, "results", "mesh_memory_phases.md")
HOOKS_SITE = os.path.join(os.path.dirname(HERE), "tests", "hooks_site")
PHASES = ("build", "eval", "train", "checkpoint", "restore", "export")
FEATURES = 16
TRAIN_ROWS, EVAL_ROWS, BATCH, STEPS = 2048, 512, 64, 30


def write_data(root: str) -> List[str]:
  """TFRecords of y = x . w + noise over FEATURES float features (written once)."""
  keys = [f"x{j}" for j in range(FEATURES)]
  stamp = os.path.join(root, "_stamp")
  if os.path.exists(stamp):
    return keys
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  w = rng.normal(size=FEATURES).astype(np.float32)
  for split, n in (("train", TRAIN_ROWS), ("eval", EVAL_ROWS)):
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    y = x @ w + rng.normal(0, 0.01, n).astype(np.float32)
    d = os.path.join(root, f"Split-{split}")
    os.makedirs(d, exist_ok=True)
    with tf.io.TFRecordWriter(os.path.join(d, "data_tfrecord-00000-of-00001.gz"),
                              options="GZIP") as writer:
      for r in range(n):
        feats = {k: tf.train.Feature(float_list=tf.train.FloatList(value=[x[r, j]]))
                 for j, k in enumerate(keys)}
        feats["y"] = tf.train.Feature(float_list=tf.train.FloatList(value=[y[r]]))
        writer.write(tf.train.Example(
            features=tf.train.Features(feature=feats)).SerializeToString())
  open(stamp, "w").close()
  return keys


def job(tmp: str, data: str, keys: List[str], layout: str, hidden: int,
        steps_per_execution: Optional[int] = None) -> str:
  config = dict(layout=layout, device="cpu", model="mlp", hidden_units=[hidden, hidden],
                optimizer="adam", learning_rate=1e-4, batch_size=BATCH, steps=STEPS,
                checkpoint_every=STEPS // 2, log_every=STEPS // 2)
  if steps_per_execution is not None:  # Else the config's default (10; 5 with these).
    config["steps_per_execution"] = steps_per_execution
  if layout == "mesh":
    config["mesh"] = [1, 4]
  body = dict(config=config, examples_uri=data, feature_keys=keys, label_key="y",
              train_rows=TRAIN_ROWS, model_dir=os.path.join(tmp, "model", "Format-Serving"),
              model_run_dir=os.path.join(tmp, "model_run"),
              history_dir=os.path.join(tmp, "history"),
              checkpoint_dir=os.path.join(tmp, "ckpt"), num_shards=1)
  os.makedirs(tmp, exist_ok=True)
  path = os.path.join(tmp, "job.json")
  with open(path, "w") as f:
    json.dump(body, f)
  return path


def run(layout: str, round_: int, data: str, keys: List[str], hidden: int,
        steps_per_execution: Optional[int] = None) -> Dict:
  import shutil  # pylint: disable=g-import-not-at-top
  tmp = bu.work_dir("mesh_memory", f"{layout}-{round_}")
  shutil.rmtree(tmp)
  path = job(tmp, data, keys, layout, hidden, steps_per_execution)
  out = bu.run_python(["-m", "tfx_parallel.components.distributed_trainer.run.train",
                       "--job", path], timeout=1800)
  with open(os.path.join(tmp, "history", "history.json")) as f:
    history = json.load(f)
  print(f"[mesh_memory] round {round_} {layout}: peak RSS {out['maxrss_mb']:,.0f} MB "
        f"({out['seconds']:.0f}s)", flush=True)
  return {"layout": layout, "round": round_, "maxrss_mb": out["maxrss_mb"],
          "seconds": out["seconds"], "steps_run": history["steps_run"],
          "state_bytes_per_device": history.get("state_bytes_per_device"),
          "param_count": history.get("param_count")}


def traced(layout: str, data: str, keys: List[str], hidden: int,
           steps_per_execution: Optional[int] = None) -> Dict[str, float]:
  """Phase -> its largest peak RSS over the RSS before the build (MB), from two runs of
  one job with the rss hook: the first trains from scratch, the second resumes from its
  checkpoint (the restore)."""
  import shutil  # pylint: disable=g-import-not-at-top
  tmp = bu.work_dir("mesh_memory", f"{layout}-phases")
  shutil.rmtree(tmp)
  path = job(tmp, data, keys, layout, hidden, steps_per_execution)
  out: Dict[str, float] = {}
  for attempt in range(2):
    log = os.path.join(tmp, f"rss-{attempt}.jsonl")
    env = {"TFXP_TEST_RSS_LOG": log,
           "PYTHONPATH": os.pathsep.join(p for p in (HOOKS_SITE, os.environ.get("PYTHONPATH"))
                                         if p)}
    if attempt:  # Resume: the first run ended after its checkpoint at step STEPS // 2.
      os.remove(os.path.join(tmp, "history", "history.json"))
    bu.run_python(["-m", "tfx_parallel.components.distributed_trainer.run.train",
                   "--job", path], timeout=1800, env=env)
    with open(log) as f:
      phases = [json.loads(line) for line in f]
    base = next(p for p in phases if p["phase"] == "build")["rss_before"]
    for p in phases:
      peak = (p["own_peak"] if p["phase"] == "train" else p["peak"]) - base
      out[p["phase"]] = max(out.get(p["phase"], 0.0), peak / 1e6)
  print(f"[mesh_memory] phases {layout}: " + ", ".join(f"{k} +{v:,.0f} MB"
                                                      for k, v in out.items()), flush=True)
  return out


def phases_section(trace: Dict[str, Dict[str, float]], hidden: int, load_before: str,
                   load_after: str) -> str:
  lines = ["## Peak memory of each phase of a mesh run against one device "
           "(`benchmarks/bench_mesh_memory.py --phases`)", "",
           f"Command: `.venv/bin/python benchmarks/bench_mesh_memory.py --phases`; run "
           f"{time.strftime('%Y-%m-%d %H:%M')}; {bu.machine()}; load average before: "
           f"{load_before}; after: {load_after}.",
           f"The model and job of the section above (mlp {FEATURES} -> {hidden} -> {hidden} "
           "-> 1, Adam), each layout run twice with the test hook tests/hooks_site/rss.py "
           "(the second run resumes from the first one's checkpoint: the restore). Each "
           "phase's peak RSS over the RSS before the build, MB (the train phase outside "
           "its nested checkpoints and evaluations; eval and checkpoint: the largest of "
           "their occurrences).", "",
           "| phase | single | mesh 1x4 | mesh - single |", "|---|---|---|---|"]
  for phase in PHASES:
    s, m = trace["single"].get(phase), trace["mesh"].get(phase)
    if s is None or m is None:
      continue
    lines.append(f"| {phase} | +{s:,.0f} | +{m:,.0f} | {m - s:+,.0f} |")
  return "\n".join(lines + [""])


def section(result: Dict, load_before: str, load_after: str) -> str:
  lines = ["## Peak memory of a whole mesh run against one device "
           "(`benchmarks/bench_mesh_memory.py`)", "",
           f"Command: `.venv/bin/python {result['command']}`; run {result['when']}; "
           f"{bu.machine()}; load average before: {load_before}; after: {load_after}.",
           f"Model: built-in mlp {FEATURES} -> {result['hidden']} -> {result['hidden']} -> 1 "
           f"({result['param_count']:,} parameters), Adam, {STEPS} steps of {BATCH} rows, a "
           f"checkpoint at step {STEPS // 2}, eval before training and after each epoch, "
           "export. One training process per run (`run.train --job`), single and mesh 1x4 "
           "(4 logical CPU devices) alternating; peak RSS of that process (`os.wait4` "
           "ru_maxrss).", "",
           "| round | single peak RSS (MB) | mesh 1x4 peak RSS (MB) | mesh / single |",
           "|---|---|---|---|"]
  for r in result["rounds"]:
    lines.append(f"| {r['round']} | {r['single']:,.0f} | {r['mesh']:,.0f} | "
                 f"{r['ratio']:.2f}x |")
  lines += ["", f"Median ratio {result['median_ratio']:.2f}x (target: within 1.25x; "
            "before this change 1.90x and 1.85x, issue #39).", ""]
  return "\n".join(lines)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--hidden", type=int, default=6144)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--out", default=os.path.join(HERE, "mesh_memory.json"))
  p.add_argument("--phases", action="store_true",
                 help="the per-phase trace (test hook) instead of the rounds")
  p.add_argument("--steps-per-execution", type=int, default=None,
                 help="the trainer's steps_per_execution (default: the config's, 10, "
                      "reduced to 5 to divide the checkpoint and log interval of 15); the "
                      "mesh traces that many steps written out in one function")
  a = p.parse_args(argv)
  spe = a.steps_per_execution
  data = bu.work_dir("mesh_memory_data")
  keys = write_data(data)
  load_before = bu.load_average()
  if a.phases:
    trace = {layout: traced(layout, data, keys, a.hidden, spe) for layout in ("single", "mesh")}
    if a.hidden == 6144 and spe is None:
      bu.write_section(PHASES_SECTION, phases_section(trace, a.hidden, load_before,
                                                      bu.load_average()))
    return 0
  runs, rounds = [], []
  for i in range(a.rounds):
    single = run("single", i, data, keys, a.hidden, spe)
    mesh = run("mesh", i, data, keys, a.hidden, spe)
    runs += [single, mesh]
    rounds.append({"round": i, "single": single["maxrss_mb"], "mesh": mesh["maxrss_mb"],
                   "ratio": mesh["maxrss_mb"] / single["maxrss_mb"]})
  result = {"command": " ".join(["benchmarks/bench_mesh_memory.py"] + list(argv or sys.argv[1:])),
            "when": time.strftime("%Y-%m-%d %H:%M"), "hidden": a.hidden,
            "param_count": runs[0]["param_count"], "runs": runs, "rounds": rounds,
            "median_ratio": statistics.median(r["ratio"] for r in rounds)}
  with open(a.out, "w") as f:
    json.dump(result, f, indent=1)
  print(f"[mesh_memory] median mesh/single peak RSS {result['median_ratio']:.2f}x", flush=True)
  if a.hidden == 6144 and spe is None:
    bu.write_section(SECTION, section(result, load_before, bu.load_average()))
  return 0


if __name__ == "__main__":
  sys.exit(main())
