"""DistributedTrainer layouts vs plain tf_keras ``model.fit``: examples/s.

Data: gzip TFRecords of the seed problem with 8 features (200k train rows; 20k in smoke
mode), written once under benchmarks/_work/train_data. Every run is a fresh process:
each layout through the real entry point
``python -m tfx_parallel.components.distributed_trainer.run.train --job job.json``, and the
baseline through ``benchmarks/keras_baseline.py``; the cases alternate within each
repetition (keras, single, mirrored, mesh, keras, single, ...), so load changes on the
machine hit all of them alike.

Steady-state examples/s: from the wall-time records (one every ``LOG_EVERY`` steps) of
history.json (the trainer) or the baseline's callback, the first record is dropped
(it holds tf.function tracing and the first input fill), as is every interval that
contains an epoch boundary (the trainer's per-epoch eval loss); the rate is
steps x global batch / seconds over the remaining intervals. The trainer's input mode
(config ``cache`` "auto": the split parsed once into memory when it fits) is in the
notes; the Keras baseline parses every batch from the files. Input wait is measured by
``benchmarks/bench_user_model.py`` (the trainer's input against pre-materialised
batches, paired in one process), not here.

On a 2-core machine logical devices share the same two cores, so mirrored / mesh
figures measure the machinery's overhead, not a speed-up.
"""
import json
import os
from typing import Dict, List, Optional

import benchutil as bu

LOG_EVERY = 10
CASES = [  # (case, trainer config overrides; None = the Keras baseline)
    ("keras", None),
    ("single", {"layout": "single"}),
    ("mirrored x2", {"layout": "mirrored", "devices": 2}),
    ("mirrored x4", {"layout": "mirrored", "devices": 4}),
    ("mesh 1x2", {"layout": "mesh", "mesh": [1, 2]}),
    ("mesh 2x1", {"layout": "mesh", "mesh": [2, 1]}),
    ("mesh 2x2", {"layout": "mesh", "mesh": [2, 2]}),
]
SMOKE_CASES = ("keras", "single")
TRAIN_CMD = "python -m tfx_parallel.components.distributed_trainer.run.train --job job.json"


def sizes(smoke: bool) -> dict:
  if smoke:
    return dict(train_rows=20_000, eval_rows=1_000, batch=512, steps=60, reps=1)
  return dict(train_rows=200_000, eval_rows=4_000, batch=512, steps=800, reps=3)


def steady_rate(records: List[dict], batch: int, steps_per_epoch: Optional[int]) -> float:
  """examples/s over the intervals after the first record, skipping epoch boundaries."""
  steps = seconds = 0.0
  for prev, cur in zip(records[:-1], records[1:]):
    a, b = prev["step"], cur["step"]
    if steps_per_epoch and (b // steps_per_epoch > a // steps_per_epoch
                            or a % steps_per_epoch == 0):
      continue
    steps += b - a
    seconds += cur["wall_time"] - prev["wall_time"]
  if seconds <= 0:
    raise ValueError(f"not enough records for a steady-state rate: {len(records)}")
  return steps * batch / seconds


