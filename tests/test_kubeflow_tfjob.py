"""Multi-node training as a TFJob: the manifest, env opt-in, and the client over HTTP.

The client tests talk to a tiny HTTP server in a thread that answers like the
Kubernetes API, through the real `kubernetes` client: a real HTTP round trip.
"""
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from tfx_parallel.components.distributed_trainer import tfjob
from tfx_parallel.components.distributed_trainer.train import Job

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _spec(**overrides):
  fields = dict(name="train-1", namespace="kubeflow-user", image="registry.example.com/t:1",
                command=("python", "-m", "m", "--job", "gs://b/job.json"), worker_replicas=3,
                gpus_per_replica=2, resources={"requests": {"cpu": "4", "memory": "16G"}},
                node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
                tolerations=(TOLERATION,), env={"TF_USE_LEGACY_KERAS": "1"})
  fields.update(overrides)
  return tfjob.TFJobSpec(**fields)


# --- The manifest: a pure function. --------------------------------------------------

def test_manifest_has_replicas_gpus_image_command_restart_policy_and_placement():
  body = tfjob.manifest(_spec())
  assert body["apiVersion"] == "kubeflow.org/v1" and body["kind"] == "TFJob"
  assert body["metadata"]["name"] == "train-1"
  assert body["metadata"]["namespace"] == "kubeflow-user"
  replicas = body["spec"]["tfReplicaSpecs"]
  assert list(replicas) == ["Worker"]
  worker = replicas["Worker"]
  assert worker["replicas"] == 3 and worker["restartPolicy"] == "ExitCode"
  pod = worker["template"]["spec"]
  assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
  assert pod["tolerations"] == [TOLERATION]
  (container,) = pod["containers"]
  assert container["name"] == "tensorflow"  # The operator injects TF_CONFIG only here.
  assert container["image"] == "registry.example.com/t:1"
  assert container["command"] == ["python", "-m", "m", "--job", "gs://b/job.json"]
  assert container["resources"] == {"requests": {"cpu": "4", "memory": "16G"},
                                    "limits": {"nvidia.com/gpu": "2"}}
  assert container["env"] == [{"name": "TF_USE_LEGACY_KERAS", "value": "1"}]
  assert not any(e["name"] == "TF_CONFIG" for e in container["env"])
  json.dumps(body)  # A plain JSON document.


def test_manifest_chief_and_cpu_only():
  body = tfjob.manifest(_spec(chief_replicas=1, gpus_per_replica=0, resources={},
                              node_selector={}, tolerations=()))
  replicas = body["spec"]["tfReplicaSpecs"]
  assert replicas["Chief"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
  for replica in replicas.values():
    pod = replica["template"]["spec"]
    assert "resources" not in pod["containers"][0]
    assert "nodeSelector" not in pod and "tolerations" not in pod


@pytest.mark.parametrize("overrides,needle", [
    ({"name": "Train_1"}, "name="), ({"name": "x" * 64}, "name="),
    ({"worker_replicas": 0}, "worker_replicas=0"), ({"chief_replicas": 2}, "chief_replicas=2"),
    ({"image": ""}, "image=''"), ({"gpus_per_replica": -1}, "-1"),
])
def test_manifest_rejects_bad_specs_echoing_the_value(overrides, needle):
  with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
    tfjob.manifest(_spec(**overrides))


def test_job_state_reads_the_conditions():
  running = {"status": {"conditions": [{"type": "Created", "status": "True"},
                                       {"type": "Running", "status": "True"}]}}
  assert tfjob.job_state(running) == (None, "")
  assert tfjob.job_state({}) == (None, "")
  done = {"status": {"conditions": [{"type": "Running", "status": "False"},
                                    {"type": "Succeeded", "status": "True", "message": "ok"}]}}
  assert tfjob.job_state(done) == ("Succeeded", "ok")
  failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "x"}]}}
  assert tfjob.job_state(failed) == ("Failed", "x")


# --- Opt-in from the environment. ----------------------------------------------------

def test_settings_only_for_multi_worker_with_an_image():
  env = {tfjob.ENV_IMAGE: "img:1"}
  assert tfjob.settings_from_env({}, "multi_worker", 2) is None
  assert tfjob.settings_from_env(env, "mirrored", 2) is None
  settings = tfjob.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_NAMESPACE="ns"),
                                     "multi_worker", 2)
  assert (settings.image, settings.namespace, settings.worker_replicas,
          settings.gpus_per_replica) == ("img:1", "ns", 2, 0)


