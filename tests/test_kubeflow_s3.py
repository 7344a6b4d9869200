"""Ingest on a Beam runner whose workers run outside the pod, into a real S3 API.

The object store is moto's server mode (``moto_server``: the S3 REST API over HTTP on
this machine; KFP's MinIO serves the same API). The runner is Beam's DaskRunner on a
``dask scheduler`` and a ``dask worker`` in separate processes; the worker runs in its
own mount namespace where the "pod's" directory is a different, empty tmpfs, as a
Dataflow/Flink/Spark worker or a remote Dask worker has its own disk. The worker reaches
S3 through its own credentials (AWS_* environment, as a cluster's workers have theirs).

* Today's path: the executor writes the launcher's pod-local path (``/minio/...``). The
  workers' files never reach the pod: the commit finds nothing, and now says so
  (``write.MissingOutputError``) instead of recording an artifact without files.
* The new path: the compiled package's PartitionedExampleGen step, run by the launcher
  stand-in (tests/kubeflow_launcher.py) with this S3 as its object store: the entry
  point sees an out-of-pod runner in the Beam args and hands the executor the artifact's
  remote URI (``minio://b/k`` as ``s3://b/k``); the files land in the bucket where the
  next step's launcher downloads them.
"""
import copy
import gzip
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile

import boto3  # Beam's S3 filesystem (apache_beam[aws]); install_requires.
import distributed  # The `dask` extra.
import pytest

from kubeflow_launcher import Launcher
from kubeflow_util import compile_mapping, create_bucket_when_listening, free_port
from test_kubeflow_launcher import _small_config
from tfx_parallel.components.partitioned_example_gen import runners, write
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig

import test_example_gen_executor as helpers  # pylint: disable=g-bad-import-order

BIN = os.path.dirname(sys.executable)
BUCKET = "mlpipeline"  # The open-source install's bucket (minio://mlpipeline/v2/artifacts).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "minio", "AWS_SECRET_ACCESS_KEY": "minio123",
               "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def cluster():
  """moto's S3 server, a Dask scheduler, and a Dask worker whose view of the pod's
  directory is its own empty tmpfs. Yields (S3 endpoint, Dask address, pod directory)."""
  pod = tempfile.mkdtemp(prefix="h6-pod-")  # Under /tmp, outside pytest's tmp tree.
  logs = tempfile.mkdtemp(prefix="h6-cluster-logs-")
  endpoint = f"http://127.0.0.1:{free_port()}"
  address = f"127.0.0.1:{free_port()}"
  env = dict(os.environ, **CREDENTIALS, AWS_ENDPOINT_URL=endpoint)
  worker = (f"mount -t tmpfs tmpfs {pod} && exec {BIN}/dask worker tcp://{address} "
            "--nthreads 1 --nworkers 1 --no-dashboard --memory-limit 0")
  commands = [[os.path.join(BIN, "moto_server"), "-H", "127.0.0.1", "-p",
               endpoint.rsplit(":", 1)[1]],
              [os.path.join(BIN, "dask"), "scheduler", "--host", "127.0.0.1", "--port",
               address.split(":")[1], "--no-dashboard"],
              # unshare(1): a private mount namespace; the tmpfs hides the pod's files.
              ["unshare", "--mount", "--propagation", "private", "sh", "-c", worker]]
  processes = []
  try:
    for i, command in enumerate(commands):
      log = open(os.path.join(logs, f"{i}.log"), "w")  # pylint: disable=consider-using-with
      processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                        env=env, start_new_session=True))
    s3 = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
    create_bucket_when_listening(s3, BUCKET)
    with distributed.Client(address, timeout=60) as client:
      client.wait_for_workers(1, timeout=180)
    yield endpoint, address, pod
  finally:
    for process in processes:
      os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
      process.wait(timeout=60)
    shutil.rmtree(pod, ignore_errors=True)
    shutil.rmtree(logs, ignore_errors=True)


def _boto_credentials():
  return {"aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
          "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
          "region_name": CREDENTIALS["AWS_DEFAULT_REGION"]}


def _beam_args(endpoint, address):
  """DaskRunner on the remote scheduler, and Beam's S3 filesystem pointed at `endpoint`."""
  return runners.dask_args(address, npartitions=2) + [
      f"--s3_endpoint_url={endpoint}",
      f"--s3_access_key_id={CREDENTIALS['AWS_ACCESS_KEY_ID']}",
      f"--s3_secret_access_key={CREDENTIALS['AWS_SECRET_ACCESS_KEY']}",
      f"--s3_region_name={CREDENTIALS['AWS_DEFAULT_REGION']}"]


