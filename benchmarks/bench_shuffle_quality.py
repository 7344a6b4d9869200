"""Does the input cache's block shuffle cost model quality? Blocks vs row by row.

    python benchmarks/bench_shuffle_quality.py [--seeds N] [--epochs E]

The in-memory cache (components/distributed_trainer/inputs/memory_cache.py) shuffles the rows
once, then reshuffles blocks of ``batch_size // 32`` rows (at most 16) each epoch, which
makes serving a batch nearly free (bench_user_model.py). This trains the same user
model (bench_user_model.py's ``build_model``: embeddings + MLP, binary) on the same data
(bench_user_model.py's 200,000 rows, batch 512, Adam 1e-3, ``steps_per_execution`` 10)
from the cache with its default blocks of 16 and with blocks of 1 (a full row-level
reshuffle every epoch; ``memory_cache.BLOCK_ROWS = 1``), for a few seeds, and compares
eval log loss and AUC (4,096 eval rows). The question is whether the gap between the
two is larger than the spread between seeds. Writes benchmarks/results/shuffle_quality.md.
"""
import argparse
import json
import os
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
import benchutil as bu  # noqa: E402  pylint: disable=wrong-import-position
import bench_user_model as um  # noqa: E402  pylint: disable=wrong-import-position

SECTION = os.path.join(BENCH_DIR, "results", "shuffle_quality.md")
# bench_user_model.py's full-size data (written once, shared with it).
ROWS, EVAL_ROWS = um.sizes(False)["train_rows"], um.sizes(False)["eval_rows"]
SAVED = os.path.join(BENCH_DIR, "shuffle_quality.json")  # the run's figures, kept in git


def run(seeds: int, epochs: int) -> dict:
  sz = um.sizes(False)
  data = um.write_data(bu.work_dir(f"user_model_data_{ROWS}"), ROWS, EVAL_ROWS)
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()
  import tf_keras  # pylint: disable=g-import-not-at-top
  tfenv.skip_tf_keras_autograph()
  from tfx_parallel.components.common.splits import split_files  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs import memory_cache, tf_data as data_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import user_module  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run.train import Job  # pylint: disable=g-import-not-at-top
  job = Job(**um.job_dict(data, bu.work_dir("shuffle_quality"), sz))
  spec, pre = um._spec_and_pre(job)  # pylint: disable=protected-access
  columns = memory_cache.load(split_files(job.examples_uri, "train"), pre)
  eval_ds = data_lib.make_dataset(split_files(job.examples_uri, "eval"), pre, 1024,
                                  shuffle=False, drop_remainder=False)
  steps = epochs * (ROWS // um.BATCH)
  default_block = memory_cache.BLOCK_ROWS
  results = {}
  for block in (default_block, 1):
    memory_cache.BLOCK_ROWS = block
    results[block] = []
    for seed in range(seeds):
      tf_keras.utils.set_random_seed(seed)
      model = um.build_model(spec)
      model.compile(optimizer=tf_keras.optimizers.Adam(0.001),
                    loss=user_module.default_loss(spec.task), steps_per_execution=um.SPE,
                    metrics=[tf_keras.metrics.AUC(name="auc")])
      model.fit(memory_cache.dataset(columns, um.BATCH, seed=seed), epochs=1,
                steps_per_epoch=steps, verbose=0)
      loss, auc = model.evaluate(eval_ds, steps=-(-EVAL_ROWS // 1024), verbose=0)
      results[block].append({"seed": seed, "log_loss": loss, "auc": auc})
      print(f"[bench_shuffle_quality] blocks of {block}, seed {seed}: eval log loss "
            f"{loss:.4f}, AUC {auc:.4f}", flush=True)
  memory_cache.BLOCK_ROWS = default_block
  return {"results": {str(k): v for k, v in results.items()}, "seeds": seeds,
          "epochs": epochs, "default_block": default_block,
          "machine": bu.machine(), "when": time.strftime("%Y-%m-%d %H:%M"),
          "command": f"python benchmarks/bench_shuffle_quality.py --seeds {seeds} "
                     f"--epochs {epochs}"}


def section(result: dict) -> str:
  blocks = str(result["default_block"])
  loss = {k: [r["log_loss"] for r in result["results"][k]] for k in (blocks, "1")}
  overlap = max(min(v) for v in loss.values()) <= min(max(v) for v in loss.values())
  if result["seeds"] < 2:
    verdict = "One seed: no seed-to-seed spread to compare the gap with."
  elif overlap:
    verdict = ("The two log-loss ranges overlap: the block shuffle's speed "
               "(bench_user_model.py) costs no quality measurable across these seeds.")
  else:
    verdict = ("The log-loss ranges do not overlap: the block shuffle changes quality here "
               f"(mean {statistics.mean(loss[blocks]):.4f} vs "
               f"{statistics.mean(loss['1']):.4f} row by row).")
  rows = []
  for key, name in ((blocks, f"blocks of {blocks} (the default at batch {um.BATCH})"),
                    ("1", "blocks of 1 (row-level reshuffle every epoch)")):
    losses = loss[key]
    auc = [r["auc"] for r in result["results"][key]]
    rows.append(f"| {name} | {statistics.mean(losses):.4f} [{min(losses):.4f}, "
                f"{max(losses):.4f}] | "
                f"{statistics.mean(auc):.4f} [{min(auc):.4f}, {max(auc):.4f}] |")
  return "\n".join([
      "## Input cache: block shuffle vs row-level reshuffle, model quality "
      "(`benchmarks/bench_shuffle_quality.py`)", "",
      f"Command: `.venv/bin/{result['command']}`; run {result['when']}; {result['machine']}.",
      f"bench_user_model.py's model and data ({ROWS:,} rows, batch {um.BATCH}, Adam 1e-3), "
      f"{result['epochs']} epochs from the in-memory cache, {result['seeds']} seeds; eval on "
      f"{EVAL_ROWS:,} rows; mean [min, max] over seeds.", "",
      "| per-epoch order | eval log loss | eval AUC |", "|---|---|---|", *rows, "",
      verdict, ""])


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--seeds", type=int, default=3)
  parser.add_argument("--epochs", type=int, default=3)
  args = parser.parse_args(argv)
  result = run(args.seeds, args.epochs)
  with open(SAVED, "w") as f:
    json.dump(result, f, indent=1)
  text = section(result)
  print(text)
  bu.write_section(SECTION, text)
  return 0


if __name__ == "__main__":
  sys.exit(main())
