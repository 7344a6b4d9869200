"""What the missing-value policy (issue #28) costs the streamed training input.

The trainer's ``Preprocessor.parse_batch`` parses a feature ragged (then fills the
missing values, missing.py) when the scan found it missing somewhere
(``FeatureSpec.missing`` > 0), else as a dense FixedLenFeature with the fill as its
default (the same values for such a feature). This measures one batch of serialized
tf.Examples through ``parse_batch`` (a tf.function, as in the tf.data map) both ways, side
by side on the same batches: ``--features`` floats and 2 vocabulary strings, every value
present. Rounds alternate the two; each figure is the median (min-max) over rounds of the
mean time per batch.

Usage:
  .venv/bin/python benchmarks/bench_missing_parse.py                # 15 rounds
  .venv/bin/python benchmarks/bench_missing_parse.py --rounds 2     # smoke
A run of at least 10 rounds writes its section, benchmarks/results/missing_parse.md
(run_all.py keeps it in RESULTS.md).
"""
import argparse
import dataclasses
import datetime
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SECTION = os.path.join(HERE, "results", "missing_parse.md")


def _batch(tf, rows: int, floats: int, rng):
  out = []
  for i in range(rows):
    feature = {f"x{j}": tf.train.Feature(float_list=tf.train.FloatList(
        value=[float(rng.normal())])) for j in range(floats)}
    for name in ("s0", "s1"):
      feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[f"v{int(rng.integers(50))}".encode()]))
    feature["y"] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(i % 2)]))
    out.append(tf.train.Example(features=tf.train.Features(feature=feature))
               .SerializeToString())
  return tf.constant(out)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rounds", type=int, default=15)
  parser.add_argument("--batches", type=int, default=100, help="batches timed per round")
  parser.add_argument("--batch-size", type=int, default=512)
  parser.add_argument("--features", type=int, default=10)
  args = parser.parse_args(argv)
  sys.path.insert(0, os.path.dirname(HERE))
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import tfenv  # pylint: disable=g-import-not-at-top
  tfenv.prepare()  # An entry point: before TensorFlow is imported.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor  # pylint: disable=g-import-not-at-top

  features = tuple([ms.FeatureSpec(f"x{j}", ms.FLOAT32, fill=0.0)
                    for j in range(args.features)] +
                   [ms.FeatureSpec(n, ms.STRING, vocabulary=tuple(f"v{i}" for i in range(50)),
                                   num_ids=51, fill="") for n in ("s0", "s1")])
  dense = ms.ModelSpec(features=features, label_key="y", task=ms.BINARY)
  ragged = dataclasses.replace(dense, features=tuple(
      dataclasses.replace(f, missing=1) for f in features))
  batch = _batch(tf, args.batch_size, args.features, np.random.default_rng(0))
  parsers = {name: tf.function(Preprocessor(spec).parse_batch)
             for name, spec in (("dense", dense), ("ragged", ragged))}
  first = {name: fn(batch) for name, fn in parsers.items()}
  for name in first["dense"][0]:  # Same values both ways (every value is present).
    np.testing.assert_array_equal(first["dense"][0][name], first["ragged"][0][name])
  times = {name: [] for name in parsers}
  load_before = os.getloadavg()
  for _ in range(args.rounds):
    for name, fn in parsers.items():
      start = time.perf_counter()
      for _ in range(args.batches):
        fn(batch)
      times[name].append((time.perf_counter() - start) / args.batches * 1e3)
  load_after = os.getloadavg()

  def fig(values):
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
  ratio = statistics.median(times["ragged"]) / statistics.median(times["dense"])
  command = ("`.venv/bin/python benchmarks/bench_missing_parse.py" +
             ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:])) + "`")
  lines = [
      "## Missing values: ragged vs dense parse of the training input "
      "(`benchmarks/bench_missing_parse.py`, issue #28)",
      "",
      f"Command: {command}; run {datetime.datetime.now():%Y-%m-%d %H:%M}; "
      f"{platform.machine()}, {os.cpu_count()} cores; load average before "
      f"{' '.join(f'{x:.2f}' for x in load_before)}, after "
      f"{' '.join(f'{x:.2f}' for x in load_after)} (the cores are shared with other work).",
      f"`Preprocessor.parse_batch` on a batch of {args.batch_size} tf.Examples "
      f"({args.features} floats, 2 vocabulary strings, a float label), {args.rounds} "
      f"alternating rounds of {args.batches} batches; median (min-max) ms per batch.",
      "",
      "| parse | ms per batch | ratio to dense |",
      "|---|---|---|",
      f"| dense (FixedLenFeature, default = fill): features never missing | "
      f"{fig(times['dense'])} | 1.00 |",
      f"| ragged + fill: features missing somewhere, and every feature in serving | "
      f"{fig(times['ragged'])} | {ratio:.2f} |",
      "",
      "So the trainer parses ragged only the features its scan found missing; the input "
      "cache (config `cache`) parses once, so there the difference is paid once per run.",
      ""]
  print("\n".join(lines))
  if args.rounds >= 10:
    os.makedirs(os.path.dirname(SECTION), exist_ok=True)
    with open(SECTION, "w") as f:
      f.write("\n".join(lines))


if __name__ == "__main__":
  main()