def test_runner_args_say_whether_workers_run_outside_the_pod():
  assert not runners.runs_outside([])
  assert not runners.runs_outside(["--runner=DirectRunner",
                                   "--direct_running_mode=multi_processing"])
  assert not runners.runs_outside(["--runner=PrismRunner"])
  assert not runners.runs_outside(runners.dask_args())  # A local cluster in the process.
  assert runners.runs_outside(runners.dask_args("10.0.0.5:8786"))
  assert runners.runs_outside(["--runner=DataflowRunner", "--project=p"])
  assert runners.runs_outside(["--runner", "FlinkRunner", "--environment_type=EXTERNAL"])
  assert not runners.runs_outside(["--runner=FlinkRunner", "--environment_type=LOOPBACK"])
  assert runners.runs_outside(["--runner=DirectRunner", "--runner=SparkRunner"])


@pytest.mark.slow
def test_pod_local_output_loses_the_workers_files(cluster):
  """Today's path: the executor writes the pod-local path; the workers write theirs."""
  endpoint, address, pod = cluster
  config = ExampleGenConfig(rows=400, num_features=3, num_workers=1, shards_per_worker=1)
  with pytest.raises(write.MissingOutputError,
                     match=r"the Beam pipeline succeeded but \d+ of its \d+ files are not in "
                           r".*\.staging-.*they wrote to their own disks"):
    helpers.run_executor(pathlib.Path(pod), config, _beam_args(endpoint, address),
                         name="minio-examples")
  assert os.listdir(os.path.join(pod, "minio-examples")) == []  # No Split-*: no artifact.


@pytest.mark.slow
def test_out_of_pod_ingest_writes_the_remote_uri_the_next_step_downloads(cluster):
  endpoint, address, pod = cluster
  data = copy.deepcopy(_small_config())
  data["pipeline"]["example_gen"] = {"rows": 400, "num_features": 3, "num_workers": 1,
                                     "shards_per_worker": 2}
  data["components"]["PartitionedExampleGen"]["beam_pipeline_args"] = _beam_args(
      endpoint, address)
  data["components"]["PartitionedExampleGen"]["retry"] = {"max_retry_count": 0}
  package = compile_mapping(data)
  s3 = boto3.client("s3", endpoint_url=endpoint, **_boto_credentials())
  workdir = os.path.join(pod, "launcher")  # The worker sees an empty tmpfs here.
  launcher = Launcher(package.pipeline_spec, workdir, "minio://mlpipeline/v2/artifacts",
                      platform_spec=package.platform_spec, s3=s3)
  launcher.run_task("PartitionedExampleGen")
  with open(os.path.join(workdir, "PartitionedExampleGen.log")) as f:
    assert "runs its workers outside this pod" in f.read()
  examples = launcher.mlmd["PartitionedExampleGen"]["examples"]
  assert examples["uri"].startswith("minio://mlpipeline/v2/artifacts/")  # As KFP records it.
  key = examples["uri"][len("minio://mlpipeline/"):]
  names = sorted(o["Key"][len(key) + 1:] for o in
                 s3.list_objects_v2(Bucket=BUCKET, Prefix=key + "/")["Contents"])
  assert [n for n in names if n.startswith("Split-")] == [
      f"Split-{split}/data_tfrecord-{i:05d}-of-00002.gz"
      for split in ("eval", "train") for i in range(2)], names
  # Nothing in the pod (the launcher would upload nothing, with only a warning).
  assert not os.path.exists(os.path.join(workdir, "pods", "PartitionedExampleGen",
                                         "minio", BUCKET, key))
  # What the next step's launcher downloads: every row the ExampleGen recorded.
  downloaded = os.path.join(pod, "next-step")
  assert launcher.download(examples["uri"], downloaded) > 0
  rows = 0
  for split in ("train", "eval"):
    for name in os.listdir(os.path.join(downloaded, f"Split-{split}")):
      with gzip.open(os.path.join(downloaded, f"Split-{split}", name), "rb") as f:
        data_bytes = f.read()
      while data_bytes:  # TFRecord framing: length (8), crc (4), data, crc (4).
        length = int.from_bytes(data_bytes[:8], "little")
        data_bytes = data_bytes[16 + length:]
        rows += 1
  assert rows == 400
