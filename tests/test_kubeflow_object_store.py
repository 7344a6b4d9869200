"""Multi-node training on the default artifact store: minio:// and s3:// (and gs://).

The settings and their checks (components/distributed_trainer/kube/object_store.py), the
entry point's choice of remote paths, the credentials read from KFP's secret through the
API server of tests/fake_kube.py (which resolves the replicas' ``secretKeyRef`` as the
kubelet does), and a real S3 API on this machine: moto's server mode (``moto_server``,
as tests/test_kubeflow_s3.py starts it). Whatever opens s3:// through TensorFlow runs in
a child process (tests/object_store_child.py: tensorflow-io's S3 client aborts the
interpreter's teardown). Slow: the container's entry point sets up a multi-node step's
process by itself (remote s3:// paths, the secret, the S3 variables); and two real
replica processes read the job file and the Examples from moto's s3:// and write the
model there.
"""
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import boto3
import pytest

from fake_kube import FakeCluster
from kubeflow_util import free_port
from tfx_parallel.components.distributed_trainer.kube import object_store
from tfx_parallel.components.distributed_trainer.kube import client as kube_client
from tfx_parallel.components.distributed_trainer.kube import launch as kube_launch
from tfx_parallel.components.distributed_trainer.kube import manifest as kube_manifest
from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings
from tfx_parallel.components.distributed_trainer.kube import watch as kube_watch
from tfx_parallel.components.distributed_trainer.kube import trainjob
from tfx_parallel.components.distributed_trainer.run.train import Job
from tfx_parallel.kubeflow import entrypoint

BIN = os.path.dirname(sys.executable)
HERE = os.path.dirname(os.path.abspath(__file__))
BUCKET = "mlpipeline"  # KFP's default bucket (minio://mlpipeline/v2/artifacts).
SECRET = {"accesskey": "minio", "secretkey": "minio123"}  # KFP's default secret's values.
# (Against moto, the secret holds the access key of an IAM user moto checks: `moto`.)
ROOT = f"s3://{BUCKET}/v2/artifacts/pipe/run-1/DistributedTrainer"


