"""Issue 38 item 11: the mixed-type ingest with missing-value tokens (na_values), side by
side with the code before them.

Runs bench_ingest.py's ``scale_csv`` child (``ingest.run``, in-memory DirectRunner, one
fresh process per run) in alternating rounds on:

* ``mixed``: bench_ingest.make_mixed_csv (6 floats with 5% empty cells, an int, a
  category, a free-text id with 5% empty cells, a float label);
* ``numeric``: bench_ingest.make_csv with the same row and column count;
* ``mixed_na``: the mixed file with every empty cell written ``NA`` (R's convention),
  which the new code reads as missing (the code before read those float columns as
  strings, so it is run on this file only by the new code);

each by this tree's code ("after") and by ``git archive --base`` of the same repository
("before", imported first through PYTHONPATH), then once stock CsvExampleGen on
``mixed``. Ratios, not absolute times, are the result: the machine is shared.

    .venv/bin/python benchmarks/bench_na_tokens.py --rows 200000 --rounds 2 --base a72a034
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_ingest  # pylint: disable=g-import-not-at-top,wrong-import-position
import benchutil  # pylint: disable=g-import-not-at-top,wrong-import-position


def make_na_csv(mixed_path: str, path: str) -> str:
  """``mixed_path`` with every empty cell written NA."""
  if os.path.exists(path):
    return path
  with open(mixed_path) as src, open(path + ".tmp", "w") as out:
    out.write(src.readline())
    for line in src:
      cells = line.rstrip("\n").split(",")
      out.write(",".join(c if c else "NA" for c in cells) + "\n")
  os.replace(path + ".tmp", path)
  return path


def before_tree(base: str, root: str) -> str:
  """A PYTHONPATH entry whose tfx_parallel package is ``base``'s code."""
  pkg = os.path.join(root, "tfx_parallel")
  if not os.path.exists(pkg):
    src = os.path.join(root, "src")
    os.makedirs(src)
    archive = subprocess.run(["git", "archive", base, "components", "pipeline", "kubeflow"],
                             cwd=os.path.dirname(HERE), capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    os.makedirs(pkg)
    open(os.path.join(pkg, "__init__.py"), "w").close()
    for d in ("components", "pipeline", "kubeflow"):
      os.symlink(os.path.join(src, d), os.path.join(pkg, d))
  return root


def run(csv_path: str, pythonpath: str = "") -> dict:
  old = os.environ.get("PYTHONPATH")
  if pythonpath:
    os.environ["PYTHONPATH"] = pythonpath
  try:
    return bench_ingest._run_child(  # pylint: disable=protected-access
        ["--_child", "scale_csv", "--csv", csv_path, "--mode", "in_memory"])
  finally:
    if old is None:
      os.environ.pop("PYTHONPATH", None)
    else:
      os.environ["PYTHONPATH"] = old


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--rows", type=int, default=200_000)
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--base", required=True, help="commit of the code before")
  p.add_argument("--no-stock", action="store_true")
  args = p.parse_args()
  data = os.path.join(tempfile.gettempdir(), "tfx_parallel_bench")
  mixed = bench_ingest.make_mixed_csv(os.path.join(data, f"mixed_{args.rows}", "data.csv"),
                                      args.rows)
  numeric = bench_ingest.make_csv(os.path.join(
      data, f"ingest_{args.rows}x{bench_ingest.MIXED_FLOATS + 3}", "data.csv"), args.rows,
      bench_ingest.MIXED_FLOATS + 3)
  mixed_na = make_na_csv(mixed, os.path.join(data, f"mixed_{args.rows}", "data_na.csv"))
  before = before_tree(args.base, os.path.join(data, f"before_{args.base}"))
  cases = [("mixed", "after", mixed, ""), ("mixed", "before", mixed, before),
           ("numeric", "after", numeric, ""), ("numeric", "before", numeric, before),
           ("mixed_na", "after", mixed_na, "")]
  seconds = {(k, side): [] for k, side, _, _ in cases}
  cpu = {(k, side): [] for k, side, _, _ in cases}
  ingest_cpu = {(k, side): [] for k, side, _, _ in cases}
  print(f"[bench_na_tokens] load before: {benchutil.load_average()}", flush=True)
  for i in range(args.rounds):
    for kind, side, path, pythonpath in (cases if i % 2 == 0 else cases[::-1]):
      got = run(path, pythonpath)
      seconds[(kind, side)].append(round(got["seconds"], 2))
      cpu[(kind, side)].append(round(got["cpu_seconds"], 2))
      ingest_cpu[(kind, side)].append(round(got["ingest_cpu_seconds"], 2))
      print(f"[bench_na_tokens] round {i + 1} {kind} {side}: {got['seconds']:.2f} s, "
            f"CPU {got['cpu_seconds']:.2f} s (ingest call {got['ingest_cpu_seconds']:.2f} s),"
            f" {got['rows_written']} rows", flush=True)
  for label, table in (("wall", seconds), ("process CPU", cpu),
                       ("ingest-call CPU", ingest_cpu)):
    med = {k: statistics.median(v) for k, v in table.items()}
    print(f"--- by {label} seconds (median of {args.rounds}): {dict((f'{k}/{s}', v) for (k, s), v in table.items())}")
    for side in ("after", "before"):
      print(f"{side}: mixed/numeric rows/s {med[('numeric', side)] / med[('mixed', side)]:.2f}x")
    print(f"after/before rows/s: mixed {med[('mixed', 'before')] / med[('mixed', 'after')]:.2f}x,"
          f" numeric {med[('numeric', 'before')] / med[('numeric', 'after')]:.2f}x")
    print(f"after: mixed_na/numeric rows/s "
          f"{med[('numeric', 'after')] / med[('mixed_na', 'after')]:.2f}x")
  med = {k: statistics.median(v) for k, v in seconds.items()}
  if not args.no_stock:
    stock = bench_ingest._run_child(  # pylint: disable=protected-access
        ["--_child", "stock_csv", "--csv", mixed, "--mode", "in_memory", "--rows",
         str(args.rows)])
    print(f"stock CsvExampleGen mixed: {stock['seconds']:.1f} s, CPU "
          f"{stock['cpu_seconds']:.1f} s; after/stock rows/s by wall "
          f"{stock['seconds'] / med[('mixed', 'after')]:.1f}x, by CPU "
          f"{stock['cpu_seconds'] / statistics.median(cpu[('mixed', 'after')]):.1f}x")
  print(f"[bench_na_tokens] load after: {benchutil.load_average()}", flush=True)


if __name__ == "__main__":
  main()
