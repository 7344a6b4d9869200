"""The ingest on a real Dask cluster: `dask scheduler` and two `dask worker` processes.

One test (the cluster takes a while to start): the output files are byte-identical to the
DirectRunner's, a bad row fails naming its file and line, and "skip" counts it.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import distributed  # The `dask` extra, installed by `make setup`: a broken import fails.
import pytest

from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen import runners
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig

import test_example_gen_executor as helpers  # pylint: disable=g-bad-import-order

BIN = os.path.dirname(sys.executable)


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
  """A scheduler and two single-threaded workers on 127.0.0.1; yields the address."""
  logs = tmp_path_factory.mktemp("dask_logs")
  address = f"127.0.0.1:{_free_port()}"
  commands = [[os.path.join(BIN, "dask"), "scheduler", "--host", "127.0.0.1", "--port",
               address.split(":")[1], "--no-dashboard"]]
  commands += [[os.path.join(BIN, "dask"), "worker", f"tcp://{address}", "--nthreads", "1",
                "--nworkers", "1", "--no-dashboard", "--memory-limit", "0"]] * 2
  processes = []
  try:
    for i, command in enumerate(commands):
      log = open(logs / f"{i}.log", "w")  # pylint: disable=consider-using-with
      processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True))
      if i == 0:
        time.sleep(2)
    with distributed.Client(address, timeout=60) as client:
      client.wait_for_workers(2, timeout=180)
    yield address
  finally:
    for process in processes:
      os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
      process.wait(timeout=60)


@pytest.mark.slow
def test_dask_ingest_matches_direct_runner_and_reports_bad_rows(tmp_path, dask_cluster,
                                                               monkeypatch):
  monkeypatch.setattr(sources, "RANGE_BYTES", 2000)  # Several read ranges, both workers.
  dask = runners.dask_args(dask_cluster, npartitions=4)
  lines = ["a,s,y"] + [f"{i},s{i % 7},{i * 0.5}" for i in range(600)]
  path = helpers.write_csv(tmp_path / "data.csv", lines)
  config = ExampleGenConfig(label="y", source=path, num_workers=2, shards_per_worker=2)
  direct = helpers.run_executor(tmp_path, config, name="direct")
  on_dask = helpers.run_executor(tmp_path, config, dask, name="dask")
  assert helpers.file_digests(on_dask) == helpers.file_digests(direct)
  assert len(helpers.file_digests(direct)) == 8
  assert (helpers.props(on_dask)[keys.ROW_COUNTS] == helpers.props(direct)[keys.ROW_COUNTS])

  lines[450] = "449,s1,not-a-number"
  bad = helpers.write_csv(tmp_path / "bad.csv", lines)
  with pytest.raises(sources.BadInputError,
                     match=r"bad\.csv:451: column 'y': expected float, got 'not-a-number'"):
    helpers.run_executor(tmp_path, ExampleGenConfig(label="y", source=bad), dask, name="fail")
  assert os.listdir(tmp_path / "fail") == []

  skip = ExampleGenConfig(label="y", source=bad, bad_row_policy="skip")
  skipped = helpers.props(helpers.run_executor(tmp_path, skip, dask, name="skip"))
  assert skipped[keys.SKIPPED_ROWS] == 1
  assert skipped == helpers.props(helpers.run_executor(tmp_path, skip, name="skip_direct"))


def test_cli_runner_dask_spells_the_beam_args():
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  args = cli.build_parser().parse_args(
      ["run", "--runner", "dask", "--dask-address", "10.0.0.5:8786", "--beam-arg=--x=1"])
  assert cli.config_from_args(args).beam_pipeline_args == [
      "--x=1", "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
      "--dask_client_address=10.0.0.5:8786", "--dask_npartitions=16"]
  assert cli.config_from_args(cli.build_parser().parse_args(["run"])).beam_pipeline_args == []


def test_cli_dask_address_without_the_dask_runner_is_a_config_error(capsys):
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  assert cli.main(["run", "--dask-address", "10.0.0.5:8786"]) == 2
  assert "dask_address: needs --runner dask" in capsys.readouterr().err
