"""Zero-byte "directory" objects and the KFP launcher's download (kubeflow/pipelines#13476).

The object store is moto's S3 server (``moto_server``, the S3 REST API over HTTP on this
machine). The artifact is laid out as a step writing at its remote URI through
TensorFlow's GCS filesystem leaves it: every file, plus an empty object ``<dir>/`` for the
artifact and each directory below it (tensorflow/tensorflow ``tsl/platform/cloud/
gcs_file_system.cc`` ``GcsFileSystem::CreateDir`` uploads ``MaybeAppendSlash(dirname)``
with an empty body; ``FileSystem::RecursivelyCreateDir`` calls it for each missing
level). The download is the launcher stand-in's, which follows ``DownloadBlob``
(kubeflow/pipelines ``backend/src/v2/objectstore/object_store.go`` master:176-205).
"""
import json
import os
import signal
import subprocess
import sys

import boto3
import pytest
from tfx.dsl.components.base import base_executor

from kubeflow_launcher import Launcher, LauncherError
from kubeflow_util import create_bucket_when_listening, free_port
from tfx_parallel.kubeflow import dir_markers, entrypoint

BIN = os.path.dirname(sys.executable)
BUCKET = "mlpipeline"
KEYS = {"aws_access_key_id": "minio", "aws_secret_access_key": "minio123",
        "region_name": "us-east-1"}
MODEL = "v2/artifacts/p/run-1/DistributedTrainer/salt/model"
# A SavedModel in a Model artifact (the trainer's Format-Serving/), and a sibling output
# whose name starts with the same characters (KFP up to 2.16 listed it with the model).
FILES = {"Format-Serving/saved_model.pb": b"pb" * 50,
         "Format-Serving/fingerprint.pb": b"f" * 7,
         "Format-Serving/variables/variables.index": b"i" * 30,
         "Format-Serving/variables/variables.data-00000-of-00001": b"d" * 400}
DIRECTORIES = ["", "Format-Serving/", "Format-Serving/assets/", "Format-Serving/variables/"]


@pytest.fixture(scope="module")
def s3():
  port = free_port()
  endpoint = f"http://127.0.0.1:{port}"
  server = subprocess.Popen([os.path.join(BIN, "moto_server"), "-H", "127.0.0.1", "-p",
                             str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
  try:
    client = boto3.client("s3", endpoint_url=endpoint, **KEYS)
    create_bucket_when_listening(client, BUCKET)
    yield endpoint, client
  finally:
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=60)


def _write_like_tensorflow_on_gcs(client, prefix):
  for directory in DIRECTORIES:  # makedirs first, as the writers do.
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{directory}", Body=b"")
  for name, data in FILES.items():
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=data)
  client.put_object(Bucket=BUCKET, Key=f"{prefix}_run/", Body=b"")  # Not under the prefix.


def _launcher(tmp_path, client):
  return Launcher({"pipelineInfo": {"name": "p"}}, str(tmp_path / "launcher"),
                  f"minio://{BUCKET}/v2/artifacts", s3=client)


def test_marker_keys_are_the_empty_slash_keys_under_the_prefix_only():
  objects = [("m/", 0), ("m/a/", 0), ("m/a/f", 3), ("m/b/", 5), ("m_run/", 0), ("m/a/e", 0)]
  assert dir_markers.marker_keys(objects, "m") == ["m/", "m/a/"]
  assert dir_markers.marker_keys(objects, "m/") == ["m/", "m/a/"]
  assert dir_markers.split_uri("minio://b/k/model/") == ("b", "k/model")


def test_the_launchers_download_breaks_on_directory_objects_and_passes_without_them(
    tmp_path, s3):
  endpoint, client = s3
  prefix = MODEL + "-a"
  _write_like_tensorflow_on_gcs(client, prefix)
  uri = f"minio://{BUCKET}/{prefix}"
  launcher = _launcher(tmp_path, client)
  # Today's output: the artifact's own "model/" becomes a file, and the next key under it
  # fails as on the cluster.
  with pytest.raises(LauncherError, match=r"failed to create local directory .*: mkdir "
                     r".*/before/model: not a directory"):
    launcher.download(uri, str(tmp_path / "before" / "model"))

  deleted = dir_markers.remove_all([uri, str(tmp_path / "a-local-path")],
                                   [f"--s3_endpoint_url={endpoint}",
                                    f"--s3_access_key_id={KEYS['aws_access_key_id']}",
                                    f"--s3_secret_access_key="
                                    f"{KEYS['aws_secret_access_key']}"])
  assert deleted == [f"{prefix}/{d}" for d in DIRECTORIES]
  local = tmp_path / "after" / "model"
  assert launcher.download(uri, str(local)) == sum(len(d) for d in FILES.values())
  for name, data in FILES.items():
    assert (local / name).read_bytes() == data, name
  listed = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]]
  assert f"{prefix}_run/" in listed  # A sibling artifact is left alone.
  assert dir_markers.remove(uri, dir_markers.S3Store(client)) == []  # Nothing left.