def run_trainer(case: str, overrides: Dict, data_dir: str, sz: dict, rep: int) -> dict:
  tmp = bu.work_dir("train_runs", case.replace(" ", "_"), str(rep))
  config = dict(overrides, batch_size=sz["batch"], steps=sz["steps"], learning_rate=0.1,
                log_every=LOG_EVERY, checkpoint_every=0, optimizer="sgd", model="linear")
  job = dict(config=config, examples_uri=data_dir, feature_keys=bu.feature_keys(),
             label_key="y", train_rows=sz["train_rows"],
             model_dir=os.path.join(tmp, "model", "Format-Serving"),
             model_run_dir=os.path.join(tmp, "model_run"),
             history_dir=os.path.join(tmp, "history"),
             checkpoint_dir=os.path.join(tmp, "ckpt", str(os.getpid())), num_shards=4)
  path = os.path.join(tmp, "job.json")
  with open(path, "w") as f:
    json.dump(job, f)
  res = bu.run_python(["-m", "tfx_parallel.components.distributed_trainer.run.train",
                       "--job", path], timeout=600)
  with open(os.path.join(job["history_dir"], "history.json")) as f:
    hist = json.load(f)
  spe = max(1, sz["train_rows"] // sz["batch"])
  return {"rate": steady_rate(hist["records"], sz["batch"], spe),
          "whole_run_rate": hist["examples_per_sec"],
          "input_cache": hist.get("input_cache", {}).get("mode", "n/a"),
          "process_s": res["seconds"],
          "final_loss": hist["records"][-1]["loss"], "replicas": hist["replicas"]}


def run_keras(data_dir: str, sz: dict, rep: int) -> dict:
  out = os.path.join(bu.work_dir("train_runs", "keras", str(rep)), "keras.json")
  res = bu.run_python([os.path.join(bu.BENCH_DIR, "keras_baseline.py"), "--data", data_dir,
                       "--batch", str(sz["batch"]), "--steps", str(sz["steps"]),
                       "--log-every", str(LOG_EVERY), "--out", out], timeout=600)
  with open(out) as f:
    hist = json.load(f)
  return {"rate": steady_rate(hist["records"], sz["batch"], None),
          "whole_run_rate": hist["examples_per_sec"], "input_cache": "n/a (streamed)",
          "process_s": res["seconds"], "final_loss": hist["final_loss"], "replicas": 1}


def run(smoke: bool) -> List[dict]:
  sz = sizes(smoke)
  data_dir = bu.write_tfrecords(bu.work_dir("train_data"),
                                {"train": sz["train_rows"], "eval": sz["eval_rows"]})
  cases = [c for c in CASES if not smoke or c[0] in SMOKE_CASES]
  results: Dict[str, List[dict]] = {c: [] for c, _ in cases}
  for rep in range(sz["reps"]):
    for case, overrides in cases:
      if overrides is None:
        results[case].append(run_keras(data_dir, sz, rep))
      else:
        results[case].append(run_trainer(case, overrides, data_dir, sz, rep))
      print(f"[bench_train] rep {rep} {case}: {results[case][-1]['rate']:,.0f} ex/s "
            f"(input: {results[case][-1]['input_cache']})", flush=True)
  base = [r["rate"] for r in results["keras"]]
  data = (f"{sz['train_rows']:,} rows x {bu.NUM_FEATURES} features, gzip TFRecord (4 shards); "
          f"global batch {sz['batch']}, {sz['steps']} steps, linear model, SGD")
  rows = []
  for case, overrides in cases[1:]:
    runs = results[case]
    modes = sorted(set(r["input_cache"] for r in runs))
    cfg = " ".join(f"{k}={v}" for k, v in overrides.items())
    rows.append(bu.row(
        "train", case, command=f"{TRAIN_CMD}  ({cfg})", data=data,
        baseline="tf_keras model.fit (benchmarks/keras_baseline.py)",
        unit="examples/s (steady state)", ours=[r["rate"] for r in runs], base=base,
        higher_is_better=True,
        target="within 10% of Keras (ratio >= 0.9)" if case == "single" else "",
        notes=f"trainer input cache: {', '.join(modes)}",
        extra={"input_cache": modes, "whole_run_rate": [r["whole_run_rate"] for r in runs],
               "base_whole_run_rate": [r["whole_run_rate"] for r in results["keras"]],
               "replicas": runs[0]["replicas"],
               "final_loss": [r["final_loss"] for r in runs]}))
  plot(results, bu.plot_path("train", smoke))
  return rows


def plot(results: Dict[str, List[dict]], path: str):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  names = list(results)
  med = [np.median([r["rate"] for r in results[c]]) for c in names]
  lo = [med[i] - min(r["rate"] for r in results[c]) for i, c in enumerate(names)]
  hi = [max(r["rate"] for r in results[c]) - med[i] for i, c in enumerate(names)]
  fig, ax = plt.subplots(figsize=(8, 4))
  colors = ["gray" if n == "keras" else "tab:blue" if n == "single" else
            "tab:orange" if n.startswith("mirrored") else "tab:green" for n in names]
  ax.bar(names, med, yerr=[lo, hi], color=colors, capsize=4)
  ax.set_ylabel("examples/s (steady state, median, min-max)")
  ax.set_title("DistributedTrainer layouts vs tf_keras fit (2 CPU cores: overhead, "
               "not speed-up)", fontsize=9)
  for i, v in enumerate(med):
    ax.text(i, v, f"{v / 1e3:,.0f}k", ha="center", va="bottom", fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)
  print(f"[bench_train] plot written to {path}", flush=True)
