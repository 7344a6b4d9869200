"""Beam args that pick the runner of the ingest (a Beam runner, not another program).

Beam does not know DaskRunner by a short name: it must be named in full. ``dask_args``
spells it, with the scheduler address and a partition count. DaskRunner puts a
``beam.Create`` of fewer than 128 elements in one Dask partition unless
``--dask_npartitions`` is given, and every later stage keeps that partitioning, so
without it the whole ingest would run as one task on one worker.
"""
from typing import List, Optional, Sequence

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DEFAULT_DASK_PARTITIONS = 16
# Runners whose workers are threads or processes of the process that runs the pipeline
# (apache_beam/runners/direct, runners/portability/prism_runner.py starts a local Prism
# binary whose workers loop back), so they write to its disk.
IN_PROCESS_RUNNERS = ("DirectRunner", "BundleBasedDirectRunner", "SwitchingDirectRunner",
                      "PrismRunner", "InteractiveRunner")


def _flag(beam_args: Sequence[str], name: str) -> Optional[str]:
  """The last value of ``--name=V`` or ``--name V`` in `beam_args` (Beam's argparse: the
  last one wins); None if absent."""
  value = None
  for i, arg in enumerate(beam_args):
    if arg.startswith(f"--{name}="):
      value = arg.split("=", 1)[1]
    elif arg == f"--{name}" and i + 1 < len(beam_args):
      value = beam_args[i + 1]
  return value


def runner_name(beam_args: Sequence[str]) -> str:
  """The runner's short name (``--runner``, last one wins; DirectRunner by default)."""
  return (_flag(beam_args, "runner") or "DirectRunner").rsplit(".", 1)[-1]


def runs_outside(beam_args: Sequence[str]) -> bool:
  """True if the runner's workers may run on other machines than this process: then
  they cannot write to this machine's disk, and the output must go to a URI they share.

  In this process's machine: the runners of :data:`IN_PROCESS_RUNNERS` (the default
  runner is DirectRunner), DaskRunner without ``--dask_client_address`` (it starts a
  local cluster), and any portable runner whose SDK workers loop back into this process
  (``--environment_type=LOOPBACK``). Everything else (Dataflow, Flink, Spark, a portable
  job server, DaskRunner on a remote scheduler, an unknown runner) runs outside.
  """
  runner = runner_name(beam_args)
  if runner in IN_PROCESS_RUNNERS:
    return False
  if runner == DASK_RUNNER.rsplit(".", 1)[-1]:
    return bool(_flag(beam_args, "dask_client_address"))
  return (_flag(beam_args, "environment_type") or "").upper() != "LOOPBACK"


def dask_args(address: Optional[str] = None,
              npartitions: int = DEFAULT_DASK_PARTITIONS) -> List[str]:
  """``--runner=...DaskRunner [--dask_client_address=HOST:PORT] --dask_npartitions=N``.

  Without an address DaskRunner starts a local cluster in the process (dask's default).
  """
  args = [f"--runner={DASK_RUNNER}"]
  if address:
    args.append(f"--dask_client_address={address}")
  args.append(f"--dask_npartitions={npartitions}")
  return args