def test_only_a_directory_object_below_the_root_breaks_the_download_too(tmp_path, s3):
  _, client = s3
  prefix = MODEL + "-b"
  for name, data in FILES.items():
    client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=data)
  client.put_object(Bucket=BUCKET, Key=f"{prefix}/Format-Serving/variables/", Body=b"")
  uri = f"minio://{BUCKET}/{prefix}"
  launcher = _launcher(tmp_path, client)
  with pytest.raises(LauncherError, match=r"mkdir .*/Format-Serving/variables: not a "
                     r"directory"):
    launcher.download(uri, str(tmp_path / "before" / "model"))
  assert dir_markers.remove(uri, dir_markers.S3Store(client)) == [
      f"{prefix}/Format-Serving/variables/"]
  launcher.download(uri, str(tmp_path / "after" / "model"))
  assert (tmp_path / "after" / "model" / "Format-Serving" / "variables" /
          "variables.index").read_bytes() == FILES["Format-Serving/variables/variables.index"]


def test_a_multi_node_steps_store_endpoint_is_used_without_beam_args(s3, monkeypatch):
  """A multi-node trainer step has no Beam S3 flags: the entry point passes the endpoint
  of the store it set up (object_store.prepare_executor sets TensorFlow's S3_ENDPOINT and
  the AWS_* keys; boto3 reads the keys but not S3_ENDPOINT), not AWS's."""
  endpoint, client = s3
  monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
  monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEYS["aws_access_key_id"])
  monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS["aws_secret_access_key"])
  monkeypatch.setenv("AWS_DEFAULT_REGION", KEYS["region_name"])
  monkeypatch.setenv("S3_ENDPOINT", endpoint)  # As the entry point sets it; boto3 ignores it.
  prefix = MODEL + "-c"
  _write_like_tensorflow_on_gcs(client, prefix)
  assert dir_markers.remove_all([f"s3://{BUCKET}/{prefix}"], [], s3_endpoint=endpoint) == [
      f"{prefix}/{d}" for d in DIRECTORIES]
  assert dir_markers.s3_client([], endpoint).meta.endpoint_url == endpoint
  # Beam's own flag, when the step has one, still names the endpoint.
  assert dir_markers.s3_client([f"--s3_endpoint_url={endpoint}"],
                               "http://other:9000").meta.endpoint_url == endpoint


class MarkerWritingExecutor(base_executor.BaseExecutor):
  """Writes its Model at the remote URI it is given, as TensorFlow's GCS filesystem
  leaves one: a directory object per directory, then the files."""

  def Do(self, input_dict, output_dict, exec_properties):
    del input_dict, exec_properties
    [model] = output_dict["model"]
    bucket, prefix = dir_markers.split_uri(model.uri)
    assert model.uri.startswith("s3://") and bucket == BUCKET, model.uri
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], **KEYS)
    _write_like_tensorflow_on_gcs(client, prefix)


@pytest.mark.slow
def test_the_entry_point_leaves_no_directory_objects_in_what_it_wrote_remotely(
    tmp_path, s3, monkeypatch):
  """A step whose outputs are written at their remote URIs (here: an out-of-pod Beam
  runner, so minio:// is s3://) through the real entry point and TFX's
  kubeflow_v2_run_executor; the next step's download then passes."""
  endpoint, client = s3
  monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
  prefix = MODEL + "-c"
  uri = f"minio://{BUCKET}/{prefix}"
  executor_input = {
      "inputs": {"parameterValues": {}, "artifacts": {}},
      "outputs": {"artifacts": {"model": {"artifacts": [
          {"name": "model", "uri": uri, "type": {"schemaTitle": "tfx.Model"}}]}},
                  "outputFile": str(tmp_path / "out" / "output_metadata.json")}}
  entrypoint.run(["--executor_class_path",
                  f"{__name__}.MarkerWritingExecutor",
                  "--json_serialized_invocation_args", json.dumps(executor_input),
                  "--runner=DataflowRunner", f"--s3_endpoint_url={endpoint}",
                  f"--s3_access_key_id={KEYS['aws_access_key_id']}",
                  f"--s3_secret_access_key={KEYS['aws_secret_access_key']}"],
                 {"TFX_PARALLEL_MOUNT_ROOT": str(tmp_path / "pod")})
  with open(tmp_path / "out" / "output_metadata.json") as f:
    assert json.load(f)["artifacts"]["model"]["artifacts"][0]["uri"] == uri
  listed = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET,
                                                     Prefix=prefix + "/")["Contents"]]
  assert sorted(listed) == sorted(f"{prefix}/{name}" for name in FILES)
  local = tmp_path / "next-step" / "model"
  assert _launcher(tmp_path, client).download(uri, str(local)) == sum(
      len(d) for d in FILES.values())