def test_settings_parse_every_variable_and_name_a_bad_one():
  env = {tfjob.ENV_IMAGE: "img:1", "TFX_PARALLEL_TFJOB_WORKERS": "4",
         "TFX_PARALLEL_TFJOB_CHIEF": "1", "TFX_PARALLEL_TFJOB_GPUS": "8",
         "TFX_PARALLEL_TFJOB_NODE_SELECTOR": '{"pool": "gpu"}',
         "TFX_PARALLEL_TFJOB_TOLERATIONS": json.dumps([TOLERATION]),
         "TFX_PARALLEL_TFJOB_RESOURCES": '{"limits": {"memory": "64G"}}',
         "TFX_PARALLEL_TFJOB_NAMESPACE": "ns", "TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS": "60"}
  s = tfjob.settings_from_env(env, "multi_worker", 2)
  assert (s.worker_replicas, s.chief_replicas, s.gpus_per_replica) == (4, 1, 8)
  assert s.node_selector == {"pool": "gpu"} and s.tolerations == (TOLERATION,)
  assert s.resources == {"limits": {"memory": "64G"}} and s.timeout_seconds == 60.0
  with pytest.raises(ValueError, match="TFX_PARALLEL_TFJOB_NODE_SELECTOR"):
    tfjob.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_NODE_SELECTOR="[1]"),
                            "multi_worker", 2)
  with pytest.raises(ValueError, match="TFX_PARALLEL_TFJOB_GPUS: cannot parse 'two'"):
    tfjob.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_GPUS="two"), "multi_worker", 2)


# --- The client, over HTTP against a fake Kubernetes API server. ----------------------

class FakeKubernetes:
  """Answers the few Kubernetes API calls TFJobClient makes; records every request."""

  def __init__(self, states):
    self.states = list(states)  # Condition type per GET of the TFJob; the last repeats.
    self.requests = []
    self.created = None
    fake = self

    class Handler(BaseHTTPRequestHandler):

      def log_message(self, *args):  # Quiet.
        pass

      def _reply(self, code, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

      def _handle(self):
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        fake.requests.append((self.command, url.path, parse_qs(url.query), body))
        parts = url.path.strip("/").split("/")
        if parts[:3] == ["apis", "kubeflow.org", "v1"] and parts[5] == "tfjobs":
          if self.command == "POST":
            fake.created = body
            return self._reply(201, body)
          if self.command == "GET":
            state = fake.states.pop(0) if len(fake.states) > 1 else fake.states[0]
            job = dict(fake.created or {})
            job["status"] = {"conditions": [{"type": state, "status": "True",
                                             "message": f"TFJob is {state}"}]}
            return self._reply(200, job)
          if self.command == "DELETE":
            return self._reply(200, {"kind": "Status", "status": "Success"})
        if parts[:2] == ["api", "v1"] and parts[4] == "pods":
          if len(parts) == 5:
            items = [{"metadata": {"name": f"{fake.created['metadata']['name']}-worker-{i}"}}
                     for i in range(2)]
            return self._reply(200, {"kind": "PodList", "apiVersion": "v1",
                                     "metadata": {}, "items": items})
          if len(parts) == 7 and parts[6] == "log":
            return self._reply(200, f"[train] log of {parts[5]}\n", "text/plain")
        return self._reply(404, {"kind": "Status", "code": 404})

      do_GET = do_POST = do_DELETE = _handle

    self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

  def __enter__(self):
    self.thread.start()
    return self

  def __exit__(self, *exc):
    self.server.shutdown()
    self.server.server_close()

  def client(self):
    from kubernetes import client  # pylint: disable=g-import-not-at-top
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{self.server.server_address[1]}"
    return tfjob.TFJobClient(client.ApiClient(configuration))


def _job(tmp_path):
  component_root = tmp_path / "DistributedTrainer"
  return Job(config={"layout": "multi_worker"}, examples_uri=str(tmp_path / "examples"),
             feature_keys=["x0"], label_key="y", train_rows=10,
             model_dir=str(component_root / "model" / "1" / "Format-Serving"),
             model_run_dir=str(component_root / "model_run" / "1"),
             history_dir=str(component_root / "history" / "1"),
             checkpoint_dir=str(component_root / "_checkpoints" / "abc"), num_shards=2)


def test_client_waits_for_the_conditions_and_reads_the_logs():
  with FakeKubernetes(["Created", "Running", "Succeeded"]) as k8s:
    client = k8s.client()
    client.create(tfjob.manifest(_spec()))
    result = client.wait("train-1", "kubeflow-user", timeout_seconds=30, poll_seconds=0)
  assert result.succeeded and result.message == "TFJob is Succeeded"
  assert result.logs == {"train-1-worker-0": "[train] log of train-1-worker-0\n",
                         "train-1-worker-1": "[train] log of train-1-worker-1\n"}
  methods = [(m, p) for m, p, _, _ in k8s.requests]
  assert methods[0] == ("POST", "/apis/kubeflow.org/v1/namespaces/kubeflow-user/tfjobs")
  assert methods[1:4] == [("GET", "/apis/kubeflow.org/v1/namespaces/kubeflow-user/tfjobs/"
                                  "train-1")] * 3
  assert methods[4] == ("GET", "/api/v1/namespaces/kubeflow-user/pods")
  assert k8s.requests[4][2]["labelSelector"] == ["training.kubeflow.org/job-name=train-1"]
  # What the server received, against the spec's values (not manifest() against itself).
  posted = k8s.requests[0][3]
  assert (posted["apiVersion"], posted["kind"]) == ("kubeflow.org/v1", "TFJob")
  assert (posted["metadata"]["name"], posted["metadata"]["namespace"]) == (
      "train-1", "kubeflow-user")
  worker = posted["spec"]["tfReplicaSpecs"]["Worker"]
  assert worker["replicas"] == 3
  (container,) = worker["template"]["spec"]["containers"]
  assert container["image"] == "registry.example.com/t:1"
  assert container["command"] == ["python", "-m", "m", "--job", "gs://b/job.json"]
  assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}