def _kubeconfig(tmp_path, host: str):
  """A kubeconfig file whose current context is the fake API server at `host`, as a step's
  KUBECONFIG (the kubernetes client's load_kube_config reads it)."""
  path = tmp_path / "kubeconfig"
  path.write_text(json.dumps({
      "apiVersion": "v1", "kind": "Config", "current-context": "fake",
      "clusters": [{"name": "fake", "cluster": {"server": host}}],
      "users": [{"name": "fake", "user": {}}],
      "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
  return path


def _job(root=ROOT, **overrides):
  fields = dict(config={"layout": "multi_worker"}, examples_uri=f"s3://{BUCKET}/v2/ex",
                feature_keys=["x0"], label_key="y", train_rows=10,
                model_dir=f"{root}/model/Format-Serving", model_run_dir=f"{root}/model_run",
                history_dir=f"{root}/history", checkpoint_dir=f"{root}/_checkpoints/abc",
                num_shards=2)
  fields.update(overrides)
  return Job(**fields)


# --- Settings: pure. -----------------------------------------------------------------

def test_minio_and_s3_default_to_kfps_minio_service_and_secret():
  store = object_store.from_uris({"a": f"{ROOT}/model", "b": f"s3://{BUCKET}/v2/ex"}, {})
  assert store == object_store.ObjectStore(
      "s3://", endpoint="http://minio-service.kubeflow:9000", region="minio",
      secret="mlpipeline-minio-artifact", access_key_key="accesskey",
      secret_key_key="secretkey", verify_ssl=True)
  # Standalone KFP: the pod has the minio-service Service's variables (MinioDefaultEndpoint).
  near = object_store.from_uris({"a": ROOT}, {"MINIO_SERVICE_SERVICE_HOST": "10.0.0.7",
                                              "MINIO_SERVICE_SERVICE_PORT": "9000"})
  assert near.endpoint == "http://10.0.0.7:9000"
  assert object_store.from_uris({"a": "gs://b/x"}, {}) == object_store.ObjectStore("gs://")


def test_the_replicas_get_the_settings_as_values_and_the_credentials_by_secret_key_ref():
  store = object_store.from_uris({"a": ROOT}, {
      "TFX_PARALLEL_S3_ENDPOINT": "https://s3.eu-west-1.amazonaws.com",
      "TFX_PARALLEL_S3_REGION": "eu-west-1", "TFX_PARALLEL_S3_SECRET": "aws",
      "TFX_PARALLEL_S3_ACCESS_KEY_KEY": "id", "TFX_PARALLEL_S3_SECRET_KEY_KEY": "key",
      "TFX_PARALLEL_S3_VERIFY_SSL": "0"})
  env = store.replica_env()
  assert env == {
      "S3_ENDPOINT": "https://s3.eu-west-1.amazonaws.com", "AWS_REGION": "eu-west-1",
      "AWS_DEFAULT_REGION": "eu-west-1", "S3_VERIFY_SSL": "0",
      "AWS_ACCESS_KEY_ID": {"secretKeyRef": {"name": "aws", "key": "id"}},
      "AWS_SECRET_ACCESS_KEY": {"secretKeyRef": {"name": "aws", "key": "key"}}}
  spec = kube_manifest.TFJobSpec(name="j", namespace="ns", image="i", command=("python",), env=env)
  for container in (kube_manifest.manifest(spec)["spec"]["tfReplicaSpecs"]["Worker"]["template"]
                    ["spec"]["containers"][0],
                    trainjob.manifest(spec)["spec"]["trainer"]):
    entries = {e["name"]: e for e in container["env"]}
    assert entries["AWS_ACCESS_KEY_ID"] == {
        "name": "AWS_ACCESS_KEY_ID",
        "valueFrom": {"secretKeyRef": {"name": "aws", "key": "id"}}}
    assert entries["S3_ENDPOINT"] == {"name": "S3_ENDPOINT",
                                      "value": "https://s3.eu-west-1.amazonaws.com"}
    kube_settings._check_model(container["env"], "list[V1EnvVar]", "env")  # pylint: disable=protected-access
  assert object_store.ObjectStore("gs://").replica_env() == {}


@pytest.mark.parametrize("uris, environ, needle", [
    ({"model_dir": "/minio/mlpipeline/x", "examples_uri": "s3://mlpipeline/e"}, {},
     "must be on one object store"),
    ({"a": "s3://one/x", "b": "s3://two/y"}, {}, "must be in one bucket"),
    ({"model_dir": "minio://mlpipeline/x"}, {}, "must be named s3://"),
    ({"model_dir": "s3:///x"}, {}, "no bucket"),
    ({"model_dir": "hdfs://nn/x"}, {}, "Received: 'hdfs://nn/x'"),
    ({"a": ROOT}, {"TFX_PARALLEL_S3_ENDPIONT": "http://m:9000"},
     "TFX_PARALLEL_S3_ENDPIONT: unknown object store setting. Did you mean "
     "TFX_PARALLEL_S3_ENDPOINT?"),
    ({"a": ROOT}, {"TFX_PARALLEL_S3_ENDPOINT": "minio-service.kubeflow:9000"},
     "TFX_PARALLEL_S3_ENDPOINT must be http://host[:port] or https://host[:port]. "
     "Received: 'minio-service.kubeflow:9000'"),
    ({"a": ROOT}, {"TFX_PARALLEL_S3_VERIFY_SSL": "yes"},
     "TFX_PARALLEL_S3_VERIFY_SSL must be 0 or 1. Received: 'yes'"),
    ({"a": ROOT}, {"TFX_PARALLEL_S3_SECRET": " "}, "TFX_PARALLEL_S3_SECRET is empty"),
    ({"a": "gs://b/x"}, {"TFX_PARALLEL_S3_REGION": "us-east-1"},
     "TFX_PARALLEL_S3_REGION: an S3 setting, but the job's files are on gs://"),
])
def test_a_misconfigured_store_is_named(uris, environ, needle):
  with pytest.raises(object_store.ObjectStoreError, match=re.escape(needle)):
    object_store.from_uris(uris, environ)


def test_the_base_model_is_one_of_the_files_a_replica_opens():
  """A warm start's replicas read the base model (run/train.py warm_start_from_base): it
  is checked with the job's other files, so a base model on another store is named
  before any pod."""
  base = f"s3://{BUCKET}/v2/artifacts/pipe/run-0/Trainer/model/Format-Serving"
  assert object_store.job_uris(_job(base_model_dir=base), f"{ROOT}/job.json")[
      "base_model_dir"] == base
  assert "base_model_dir" not in object_store.job_uris(_job(), f"{ROOT}/job.json")
  with pytest.raises(object_store.ObjectStoreError, match=r"base_model_dir='/pod/base'"):
    object_store.from_uris(object_store.job_uris(_job(base_model_dir="/pod/base"),
                                                 f"{ROOT}/job.json"), {})


def test_a_path_is_a_volume_the_replicas_mount_and_needs_nothing():
  store = object_store.from_uris({"a": "/mnt/shared/run/model", "b": "/mnt/shared/ex"}, {})
  assert store == object_store.ObjectStore("") and store.replica_env() == {}


def test_a_variable_the_pod_already_has_with_another_value_is_named():
  store = object_store.from_uris({"a": ROOT}, {})
  with pytest.raises(object_store.ObjectStoreError,
                     match=r"^S3_ENDPOINT is already set in this pod to another value"):
    object_store.process_env(store, ("minio", "minio123"),
                             {"S3_ENDPOINT": "http://elsewhere:9000"})
  with pytest.raises(object_store.ObjectStoreError,
                     match=r"^AWS_SECRET_ACCESS_KEY is already set .*<from the secret>"):
    object_store.process_env(store, ("minio", "minio123"), {"AWS_SECRET_ACCESS_KEY": "x"})
  assert object_store.process_env(store, ("minio", "minio123"), {}) == {
      "S3_ENDPOINT": "http://minio-service.kubeflow:9000", "AWS_REGION": "minio",
      "AWS_DEFAULT_REGION": "minio", "S3_VERIFY_SSL": "1", "AWS_ACCESS_KEY_ID": "minio",
      "AWS_SECRET_ACCESS_KEY": "minio123"}


# --- The entry point chooses the paths. ----------------------------------------------

def test_the_entry_point_chooses_remote_paths_for_a_multi_node_step():
  assert entrypoint.artifact_paths({}) == "local"
  assert entrypoint.artifact_paths({"TFX_PARALLEL_TFJOB_IMAGE": "img:1"}) == "remote"
  assert entrypoint.artifact_paths({"TFX_PARALLEL_ARTIFACT_PATHS": "remote"}) == "remote"
  with pytest.raises(entrypoint.EntrypointError,
                     match=r"^TFX_PARALLEL_ARTIFACT_PATHS=local: TFX_PARALLEL_TFJOB_IMAGE is "
                           r"set"):
    entrypoint.artifact_paths({"TFX_PARALLEL_TFJOB_IMAGE": "img:1",
                               "TFX_PARALLEL_ARTIFACT_PATHS": "local"})
  # Remote paths are TensorFlow's names: minio:// as s3://.
  executor_input = {"inputs": {"artifacts": {"examples": {"artifacts": [
      {"name": "1", "uri": "minio://mlpipeline/v2/artifacts/p/r/gen/examples",
       "type": {"schemaTitle": "tfx.Examples"}}]}}},
                    "outputs": {"artifacts": {"model": {"artifacts": [
                        {"name": "", "uri": "minio://mlpipeline/v2/artifacts/p/r/t/model",
                         "type": {"schemaTitle": "tfx.Model"}}]}},
                                "outputFile": "/tmp/out.json"}}
  adapted, _ = entrypoint.adapt(executor_input, None, None, True)
  assert entrypoint.artifact_uris(adapted) == {
      "inputs.examples[0]": "s3://mlpipeline/v2/artifacts/p/r/gen/examples",
      "outputs.model[0]": "s3://mlpipeline/v2/artifacts/p/r/t/model"}


def test_the_launchers_session_for_the_bucket_fills_the_settings_the_step_does_not_set():
  """The store_session_info KFP records with each artifact (the stand-in's copy of master's
  default MinIO session: SeaweedFS) names the endpoint, region and secret."""
  from kubeflow_launcher import MINIO_SESSION_INFO  # pylint: disable=g-import-not-at-top
  assert object_store.session_settings(MINIO_SESSION_INFO) == {
      "ENDPOINT": "http://seaweedfs.kubeflow:9000", "REGION": "minio",
      "SECRET": "mlpipeline-minio-artifact", "ACCESS_KEY_KEY": "accesskey",
      "SECRET_KEY_KEY": "secretkey"}
  aws = json.dumps({"Provider": "s3", "Params": {"endpoint": "s3.amazonaws.com",
                                                 "region": "eu-west-1", "disableSSL": "false",
                                                 "secretName": "aws-creds",
                                                 "accessKeyKey": "AWS_ACCESS_KEY_ID",
                                                 "secretKeyKey": "AWS_SECRET_ACCESS_KEY"}})
  assert object_store.session_settings(aws)["ENDPOINT"] == "https://s3.amazonaws.com"
  assert object_store.session_settings(json.dumps({"Provider": "gs", "Params": {}})) == {}
  assert object_store.session_settings("not json") == {}
  executor_input = {"inputs": {"artifacts": {"examples": {"artifacts": [
      {"uri": "minio://mlpipeline/x", "metadata": {"store_session_info": MINIO_SESSION_INFO}}]}}}}
  assert entrypoint.session_info(executor_input) == MINIO_SESSION_INFO
  with FakeCluster() as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(SECRET)
    environ = {"TFX_PARALLEL_TFJOB_NAMESPACE": "ns", "TFX_PARALLEL_S3_REGION": "us-east-1"}
    store = object_store.prepare_executor({"a": ROOT}, environ, cluster.api_client(),
                                          MINIO_SESSION_INFO)
  assert store.endpoint == "http://seaweedfs.kubeflow:9000"
  assert store.region == "us-east-1"  # The step's own setting wins.
  assert environ["S3_ENDPOINT"] == "http://seaweedfs.kubeflow:9000"
  assert environ["TFX_PARALLEL_S3_ENDPOINT"] == "http://seaweedfs.kubeflow:9000"  # For the check.
  assert (environ["AWS_ACCESS_KEY_ID"], environ["AWS_SECRET_ACCESS_KEY"]) == ("minio", "minio123")


def test_an_out_of_pod_ingest_gets_the_sessions_endpoint_and_the_secrets_keys_at_run_time(
    capsys):
  """Issue #48 item 6: Beam's S3 options for a runner whose workers write the step's
  minio:// output themselves come from the store session KFP recorded with the input
  (SeaweedFS's endpoint on 2.16+) and from KFP's secret, read when the step runs; the
  step's own --s3_* args win; the compiled package holds none of it."""
  from kubeflow_launcher import MINIO_SESSION_INFO  # pylint: disable=g-import-not-at-top
  executor_input = {
      "inputs": {"artifacts": {"data": {"artifacts": [
          {"uri": "minio://mlpipeline/v2/in", "metadata": {
              "store_session_info": MINIO_SESSION_INFO}}]}}},
      "outputs": {"artifacts": {"examples": {"artifacts": [
          {"uri": "minio://mlpipeline/v2/artifacts/p/run-1/Gen/salt/examples"}]}}}}
  with FakeCluster() as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(SECRET)
    environ = {"TFX_PARALLEL_TFJOB_NAMESPACE": "ns"}
    args = entrypoint.beam_s3_args(executor_input, ["--runner=FlinkRunner"], environ,
                                   cluster.api_client())
    assert args == ["--s3_endpoint_url=http://seaweedfs.kubeflow:9000",
                    "--s3_access_key_id=minio", "--s3_secret_access_key=minio123",
                    "--s3_region_name=minio"]
    assert entrypoint.beam_s3_args(executor_input, ["--s3_endpoint_url=http://x:1"], environ,
                                   cluster.api_client()) == []  # The step's own.
    gcs = json.loads(json.dumps(executor_input).replace("minio://", "gs://"))
    assert entrypoint.beam_s3_args(gcs, [], environ, cluster.api_client()) == []
    del cluster.secrets[("ns", "mlpipeline-minio-artifact")]  # E.g. IRSA on AWS: said.
    assert entrypoint.beam_s3_args(executor_input, [], environ, cluster.api_client()) == []
  assert "secret ns/mlpipeline-minio-artifact (TFX_PARALLEL_S3_SECRET) does not exist" in \
      capsys.readouterr().err


def test_an_ingest_without_inputs_gets_the_releases_store_and_an_s3_root_beams_defaults(
    monkeypatch, capsys):
  """The ingest (PartitionedExampleGen, no input artifact) has no store session: a
  minio:// root gets KFP's store of the release: minio-service.kubeflow:9000 where it
  resolves (up to 2.15, Kubeflow 1.11 included), else seaweedfs.kubeflow:9000 (2.16+:
  backend/src/v2/objectstore/config.go 2.16.0:29; no minio-service there); an s3:// root that
  nothing places elsewhere is left to Beam's AWS defaults, as KFP's launcher's fromEnv
  session (backend/src/v2/config/s3.go 2.16.0:87-96)."""
  ingest = {"outputs": {"artifacts": {"examples": {"artifacts": [
      {"uri": "minio://mlpipeline/v2/artifacts/p/run-1/Gen/salt/examples"}]}}}}
  services = set()
  monkeypatch.setattr(object_store, "_resolves", lambda host: host in services)
  with FakeCluster() as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(SECRET)
    environ = {"TFX_PARALLEL_TFJOB_NAMESPACE": "ns"}
    for names, endpoint in [
        ({"seaweedfs.kubeflow"}, "seaweedfs.kubeflow:9000"),  # KFP 2.16+ (Kubeflow 26.03).
        # Kubeflow 1.11 (KFP 2.15): both names; its seaweedfs Service has no port 9000.
        ({"seaweedfs.kubeflow", "minio-service.kubeflow"}, "minio-service.kubeflow:9000"),
        ({"minio-service.kubeflow"}, "minio-service.kubeflow:9000"),  # KFP <= 2.15, MinIO.
        (set(), "minio-service.kubeflow:9000")]:
      services.clear()
      services.update(names)
      args = entrypoint.beam_s3_args(ingest, ["--runner=FlinkRunner"], environ,
                                     cluster.api_client())
      assert args[0] == f"--s3_endpoint_url=http://{endpoint}", names
    aws = json.loads(json.dumps(ingest).replace("minio://mlpipeline", "s3://my-bucket"))
    assert entrypoint.beam_s3_args(aws, [], environ, cluster.api_client()) == []
    assert "left to Beam's defaults" in capsys.readouterr().err
    environ["TFX_PARALLEL_S3_ENDPOINT"] = "http://minio.other:9000"  # Named: used.
    assert entrypoint.beam_s3_args(aws, [], environ, cluster.api_client())[0] == \
        "--s3_endpoint_url=http://minio.other:9000"


def test_credentials_the_store_refuses_fail_the_check_before_the_job_file_and_any_pod(moto):
  """The executor's check with the secret the replicas would mount (its secret key
  wrong): the probe through TensorFlow's S3 filesystem is refused, and the step fails
  naming the endpoint and the secret; no job is created, no job file written."""
  endpoint, s3, secret = moto
  with FakeCluster() as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(secret, secretkey="wrong")
    answer = _child({"do": "run", "job": dataclasses.asdict(_job()), "host": cluster.host,
                     "settings": {"image": "img:1", "namespace": "ns", "worker_replicas": 2},
                     "environ": _store_environ(endpoint)})
    assert not _posted_jobs(cluster) and not cluster.pods
  assert answer["error"] == "ObjectStoreError", answer
  assert f"through the S3 API at {endpoint} (TFX_PARALLEL_S3_ENDPOINT)" in answer["message"]
  assert "secret 'mlpipeline-minio-artifact' (TFX_PARALLEL_S3_SECRET)" in answer["message"]
  assert "SignatureDoesNotMatch" in answer["message"]
  assert not _keys(s3, "v2/artifacts/pipe/run-1/_tfjobs")


@pytest.mark.slow
def test_the_entry_point_gives_a_multi_node_step_remote_s3_paths_it_can_read(tmp_path, moto):
  """The container's entry point (a child process, as in the pod) with only
  TFX_PARALLEL_TFJOB_IMAGE set: the executor gets s3:// for the minio:// artifacts, the
  secret named by the launcher's session (store_session_info) is read from the API
  server of the kubeconfig (tests/fake_kube.py), and TensorFlow reads the input and
  writes the output in the bucket; the executor output names minio:// again."""
  from kubeflow_launcher import MINIO_SESSION_INFO  # pylint: disable=g-import-not-at-top
  endpoint, s3, secret = moto
  s3.put_object(Bucket=BUCKET, Key="v2/artifacts/p/r/gen/examples/data.txt", Body=b"rows")
  output_file = str(tmp_path / "output_metadata.json")
  executor_input = {
      "inputs": {"artifacts": {"examples": {"artifacts": [{
          "name": "7", "uri": f"minio://{BUCKET}/v2/artifacts/p/r/gen/examples",
          "type": {"schemaTitle": "tfx.Examples"},
          "metadata": {"store_session_info": MINIO_SESSION_INFO}}]}}},
      "outputs": {"artifacts": {"model": {"artifacts": [{
          "name": "", "uri": f"minio://{BUCKET}/v2/artifacts/p/r/train/model",
          "type": {"schemaTitle": "tfx.Model"}}]}}, "outputFile": output_file}}
  with FakeCluster() as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(secret)
    kubeconfig = _kubeconfig(tmp_path, cluster.host)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    env.update(KUBECONFIG=str(kubeconfig), TFX_PARALLEL_TFJOB_IMAGE="img:1",
               TFX_PARALLEL_TFJOB_NAMESPACE="ns", TFX_PARALLEL_S3_ENDPOINT=endpoint,
               PYTHONPATH=os.pathsep.join(filter(None, [HERE, env.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_parallel.kubeflow.entrypoint", "--executor_class_path",
         "object_store_child.ReadWriteExecutor", "--json_serialized_invocation_args",
         json.dumps(executor_input)], env=env, capture_output=True, text=True, timeout=600,
        cwd=str(tmp_path))
    gets = [p for m, p, _, _ in cluster.requests if m == "GET"]
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  assert gets == ["/api/v1/namespaces/ns/secrets/mlpipeline-minio-artifact"]
  written = json.loads(s3.get_object(Bucket=BUCKET, Key="v2/artifacts/p/r/train/model/"
                                     "model.txt")["Body"].read())
  assert written == {"read": "rows",
                     "examples": f"s3://{BUCKET}/v2/artifacts/p/r/gen/examples",
                     "model": f"s3://{BUCKET}/v2/artifacts/p/r/train/model"}
  with open(output_file) as f:
    output = json.load(f)
  assert output["artifacts"]["model"]["artifacts"][0]["uri"] == \
      f"minio://{BUCKET}/v2/artifacts/p/r/train/model"


# --- Credentials from the secret, before any pod (fake API server; no TensorFlow). -----

def _settings(**overrides):
  fields = dict(image="img:1", namespace="ns", worker_replicas=2, max_restarts=3,
                pending_grace_seconds=30.0, timeout_seconds=600.0)
  fields.update(overrides)
  return kube_settings.TFJobSettings(**fields)


def _posted_jobs(cluster):
  return [p for m, p, _, _ in cluster.requests
          if m == "POST" and p.endswith(("/tfjobs", "/trainjobs"))]


def test_credentials_come_from_the_secret_in_the_jobs_namespace():
  with FakeCluster() as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(SECRET)
    store = object_store.from_uris({"a": ROOT}, {})
    assert object_store.read_credentials(store, "ns", cluster.api_client()) == \
        ("minio", "minio123")
    with pytest.raises(object_store.ObjectStoreError,
                       match=r"^secret other/mlpipeline-minio-artifact "
                             r"\(TFX_PARALLEL_S3_SECRET\) does not exist"):
      object_store.read_credentials(store, "other", cluster.api_client())
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = {"accesskey": "minio"}
    with pytest.raises(object_store.ObjectStoreError,
                       match=r"has no key 'secretkey' \(TFX_PARALLEL_S3_SECRET_KEY_KEY\)"):
      object_store.read_credentials(store, "ns", cluster.api_client())
    cluster.denied.add(("get", "", "secrets"))
    with pytest.raises(object_store.ObjectStoreError,
                       match=r"may not `get secrets` in ns"):
      object_store.read_credentials(store, "ns", cluster.api_client())


@pytest.mark.parametrize("environ, secrets, needle", [
    ({}, {}, "secret ns/mlpipeline-minio-artifact (TFX_PARALLEL_S3_SECRET) does not exist"),
    ({"TFX_PARALLEL_S3_ENDPOINT": "9000"}, {("ns", "mlpipeline-minio-artifact"): SECRET},
     "TFX_PARALLEL_S3_ENDPOINT must be"),
    ({"AWS_ACCESS_KEY_ID": "someone-else"}, {("ns", "mlpipeline-minio-artifact"): SECRET},
     "AWS_ACCESS_KEY_ID is already set in this pod to another value"),
])
def test_a_misconfigured_store_fails_before_the_job_file_and_any_pod(
    tmp_path, monkeypatch, environ, secrets, needle):
  for name, value in environ.items():
    monkeypatch.setenv(name, value)
  with FakeCluster() as cluster:
    cluster.secrets.update(secrets)
    with pytest.raises(object_store.ObjectStoreError, match=re.escape(needle)):
      kube_launch.run(_job(), _settings(), client=kube_client.TFJobClient(cluster.api_client()),
                poll_seconds=0)
    assert not _posted_jobs(cluster) and not cluster.pods
  assert "S3_ENDPOINT" not in os.environ  # Nothing of the failed set-up stays.


def test_a_local_volume_path_job_still_runs_without_store_settings(tmp_path):
  """The replicas mount the same volume (the fake's pods run on this machine)."""
  root = str(tmp_path / "DistributedTrainer")
  job = _job(root=root, examples_uri=str(tmp_path / "ex"))
  with FakeCluster() as cluster:
    result = kube_launch.run(job, _settings(), client=kube_client.TFJobClient(cluster.api_client()),
                       poll_seconds=0)
    posted = next(b for m, p, _, b in cluster.requests if m == "POST" and
                  p.endswith("/tfjobs"))
  assert result.succeeded, result.message
  env = posted["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
  assert not {e["name"] for e in env} & {"S3_ENDPOINT", "AWS_ACCESS_KEY_ID"}


# --- A real S3 API: moto's server. ---------------------------------------------------

@pytest.fixture(scope="module")
def moto():
  """moto's S3 server with KFP's bucket, checking every request's signature: after the
  first INITIAL_NO_AUTH_ACTION_COUNT requests (moto's switch for IAM authentication,
  moto/core/config.py), which create an IAM user allowed s3:* and its access key. Yields
  (endpoint, boto3 S3 client of that user, {"accesskey": id, "secretkey": key}: the
  secret's values)."""
  port = free_port()
  endpoint = f"http://127.0.0.1:{port}"
  log = tempfile.NamedTemporaryFile(prefix="tfx-parallel-moto-", suffix=".log", delete=False)  # pylint: disable=consider-using-with
  process = subprocess.Popen([os.path.join(BIN, "moto_server"), "-H", "127.0.0.1", "-p",
                              str(port)], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True,
                             env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="3"))
  try:
    for _ in range(100):
      with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
          break
      time.sleep(0.2)
    admin = {"endpoint_url": endpoint, "aws_access_key_id": "admin",
             "aws_secret_access_key": "admin", "region_name": "us-east-1"}
    iam = boto3.client("iam", **admin)
    iam.create_user(UserName="kfp")
    iam.put_user_policy(UserName="kfp", PolicyName="s3", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="kfp")["AccessKey"]
    secret = {"accesskey": key["AccessKeyId"], "secretkey": key["SecretAccessKey"]}
    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=secret["accesskey"],
                      aws_secret_access_key=secret["secretkey"], region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    yield endpoint, s3, secret
  finally:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=60)
    os.unlink(log.name)


def _child(request, timeout=600):
  proc = subprocess.run([sys.executable, os.path.join(HERE, "object_store_child.py")],
                        input=json.dumps(request), capture_output=True, text=True,
                        timeout=timeout, cwd=HERE)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _store_environ(endpoint):
  """The trainer step's settings for moto (the endpoint and region; the rest default)."""
  return {"TFX_PARALLEL_S3_ENDPOINT": endpoint, "TFX_PARALLEL_S3_REGION": "us-east-1"}


def _keys(s3, prefix):
  return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
                .get("Contents", []))


def test_the_entry_points_set_up_reads_s3_and_the_probe_names_a_missing_bucket(moto):
  """In a child process as the step's: object_store.prepare_executor reads KFP's secret
  from the job's namespace (fake API server), sets the S3 variables and registers the
  s3 filesystem; TensorFlow then reads an object the launcher side put there, and the
  probe writes, reads back and deletes, or names what failed."""
  endpoint, s3, secret = moto
  s3.put_object(Bucket=BUCKET, Key="v2/in/examples.txt", Body=b"rows")
  with FakeCluster() as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(secret)
    answer = _child({"do": "probe", "host": cluster.host,
                     "read": f"s3://{BUCKET}/v2/in/examples.txt",
                     "environ": dict(_store_environ(endpoint), TFX_PARALLEL_TFJOB_NAMESPACE="ns"),
                     "directories": [f"s3://{BUCKET}/v2/probe", "s3://no-such-bucket/v2"]})
    gets = [p for m, p, _, _ in cluster.requests if m == "GET"]
  assert gets == ["/api/v1/namespaces/ns/secrets/mlpipeline-minio-artifact"]
  assert answer["ok"]["read"] == "rows"
  ok, missing = answer["ok"]["probes"]
  assert ok == {"ok": True}
  assert not _keys(s3, "v2/probe")  # Deleted again.
  assert missing["error"] == "ObjectStoreError"
  assert missing["message"].startswith(
      "The multi-node job's replicas could not use 's3://no-such-bucket/v2': writing and "
      f"reading 's3://no-such-bucket/v2/_probe-")
  assert f"the S3 API at {endpoint} (TFX_PARALLEL_S3_ENDPOINT), region 'us-east-1'" in \
      missing["message"]
  assert "NoSuchBucket" in missing["message"]


@pytest.mark.slow
def test_two_real_replicas_read_and_write_the_default_object_store(tmp_path, moto):
  """The executor (a child process: tfjob.run against the fake API server) finds the
  job's files on s3://, reads the credentials from KFP's secret, probes the bucket and
  writes the job file there; the fake kubelet runs both nodes' replica entry point for
  real with the env the TrainJob names (the credentials resolved from the secret by
  secretKeyRef); MultiWorkerMirroredStrategy trains across them, reading the Examples
  from s3:// and writing checkpoints, history and the SavedModel there."""
  import trainer_util  # pylint: disable=g-import-not-at-top  # Imports TensorFlow.
  from fake_kube import Run  # pylint: disable=g-import-not-at-top
  from test_kubeflow_trainjob import _trainer_v2  # pylint: disable=g-import-not-at-top
  endpoint, s3, secret = moto
  local = str(tmp_path / "examples")
  feature_keys, _, rows = trainer_util.write_examples(local, rows=128, eval_rows=32)
  for directory, _, files in os.walk(local):
    for name in files:
      path = os.path.join(directory, name)
      s3.upload_file(path, BUCKET, "v2/ex/" + os.path.relpath(path, local))
  job = trainer_util.job_dict(ROOT, f"s3://{BUCKET}/v2/ex", feature_keys, rows,
                              layout="multi_worker", steps=10, epochs=1, checkpoint_every=5,
                              log_every=5, batch_size=32)
  name = kube_manifest.job_name(job["checkpoint_dir"])
  with _trainer_v2(FakeCluster({"node-0": [Run()], "node-1": [Run()]},
                               local_network=True)) as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(secret)
    answer = _child({"do": "run", "job": job, "host": cluster.host,
                     "settings": {"image": "img:1", "namespace": "ns", "worker_replicas": 2,
                                  "timeout_seconds": 900.0},
                     "environ": {"TFX_PARALLEL_S3_ENDPOINT": endpoint,
                                 "TFX_PARALLEL_S3_REGION": "us-east-1"}})
    posted = next(b for m, p, q, b in cluster.requests if m == "POST" and
                  p.endswith("/trainjobs") and not q.get("dryRun"))
  assert "ok" in answer, answer
  result = answer["ok"]
  assert result["state"] == kube_watch.SUCCEEDED, (result["message"], result["logs"])
  assert result["restarts"] == 0  # Each replica exited 0, not tensorflow-io's 134.
  env = {e["name"]: e for e in posted["spec"]["trainer"]["env"]}
  assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
      "secretKeyRef": {"name": "mlpipeline-minio-artifact", "key": "secretkey"}}
  assert env["S3_ENDPOINT"]["value"] == endpoint
  assert secret["secretkey"] not in json.dumps(posted)  # Never in the manifest.
  assert len(result["logs"]) == 2 and all("replicas 2" in text
                                         for text in result["logs"].values())
  history = json.loads(s3.get_object(Bucket=BUCKET, Key=ROOT.split(f"{BUCKET}/", 1)[1] +
                                     "/history/history.json")["Body"].read())
  assert history["records"][-1]["step"] == 10
  assert history["replicas"] == 2, history["replicas"]  # One strategy over both processes.
  prefix = ROOT.split(f"{BUCKET}/", 1)[1]
  keys = _keys(s3, prefix)
  assert f"{prefix}/model/Format-Serving/saved_model.pb" in keys
  jobs = "v2/artifacts/pipe/run-1/_tfjobs"
  assert f"{jobs}/{name}.json" in _keys(s3, jobs)
  assert not [k for k in keys if k.endswith("/")]  # No "directory" objects (#13476).
  assert not [k for k in _keys(s3, "v2") if "_probe-" in k]


@pytest.mark.slow
def test_the_trainer_step_trains_on_s3_through_the_reference_and_downloads_only_it(
    tmp_path, moto):
  """The whole remote path of a multi-node trainer *step*: the compiled package's
  PartitionedExampleGen and DistributedTrainer run by the launcher stand-in
  (tests/kubeflow_launcher.py) on moto's S3. The trainer step has
  TFX_PARALLEL_TFJOB_IMAGE set, so its `examples` input is the reference
  (`examples_ref`, kubeflow/split_outputs.py): its launcher downloads the reference,
  not the Examples; the entry point dereferences it to s3:// and sets up the store from
  KFP's secret (fake API server of the kubeconfig); the executor's own scans of the
  Examples read s3://; two real replica processes (tests/fake_kube.py, Trainer v2)
  train on s3:// and write the model there, which the step's output names."""
  from fake_kube import Run  # pylint: disable=g-import-not-at-top
  from kubeflow_launcher import Launcher  # pylint: disable=g-import-not-at-top
  from kubeflow_util import compile_mapping  # pylint: disable=g-import-not-at-top
  from test_kubeflow_launcher import _small_config  # pylint: disable=g-import-not-at-top
  from test_kubeflow_trainjob import _trainer_v2  # pylint: disable=g-import-not-at-top
  endpoint, s3, secret = moto
  with _trainer_v2(FakeCluster({"node-0": [Run()], "node-1": [Run()]},
                               local_network=True)) as cluster:
    cluster.secrets[("ns", "mlpipeline-minio-artifact")] = dict(secret)
    kubeconfig = _kubeconfig(tmp_path, cluster.host)
    data = _small_config()
    data["pipeline"]["example_gen"] = {"rows": 256, "num_features": 3}
    data["pipeline"]["trainer"] = {"layout": "multi_worker", "workers": 2, "steps": 6,
                                   "epochs": 1, "batch_size": 32, "log_every": 3,
                                   "checkpoint_every": 3}
    data["components"]["DistributedTrainer"] = dict(
        data["components"].get("DistributedTrainer") or {}, env={
            "TFX_PARALLEL_TFJOB_IMAGE": "img:1", "TFX_PARALLEL_TFJOB_NAMESPACE": "ns",
            "TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS": "900",
            "KUBECONFIG": str(kubeconfig), **_store_environ(endpoint)})
    package = compile_mapping(data)
    workdir = str(tmp_path / "launcher")
    launcher = Launcher(package.pipeline_spec, workdir, f"minio://{BUCKET}/v2/artifacts",
                        platform_spec=package.platform_spec, s3=s3)
    launcher.run_task("PartitionedExampleGen")
    output = launcher.run_task("DistributedTrainer")
    posted = [b for m, p, q, b in cluster.requests
              if m == "POST" and p.endswith("/trainjobs") and not q.get("dryRun")]
  examples = launcher.mlmd["PartitionedExampleGen"]["examples"]["uri"]
  reference = launcher.mlmd["PartitionedExampleGen"]["examples_ref"]["uri"]
  examples_bytes = sum(o["Size"] for o in s3.list_objects_v2(
      Bucket=BUCKET, Prefix=examples.split(f"{BUCKET}/", 1)[1] + "/")["Contents"])
  reference_bytes = sum(o["Size"] for o in s3.list_objects_v2(
      Bucket=BUCKET, Prefix=reference.split(f"{BUCKET}/", 1)[1])["Contents"])
  # The trainer step's launcher downloaded the reference only, not the Examples.
  assert launcher.downloaded["DistributedTrainer"] == reference_bytes < 1000 < examples_bytes
  with open(os.path.join(workdir, "DistributedTrainer.log")) as f:
    log = f.read()
  assert len(posted) == 1, log[-5000:]  # One TrainJob of the two replicas.
  assert "Remote artifact paths" in log
  # The pod holds no copy of the Examples: the executor's scans (statistics, label and
  # column scans) and its input read them at s3:// through the reference.
  pod = os.path.join(workdir, "pods", "run-1", "DistributedTrainer")
  assert not os.path.exists(os.path.join(pod, "minio", BUCKET,
                                         examples.split(f"{BUCKET}/", 1)[1]))
  env = {e["name"]: e for e in posted[0]["spec"]["trainer"]["env"]}
  assert env["S3_ENDPOINT"]["value"] == endpoint
  assert secret["secretkey"] not in json.dumps(posted)
  # ML Metadata: one Examples artifact per set of files (the reference has its own type);
  # the trainer resolved the reference over the gRPC API (METADATA_GRPC_SERVICE_*), recorded
  # the Examples' id on it and reads the Examples themselves in its lineage.
  from tfx_parallel.kubeflow import split_outputs  # pylint: disable=g-import-not-at-top
  store = launcher.metadata.store
  ids = {k: a["id"] for k, a in launcher.mlmd["PartitionedExampleGen"].items()}
  assert store.get_artifact_types_by_id([store.get_artifacts_by_id([ids["examples_ref"]])[
      0].type_id])[0].name == "tfx_parallel.ExamplesRef"
  assert sorted(a.uri for a in store.get_artifacts_by_type("tfx.Examples")) == sorted(
      [examples, launcher.mlmd["PartitionedExampleGen"]["eval_examples"]["uri"]])
  [ref] = store.get_artifacts_by_id([ids["examples_ref"]])
  assert ref.custom_properties[split_outputs.REF_TARGET_ID].int_value == ids["examples"]
  [trainer] = [x for x in store.get_executions() if
               x.custom_properties["task_name"].string_value == "DistributedTrainer"]
  assert sorted(e.artifact_id for e in store.get_events_by_execution_ids([trainer.id])
                if e.type == e.INPUT) == sorted([ids["examples"], ids["examples_ref"]])
  model = output["artifacts"]["model"]["artifacts"][0]["uri"]
  assert model.startswith(f"minio://{BUCKET}/v2/artifacts/")  # As KFP records it.
  prefix = model.split(f"{BUCKET}/", 1)[1]
  assert f"{prefix}/Format-Serving/saved_model.pb" in _keys(s3, prefix), _keys(s3, prefix)
  # Nothing of the model went through the pod's local disk.
  assert not os.path.exists(os.path.join(workdir, "pods", "run-1", "DistributedTrainer",
                                         "minio", BUCKET, prefix, "Format-Serving"))


@pytest.mark.slow
def test_a_preempted_trainer_resumes_from_the_default_store_on_retry(tmp_path, moto):
  """Issue #48 item 5: on KFP's default minio:// root, with no volume, the trainer step
  keeps its checkpoints under the task's root on the store (as s3://, through
  tensorflow-io, the keys read from KFP's secret at run time); its pod is SIGKILLed once a
  checkpoint is committed there; KFP's retry (a fresh pod, the same ExecutorInput)
  resumes from it instead of step 0."""
  from kubeflow_launcher import Launcher  # pylint: disable=g-import-not-at-top
  from kubeflow_util import compile_mapping  # pylint: disable=g-import-not-at-top
  from test_kubeflow_launcher import _small_config  # pylint: disable=g-import-not-at-top
  endpoint, s3, secret = moto
  run_prefix = "v2/artifacts/tfx-parallel-fixture/run-9/DistributedTrainer/_checkpoints/"

  def committed():
    return [k for k in _keys(s3, run_prefix) if k.endswith("/checkpoint")]

  def preempt(task, attempt, pod):  # pylint: disable=unused-argument
    return task == "DistributedTrainer" and attempt == 0 and bool(committed())

  with FakeCluster() as cluster:  # The API server of KFP's secret.
    cluster.secrets[("default", "mlpipeline-minio-artifact")] = dict(secret)
    data = _small_config()
    data["pipeline"]["trainer"].update({"epochs": 4, "checkpoint_every": 20, "log_every": 20})
    data["components"]["DistributedTrainer"] = {
        "retry": {"max_retry_count": 1},
        "env": {"KUBECONFIG": str(_kubeconfig(tmp_path, cluster.host)),
                **_store_environ(endpoint)}}
    package = compile_mapping(data)
    assert package.notes == ()  # A durable place exists: no note.
    launcher = Launcher(package.pipeline_spec, str(tmp_path / "launcher"),
                        f"minio://{BUCKET}/v2/artifacts", run_id="run-9",
                        platform_spec=package.platform_spec, s3=s3, interrupt=preempt)
    launcher.run_task("PartitionedExampleGen")
    launcher.run_task("DistributedTrainer")
  assert launcher.attempts["DistributedTrainer"] == [-9, 0]
  with open(tmp_path / "launcher" / "DistributedTrainer-retry-1.log") as f:
    log = f.read()
  root = f"s3://{BUCKET}/{run_prefix}"
  assert f"[trainer] resuming from {root}" in log, log[-5000:]
  history = json.loads(s3.get_object(Bucket=BUCKET, Key=launcher.mlmd["DistributedTrainer"][
      "history"]["uri"].split(f"{BUCKET}/", 1)[1] + "/history.json")["Body"].read())
  assert 0 < history["resumed_from_step"] < history["total_steps"]
  assert secret["secretkey"] not in json.dumps(package.pipeline_spec)
