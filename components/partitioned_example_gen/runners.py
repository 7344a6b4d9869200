"""Beam args that pick the runner of the ingest (a Beam runner, not another program).

Beam does not know DaskRunner by a short name: it must be named in full. ``dask_args``
spells it, with the scheduler address and a partition count. DaskRunner puts a
``beam.Create`` of fewer than 128 elements in one Dask partition unless
``--dask_npartitions`` is given, and every later stage keeps that partitioning, so
without it the whole ingest would run as one task on one worker.
"""
from typing import List, Optional

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DEFAULT_DASK_PARTITIONS = 16


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