def test_client_wait_times_out():
  ticks = iter(range(0, 1000, 10))
  with FakeKubernetes(["Running"]) as k8s:
    client = k8s.client()
    client.create(tfjob.manifest(_spec()))
    result = client.wait("train-1", "kubeflow-user", timeout_seconds=25, poll_seconds=0,
                         clock=lambda: next(ticks), sleep=lambda s: None)
  assert result.state == tfjob.TIMEOUT and "did not finish in 25 s" in result.message
  assert len(result.logs) == 2


def test_run_writes_the_job_file_submits_waits_and_deletes(tmp_path):
  job = _job(tmp_path)
  settings = tfjob.TFJobSettings(image="img:1", namespace="ns", worker_replicas=2,
                                 gpus_per_replica=1, tolerations=(TOLERATION,))
  with FakeKubernetes(["Succeeded"]) as k8s:
    result = tfjob.run(job, settings, client=k8s.client(), now=lambda: 1700000000)
  assert result.succeeded
  body = k8s.created
  name = body["metadata"]["name"]
  assert name.startswith("tfx-parallel-train-") and name.endswith("-1700000000")
  container = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
  job_uri = container["command"][-1]
  assert container["command"][:4] == ["python", "-m",
                                      "tfx_parallel.components.distributed_trainer.tfjob",
                                      "--job"]
  assert job_uri == str(tmp_path / "DistributedTrainer" / "_tfjobs" / f"{name}.json")
  with open(job_uri) as f:
    assert Job(**json.load(f)) == job
  assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
  assert ("DELETE", f"/apis/kubeflow.org/v1/namespaces/ns/tfjobs/{name}") in [
      (m, p) for m, p, _, _ in k8s.requests]


def test_run_raises_with_the_logs_when_the_tfjob_fails(tmp_path):
  settings = tfjob.TFJobSettings(image="img:1", namespace="ns", worker_replicas=2)
  with FakeKubernetes(["Failed"]) as k8s:
    with pytest.raises(RuntimeError, match=r"(?s)TFJob ns/tfx-parallel-train-\w+-5 ended Failed: "
                       r"TFJob is Failed\. Job file: .*log of tfx-parallel-train-\w+-5-worker-1"
                       ) as e:
      tfjob.run(_job(tmp_path), settings, client=k8s.client(), now=lambda: 5)
  assert "DELETE" in [m for m, _, _, _ in k8s.requests]
  assert "Pod logs" in str(e.value)


@pytest.mark.slow
def test_replica_entry_point_fetches_the_job_file_and_trains(tmp_path):
  """What each TFJob replica runs, here as one process without TF_CONFIG."""
  import trainer_util  # pylint: disable=g-import-not-at-top  # Imports TensorFlow.
  examples = str(tmp_path / "examples")
  feature_keys, _, rows = trainer_util.write_examples(examples, rows=512)
  job = trainer_util.job_dict(str(tmp_path / "out"), examples, feature_keys, rows,
                              layout="single", epochs=1, batch_size=64)
  shared = tmp_path / "shared" / "job.json"  # Stands for the job file on pipeline_root.
  shared.parent.mkdir()
  shared.write_text(json.dumps(job))
  proc = subprocess.run([sys.executable, "-m", tfjob.replica_command("x")[2], "--job",
                         str(shared)], capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.path.exists(os.path.join(job["model_dir"], "saved_model.pb"))
