"""Multi-node training as a TFJob: the manifest, env opt-in, and the client over HTTP.

The client tests talk, through the real `kubernetes` client, to tests/fake_kube.py: a
fake API server with the training operator's (v1.9.0) reconcile rules and a kubelet
behind it, in a thread (conditions in the operator's order, pod phases, an Istio
sidecar as a second container, 400 for a log read without container=).
"""
import datetime
import json
import os
import signal
import subprocess
import sys

import pytest

from fake_kube import CreateRefused, Exit, FakeCluster, PullFails, Run, Stuck, Unschedulable
from tfx_parallel.components.distributed_trainer.job import Job
from tfx_parallel.components.distributed_trainer.kube import client as kube_client
from tfx_parallel.components.distributed_trainer.kube import launch as kube_launch
from tfx_parallel.components.distributed_trainer.kube import manifest as kube_manifest
from tfx_parallel.components.distributed_trainer.kube import replica as kube_replica
from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings
from tfx_parallel.components.distributed_trainer.kube import watch as kube_watch
from tfx_parallel.components.distributed_trainer import failures

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _spec(**overrides):
  fields = dict(name="train-1", namespace="kubeflow-user", image="registry.example.com/t:1",
                command=("python", "-m", "m", "--job", "gs://b/job.json"), worker_replicas=3,
                gpus_per_replica=2, resources={"requests": {"cpu": "4", "memory": "16G"}},
                node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
                tolerations=(TOLERATION,), env={"TF_USE_LEGACY_KERAS": "1"})
  fields.update(overrides)
  return kube_manifest.TFJobSpec(**fields)


# --- The manifest: a pure function. --------------------------------------------------

def test_manifest_has_replicas_gpus_image_command_restart_policy_and_placement():
  body = kube_manifest.manifest(_spec())
  assert body["apiVersion"] == "kubeflow.org/v1" and body["kind"] == "TFJob"
  assert body["metadata"]["name"] == "train-1"
  assert body["metadata"]["namespace"] == "kubeflow-user"
  replicas = body["spec"]["tfReplicaSpecs"]
  assert list(replicas) == ["Worker"]
  worker = replicas["Worker"]
  assert worker["replicas"] == 3 and worker["restartPolicy"] == "ExitCode"
  # Istio sidecars off: with one the pod never reaches Succeeded (tfjob.py docstring).
  assert worker["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
  assert body["spec"]["runPolicy"] == {"cleanPodPolicy": "None"}  # No backoffLimit.
  assert "ownerReferences" not in body["metadata"]
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
  body = kube_manifest.manifest(_spec(chief_replicas=1, gpus_per_replica=0, resources={},
                              node_selector={}, tolerations=()))
  replicas = body["spec"]["tfReplicaSpecs"]
  assert replicas["Chief"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 3
  for replica in replicas.values():
    pod = replica["template"]["spec"]
    assert "resources" not in pod["containers"][0]
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_manifest_owner_deadline_and_ttl():
  body = kube_manifest.manifest(_spec(owner=("kfp-pod-abc", "1234-uid"), active_deadline_seconds=600,
                              ttl_seconds_after_finished=300))
  assert body["metadata"]["ownerReferences"] == [
      {"apiVersion": "v1", "kind": "Pod", "name": "kfp-pod-abc", "uid": "1234-uid"}]
  assert body["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "activeDeadlineSeconds": 600,
                                       "ttlSecondsAfterFinished": 300}


@pytest.mark.parametrize("overrides,needle", [
    ({"name": "Train_1"}, "name="), ({"name": "x" * 64}, "name="),
    ({"name": "1-train"}, "DNS-1035.*name='1-train'"),  # The webhook's rule, not DNS-1123.
    ({"active_deadline_seconds": 0}, "active_deadline_seconds"),
    ({"worker_replicas": 0}, "worker_replicas=0"), ({"chief_replicas": 2}, "chief_replicas=2"),
    ({"image": ""}, "image=''"), ({"gpus_per_replica": -1}, "-1"),
])
def test_manifest_rejects_bad_specs_echoing_the_value(overrides, needle):
  with pytest.raises(ValueError, match=needle):
    kube_manifest.manifest(_spec(**overrides))


def test_job_state_reads_the_conditions():
  running = {"status": {"conditions": [{"type": "Created", "status": "True"},
                                       {"type": "Running", "status": "True"}]}}
  assert kube_watch.job_state(running) == (None, "")
  assert kube_watch.job_state({}) == (None, "")
  done = {"status": {"conditions": [{"type": "Running", "status": "False"},
                                    {"type": "Succeeded", "status": "True", "message": "ok"}]}}
  assert kube_watch.job_state(done) == ("Succeeded", "ok")
  failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "message": "x"}]}}
  assert kube_watch.job_state(failed) == ("Failed", "x")


# --- Opt-in from the environment. ----------------------------------------------------

def test_settings_only_for_multi_worker_with_an_image():
  env = {kube_settings.ENV_IMAGE: "img:1"}
  assert kube_settings.settings_from_env({}, "multi_worker", 2) is None
  assert kube_settings.settings_from_env(env, "mirrored", 2) is None
  settings = kube_settings.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_NAMESPACE="ns"),
                                     "multi_worker", 2)
  assert (settings.image, settings.namespace, settings.worker_replicas,
          settings.gpus_per_replica) == ("img:1", "ns", 2, 0)


def test_settings_parse_every_variable_and_name_a_bad_one():
  env = {kube_settings.ENV_IMAGE: "img:1", "TFX_PARALLEL_TFJOB_WORKERS": "4",
         "TFX_PARALLEL_TFJOB_CHIEF": "1", "TFX_PARALLEL_TFJOB_GPUS": "8",
         "TFX_PARALLEL_TFJOB_NODE_SELECTOR": '{"pool": "gpu"}',
         "TFX_PARALLEL_TFJOB_TOLERATIONS": json.dumps([TOLERATION]),
         "TFX_PARALLEL_TFJOB_RESOURCES": '{"limits": {"memory": "64G"}}',
         "TFX_PARALLEL_TFJOB_NAMESPACE": "ns", "TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS": "60"}
  s = kube_settings.settings_from_env(env, "multi_worker", 2)
  assert (s.worker_replicas, s.chief_replicas, s.gpus_per_replica) == (4, 1, 8)
  assert s.node_selector == {"pool": "gpu"} and s.tolerations == (TOLERATION,)
  assert s.resources == {"limits": {"memory": "64G"}} and s.timeout_seconds == 60.0
  with pytest.raises(ValueError, match="TFX_PARALLEL_TFJOB_NODE_SELECTOR"):
    kube_settings.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_NODE_SELECTOR="[1]"),
                            "multi_worker", 2)
  with pytest.raises(ValueError, match="TFX_PARALLEL_TFJOB_GPUS: cannot parse 'two'"):
    kube_settings.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_GPUS="two"), "multi_worker", 2)


@pytest.mark.parametrize("name,value,needle", [
    # A misspelt setting name.
    ("TFX_PARALLEL_TFJOB_GPU", "1",
     "TFX_PARALLEL_TFJOB_GPU: unknown TFJob setting. Did you mean TFX_PARALLEL_TFJOB_GPUS"),
    # The API server rejects a string here; the CRD's pruning would drop a snake_case key.
    ("TFX_PARALLEL_TFJOB_TOLERATIONS", '[{"key": "a", "tolerationSeconds": "300"}]',
     r"TOLERATIONS.*value\[0\]\.tolerationSeconds: expected int. Received: '300'"),
    ("TFX_PARALLEL_TFJOB_TOLERATIONS", '[{"key": "a", "toleration_seconds": 300}]',
     "TOLERATIONS.*unknown field 'toleration_seconds' for V1Toleration.*tolerationSeconds"),
    ("TFX_PARALLEL_TFJOB_RESOURCES", '{"request": {"cpu": "4"}}',
     "RESOURCES.*unknown field 'request'.*Did you mean 'requests'"),
    ("TFX_PARALLEL_TFJOB_RESOURCES", '{"limits": {"memory": 64}}',
     r"RESOURCES.*value\.limits\.memory: expected str"),
    ("TFX_PARALLEL_TFJOB_RESOURCES", '{"limits": {"memory": "64 GB"}}',
     "RESOURCES: value.limits.memory: not a Kubernetes quantity. Received: '64 GB'"),
    ("TFX_PARALLEL_TFJOB_NODE_SELECTOR", '{"pool": 1}', r"NODE_SELECTOR.*value\.pool"),
    ("TFX_PARALLEL_TFJOB_WORKERS", "0", "TFX_PARALLEL_TFJOB_WORKERS: cannot parse '0'"),
    ("TFX_PARALLEL_TFJOB_MAX_RESTARTS", "-1", "MAX_RESTARTS: cannot parse '-1'"),
    ("TFX_PARALLEL_TFJOB_CHIEF", "2", "TFX_PARALLEL_TFJOB_CHIEF: cannot parse '2': must be 0 or 1"),
    ("TFX_PARALLEL_TFJOB_PENDING_GRACE_SECONDS", "0", "PENDING_GRACE_SECONDS"),
])
def test_a_misspelt_or_mistyped_setting_fails_before_submission_naming_it(name, value,
                                                                         needle):
  env = {kube_settings.ENV_IMAGE: "img:1", name: value}
  with pytest.raises(ValueError, match=needle):
    kube_settings.settings_from_env(env, "multi_worker", 2)


def test_settings_own_the_tfjob_by_the_kfp_pod_in_its_namespace_only(tmp_path):
  # The pod's namespace comes from its service account's file: KFP sets no variable for it.
  namespace_file = tmp_path / "namespace"
  namespace_file.write_text("team-a\n")
  env = {kube_settings.ENV_IMAGE: "img:1", "KFP_POD_NAME": "run-abc-trainer", "KFP_POD_UID": "u-1"}
  settings = kube_settings.settings_from_env(env, "multi_worker", 2, str(namespace_file))
  assert settings.namespace == "team-a" and settings.owner == ("run-abc-trainer", "u-1")
  # An owner in another namespace would count as absent: the GC would delete the job.
  other = kube_settings.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_NAMESPACE="team-b"),
                                          "multi_worker", 2, str(namespace_file))
  assert other.namespace == "team-b" and other.owner is None
  body = kube_manifest.manifest(kube_manifest.spec_for(settings, "tfx-parallel-train-x-1", "gs://b/j.json"))
  assert body["metadata"]["ownerReferences"][0]["uid"] == "u-1"
  assert body["spec"]["runPolicy"]["activeDeadlineSeconds"] == 86400
  assert body["spec"]["runPolicy"]["ttlSecondsAfterFinished"] == 600


# --- The client, over HTTP against the fake cluster (tests/fake_kube.py). -------------

def _job(tmp_path):
  component_root = tmp_path / "DistributedTrainer"
  return Job(config={"layout": "multi_worker"}, examples_uri=str(tmp_path / "examples"),
             feature_keys=["x0"], label_key="y", train_rows=10,
             model_dir=str(component_root / "model" / "1" / "Format-Serving"),
             model_run_dir=str(component_root / "model_run" / "1"),
             history_dir=str(component_root / "history" / "1"),
             checkpoint_dir=str(component_root / "_checkpoints" / "abc"), num_shards=2)


def _settings(**overrides):
  fields = dict(image="img:1", namespace="ns", worker_replicas=2, gpus_per_replica=1,
                tolerations=(TOLERATION,), max_restarts=3, pending_grace_seconds=30.0,
                timeout_seconds=600.0)  # 60 polls of the fake clock: a hang fails fast.
  fields.update(overrides)
  return kube_settings.TFJobSettings(**fields)


def _run(cluster, tmp_path, settings=None, seconds_per_poll=10):
  """kube_launch.run against `cluster`; its clock advances `seconds_per_poll` per TFJob GET."""
  def clock():
    return seconds_per_poll * sum(1 for m, p, _, _ in cluster.requests
                                  if m == "GET" and "/tfjobs/" in p)
  return kube_launch.run(_job(tmp_path), settings or _settings(),
                   client=kube_client.TFJobClient(cluster.api_client()), now=lambda: 1700000000,
                   poll_seconds=0, clock=clock)


def _methods(cluster):
  return [(m, p) for m, p, _, _ in cluster.requests]


def test_fake_cluster_is_strict_like_the_real_one_about_istio():
  """Without the annotation the sidecar keeps the pod Running (the job never succeeds)
  and a log read without container= is a 400 naming both containers."""
  from kubernetes import client  # pylint: disable=g-import-not-at-top
  from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
  body = kube_manifest.manifest(_spec(worker_replicas=1, namespace="ns"))
  del body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]
  with FakeCluster() as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(body)
    for _ in range(6):
      job = k8s.get("train-1", "ns")
    assert kube_watch.job_state(job) == (None, "")
    pod = cluster.pods["train-1-worker-0"]
    assert pod["status"]["phase"] == "Running"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["tensorflow", "istio-proxy"]
    with pytest.raises(ApiException) as e:
      client.CoreV1Api(cluster.api_client()).read_namespaced_pod_log("train-1-worker-0", "ns")
    assert e.value.status == 400
    assert ("a container name must be specified for pod train-1-worker-0, choose one of: "
            "[tensorflow istio-proxy]") in e.value.body
    result = k8s.wait("train-1", "ns", timeout_seconds=0, poll_seconds=0)
  assert result.state == kube_watch.TIMEOUT
  assert "exiting with 0" in result.logs["train-1-worker-0"]  # Read with container=.


def test_a_successful_job_in_an_istio_namespace(tmp_path):
  with FakeCluster() as cluster:  # Istio injection on, as in multi-user Kubeflow.
    result = _run(cluster, tmp_path)
    name = cluster.deleted_jobs[0]
  assert result.succeeded and result.restarts == 0
  assert result.message == f"TFJob ns/{name} successfully completed."
  assert set(result.logs) == {f"{name}-worker-0", f"{name}-worker-1"}
  assert "exiting with 0" in result.logs[f"{name}-worker-0"]
  logs = [q for m, p, q, _ in cluster.requests if p.endswith("/log")]
  assert logs and all(q["container"] == ["tensorflow"] for q in logs)
  posted = next(b for m, p, _, b in cluster.requests if m == "POST" and p.endswith("/tfjobs"))
  assert posted["metadata"]["name"] == name == kube_manifest.job_name(_job(tmp_path).checkpoint_dir)
  worker = posted["spec"]["tfReplicaSpecs"]["Worker"]
  assert worker["restartPolicy"] == "ExitCode" and worker["replicas"] == 2
  assert posted["spec"]["runPolicy"]["activeDeadlineSeconds"] == 600
  assert _methods(cluster)[-1] == ("DELETE", f"/apis/kubeflow.org/v1/namespaces/ns/tfjobs/{name}")


def test_passing_api_server_errors_do_not_end_the_wait_but_many_do(tmp_path):
  from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
  with FakeCluster() as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(kube_manifest.manifest(_spec(namespace="ns")))
    cluster.fail_next = kube_client.MAX_POLL_ERRORS
    result = k8s.wait("train-1", "ns", timeout_seconds=600, poll_seconds=0)
    assert result.succeeded, result.message
    k8s.create(kube_manifest.manifest(_spec(name="train-2", namespace="ns")))
    cluster.fail_next = kube_client.MAX_POLL_ERRORS + 1
    with pytest.raises(ApiException, match="503"):
      k8s.wait("train-2", "ns", timeout_seconds=600, poll_seconds=0)
    cluster.fail_next = 0
    k8s.delete("train-2", "ns")  # Deleted by someone else: a failure, said plainly.
    result = k8s.wait("train-2", "ns", timeout_seconds=600, poll_seconds=0)
  assert result.state == kube_watch.FAILED
  assert result.message == "TFJob ns/train-2 was deleted while the executor waited for it"


def test_with_a_chief_the_job_succeeds_when_the_chief_does(tmp_path):
  """With a Chief replica the operator judges success by the chief alone (tfjob
  UpdateJobStatus): a worker still running does not hold the job."""
  script = {"worker-0": [Stuck("CreateContainerConfigError", "secret not found")]}
  with FakeCluster(script) as cluster:
    result = _run(cluster, tmp_path, _settings(chief_replicas=1, pending_grace_seconds=1e6))
    name = cluster.deleted_jobs[0]
  assert result.succeeded and result.message == f"TFJob ns/{name} successfully completed."
  assert set(result.logs) == {f"{name}-chief-0", f"{name}-worker-0", f"{name}-worker-1"}


def test_the_operator_conditions_come_in_its_order(tmp_path):
  with FakeCluster() as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(kube_manifest.manifest(_spec(namespace="ns")))
    seen = []
    for _ in range(5):
      job = k8s.get("train-1", "ns")
      seen.append([(c["type"], c["status"]) for c in job["status"]["conditions"]])
  assert seen[0] == [("Created", "True")]  # Pods created, Pending.
  assert seen[1] == [("Created", "True"), ("Running", "True")]
  assert seen[-1] == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]


def test_a_worker_oom_killed_once_restarts_and_the_job_succeeds(tmp_path):
  script = {"worker-1": [Exit(137, "OOMKilled"), Exit(0)],
            "worker-0": [Exit(failures.PEER_LOST_EXIT_CODE), Exit(0)]}  # The survivor.
  with FakeCluster(script) as cluster:
    result = _run(cluster, tmp_path)
    name = cluster.deleted_jobs[0]
  assert result.succeeded, result.message
  assert result.restarts == 1
  assert cluster.incarnations == {f"{name}-worker-0": 2, f"{name}-worker-1": 2}


def test_a_lost_peer_restarts_up_to_the_limit_then_fails_naming_the_cause(tmp_path):
  # The survivor is worker-1: its exit is recorded last, and is still not the cause.
  script = {"worker-0": [Exit(137, "OOMKilled")],
            "worker-1": [Exit(failures.PEER_LOST_EXIT_CODE)]}
  with FakeCluster(script) as cluster:
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path, _settings(max_restarts=2))
    name = cluster.deleted_jobs[0]
  message = str(e.value)
  assert (f"TFJob ns/{name} ended Failed: TFJob ns/{name}: restarted 3 times, more than the "
          f"limit of 2 (TFX_PARALLEL_TFJOB_MAX_RESTARTS); last failure: pod {name}-worker-0: "
          f"container tensorflow exited with code 137 (SIGKILL, e.g. OOM-killed; retryable)") \
      in message  # From the operator's ExitedWithCode events: the pod itself is gone.
  assert cluster.incarnations[f"{name}-worker-0"] == 4  # 1 + 3 restarts, then deleted.
  assert name not in cluster.jobs


def test_a_training_error_stops_the_job_at_once(tmp_path):
  with FakeCluster({"worker-1": [Exit(1)]}) as cluster:
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path)
    name = cluster.deleted_jobs[0]
  assert cluster.incarnations[f"{name}-worker-1"] == 1  # Not restarted: 1-127 is permanent.
  assert (f'job "{name}" is failing because "Worker" replica(s) failed. Last failure: pod '
          f"{name}-worker-1: container tensorflow exited with code 1 (permanent under "
          f"restartPolicy ExitCode)") in str(e.value)


@pytest.mark.parametrize("outcome,needle", [
    (Stuck(), 'ImagePullBackOff: Back-off pulling image "registry.example.com/missing:1"'),
    (Stuck("ErrImagePull", "rpc error: not found"), "ErrImagePull: rpc error: not found"),
    (Unschedulable(), "Unschedulable: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
])
def test_a_pod_that_cannot_start_fails_the_step_within_the_grace_period(tmp_path, outcome,
                                                                         needle):
  with FakeCluster({"worker-0": [outcome]}) as cluster:
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path, _settings(pending_grace_seconds=30.0,
                                        unschedulable_grace_seconds=30.0), seconds_per_poll=10)
    name = cluster.deleted_jobs[0]
    polls = sum(1 for m, p, _, _ in cluster.requests if m == "GET" and "/tfjobs/" in p)
  message = str(e.value)
  assert f"pod {name}-worker-0 is stuck: {needle}" in message
  assert "more than the 30 s grace period" in message
  assert polls * 10 <= 30 + 3 * 10  # Seen at poll 2 (10 s a poll), failed 30 s later.
  # The other pod's log is there; the stuck one says why it has none.
  assert "exiting with 0" in message or "started" in message
  if isinstance(outcome, Stuck):
    assert f'(no log: 400 Bad Request: container "tensorflow" in pod "{name}-worker-0" is ' \
        f'waiting to start: {outcome.reason})' in message


def test_the_fake_kubelet_alternates_pull_failures_with_a_doubling_back_off():
  """[images] in fake_kube: ErrImagePull at 10 s, 20 s, 40 s, 80 s, ... after the first,
  ImagePullBackOff between, the gap capped at 300 s."""
  with FakeCluster({"worker-0": [PullFails()]}) as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(kube_manifest.manifest(_spec(namespace="ns", worker_replicas=1)))
    reasons = []
    for _ in range(160):  # 10 s a GET.
      k8s.get("train-1", "ns")
      pod = cluster.pods.get("train-1-worker-0")
      state = pod and pod["status"]["containerStatuses"][0]["state"]
      reasons.append((state or {}).get("waiting", {}).get("reason"))
  pulls = [i * 10 for i, r in enumerate(reasons) if r == "ErrImagePull"]
  gaps = [b - a for a, b in zip(pulls, pulls[1:])]
  assert gaps[:5] == [10, 20, 40, 80, 160] and set(gaps[5:]) == {300}, gaps
  assert "ImagePullBackOff" in reasons


def test_an_image_that_cannot_be_pulled_fails_at_the_default_grace_across_the_alternation(
    tmp_path):
  """The kubelet's back-off reaches the default grace (300 s = MaxImageBackOff), so a
  timer restarted at each change of reason never fired (kubeflow#41, item 4)."""
  with FakeCluster({"worker-0": [PullFails()]}) as cluster:
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path, _settings(pending_grace_seconds=300.0, timeout_seconds=3600.0))
    name = cluster.deleted_jobs[0]
    polls = sum(1 for m, p, _, _ in cluster.requests if m == "GET" and "/tfjobs/" in p)
  message = str(e.value)
  assert f"pod {name}-worker-0 is stuck: " in message
  assert "more than the 300 s grace period" in message and "Failed" in message
  assert polls * 10 <= 300 + 3 * 10  # Timed from the first failed pull, not the last.


def test_pod_watch_keeps_the_timer_across_reasons_of_one_group_and_drops_it_on_start():
  def pod(reason=None, uid="u1"):
    state = {"waiting": {"reason": reason, "message": "m"}} if reason else {"running": {}}
    return {"metadata": {"name": "p", "uid": uid},
            "status": {"containerStatuses": [{"name": "tensorflow", "state": state}]}}
  watch = kube_watch.PodWatch(max_restarts=3, grace_seconds=30)
  assert watch.observe([pod("ErrImagePull")], 0) is None
  assert watch.observe([pod("ImagePullBackOff")], 20) is None
  assert "stuck: ErrImagePull" in watch.observe([pod("ErrImagePull")], 30)
  watch = kube_watch.PodWatch(max_restarts=3, grace_seconds=30)
  watch.observe([pod("ErrImagePull")], 0)
  watch.observe([pod()], 10)  # Started: the timer ends.
  assert watch.observe([pod("ErrImagePull")], 35) is None
  watch.observe([pod("ErrImagePull", uid="u2")], 36)  # A new pod: its own timer.
  assert watch.observe([pod("ErrImagePull", uid="u2")], 60) is None


def test_unschedulable_pods_get_the_autoscaler_grace_and_it_is_a_setting():
  assert kube_settings.UNSCHEDULABLE_GRACE_SECONDS == 1200.0  # 15 min provisioning + 5 min.
  pod = {"metadata": {"name": "p", "uid": "u"}, "status": {"conditions": [
      {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}]}}
  watch = kube_watch.PodWatch(max_restarts=3, grace_seconds=30, unschedulable_grace_seconds=900)
  assert watch.observe([pod], 0) is None and watch.observe([pod], 899) is None
  assert "Unschedulable: m (for 900 s, more than the 900 s grace" in watch.observe([pod], 900)
  settings = kube_settings.settings_from_env({kube_settings.ENV_IMAGE: "i", kube_settings.ENV_PREFIX
                                      + "UNSCHEDULABLE_GRACE_SECONDS": "600"}, "multi_worker", 2)
  assert settings.unschedulable_grace_seconds == 600.0
  assert kube_settings.settings_from_env({kube_settings.ENV_IMAGE: "i"}, "multi_worker", 2) \
      .unschedulable_grace_seconds == 1200.0


def test_a_pod_the_api_server_refuses_fails_the_step_within_the_grace(tmp_path):
  """Under a ResourceQuota no pod appears and no condition changes: only the
  operator's FailedCreatePod event says why [pod_control]."""
  with FakeCluster({"worker-0": [CreateRefused()]}) as cluster:
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path, _settings(pending_grace_seconds=60.0))
    name = cluster.deleted_jobs[0]
    polls = sum(1 for m, p, _, _ in cluster.requests if m == "GET" and "/tfjobs/" in p)
  message = str(e.value)
  assert (f'the training operator cannot create a replica pod: FailedCreatePod: Error creating:'
          f' pods "{name}-worker-0" is forbidden: exceeded quota: gpu-quota') in message
  assert "more than the 60 s grace period" in message
  assert polls * 10 <= 60 + 3 * 10


def test_the_fake_correlates_events_like_client_go():
  """[events]: the 10th distinct message of one reason is combined; a burst of 25 writes
  about one object, then one per 300 s; events expire after 1 h."""
  with FakeCluster() as cluster:
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}}
    for i in range(12):
      cluster.record_event(job, "Normal", "ExitedWithCode", f"Pod: ns.j-worker-{i} exited with code 137")
    messages = [e["message"] for e in cluster.events]
    assert len(messages) == 10 and messages[-1] == (
        "(combined from similar events): Pod: ns.j-worker-11 exited with code 137")
    assert cluster.events[-1]["count"] == 3
    for _ in range(20):
      cluster.record_event(job, "Warning", "TFJobRestarting", "restarting")
    assert next(e for e in cluster.events if e["reason"] == "TFJobRestarting")["count"] == 13
    cluster.now += datetime.timedelta(seconds=3601)
    assert cluster.route("GET", ["api", "v1", "namespaces", "ns", "events"], {}, None)[1][
        "items"] == []


@pytest.mark.parametrize("events", ["aggregated", "forbidden"])
def test_the_cause_survives_aggregated_or_unreadable_events(tmp_path, events):
  """Aggregated events still name the pod; with no events (a Role without `list
  events`, or expired) the pods' own terminated states do."""
  with FakeCluster({"worker-1": [Exit(1)]}) as cluster:
    if events == "forbidden":
      cluster.events_forbidden = True
    else:
      job = {"metadata": {"name": "other", "namespace": "ns", "uid": "u"}}
      original = cluster.record_event
      def record(job_, kind, reason, message):  # Nine other pods' exits came first.
        if reason == "ExitedWithCode" and not cluster.events:
          for i in range(9):
            original(job_, kind, reason, f"Pod: ns.{job_['metadata']['name']}-old-{i} "
                                         f"exited with code 1")
        original(job_, kind, reason, message)
      cluster.record_event = record
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path)
    name = cluster.deleted_jobs[0]
    if events == "aggregated":
      assert any(ev["message"].startswith("(combined from similar events): ")
                 for ev in cluster.events)
  assert (f"Last failure: pod {name}-worker-1: container tensorflow exited with code 1 "
          f"(permanent under restartPolicy ExitCode)") in str(e.value)


def test_the_job_name_is_the_checkpoint_directory_s_so_a_retry_finds_it():
  name = kube_manifest.job_name("gs://b/root/run-1/trainer/_checkpoints/abc")
  assert name == kube_manifest.job_name("gs://b/root/run-1/trainer/_checkpoints/abc")
  assert name != kube_manifest.job_name("gs://b/root/run-2/trainer/_checkpoints/abc")
  kube_manifest.manifest(_spec(name=name))  # A DNS-1035 label.


@pytest.mark.parametrize("earlier,how,creates", [
    (None, "Submitted", 1), ("running", "Adopted", 1), ("failed", "Replaced", 2)])
def test_a_retried_step_adopts_or_replaces_the_job_of_the_attempt_before(tmp_path, earlier,
                                                                         how, creates):
  """A KFP retry (same checkpoint directory, so same job name) never runs a second job:
  a running one is waited for, a failed one deleted and replaced."""
  with FakeCluster() as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    name = kube_manifest.job_name(_job(tmp_path).checkpoint_dir)
    if earlier:
      k8s.create(kube_manifest.manifest(_spec(name=name, namespace="ns", worker_replicas=2)))
      if earlier == "failed":
        cluster.set_condition(cluster.jobs[name], "Failed", "TFJobFailed", "earlier attempt")
    logged = []
    from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
    original = absl_logging.info
    absl_logging.info = lambda fmt, *args: logged.append(fmt % args)
    try:
      result = _run(cluster, tmp_path)
    finally:
      absl_logging.info = original
  assert result.succeeded, result.message
  assert any(line.startswith(f"{how} TFJob ns/{name}") for line in logged), logged
  posts = [p for m, p, _, _ in cluster.requests if m == "POST" and p.endswith("/tfjobs")]
  assert len(posts) == creates + (1 if earlier else 0)
  assert len(cluster.deleted_jobs) == (2 if earlier == "failed" else 1)


def test_the_executor_beats_and_the_replicas_watch(tmp_path):
  """The replica env names the heartbeat; the executor writes it before the job exists
  and then at most once a minute; a stale one stops the replica with a 1-127 code."""
  spec = kube_manifest.spec_for(_settings(orphan_seconds=240.0), "j", "gs://b/_tfjobs/j.json")
  assert spec.env[kube_settings.ENV_HEARTBEAT] == "gs://b/_tfjobs/j.json.alive"
  assert spec.env[kube_settings.ENV_ORPHAN] == "240.0"
  assert 1 <= failures.ORPHANED_EXIT_CODE <= 127  # Permanent: the job fails, pods stop.
  writes, t = [], [0.0]
  beat = kube_launch.Heartbeat("u", lambda uri, text: writes.append(text), now=lambda: 1e9 + t[0],
                         clock=lambda: t[0])
  for t[0] in (0.0, 30.0, 59.0, 60.0, 100.0, 121.0):
    beat.beat()
  assert writes == [f"1 {1e9!r}", f"2 {1e9 + 60!r}", f"3 {1e9 + 121!r}"]
  value, t = ["a"], [0.0]
  def read():
    if value[0] is None:
      raise OSError("store unavailable")
    return value[0]
  said = []
  watch = kube_replica.Watchdog(read, stale_seconds=600, clock=lambda: t[0], say=said.append)
  assert watch.check() is None
  t[0], value[0] = 500.0, "b"
  assert watch.check() is None  # Changed: alive.
  t[0] = 1099.0
  assert watch.check() is None  # Unchanged for 599 s.
  t[0] = 1100.0
  assert "has not written its heartbeat for 600 s while the store answered" in watch.check()
  with FakeCluster() as cluster:
    _run(cluster, tmp_path)
  alive = tmp_path / "DistributedTrainer" / "_tfjobs"
  assert [p.name for p in alive.iterdir() if p.name.endswith(".alive")]


def test_a_store_outage_is_not_a_killed_executor():
  """While the heartbeat cannot be read the replica trains on and says so once; when
  the store answers again the window starts afresh (the executor's writes failed too)."""
  value, t, said = ["a"], [0.0], []
  def read():
    if value[0] is None:
      raise OSError("store unavailable")
    return value[0]
  watch = kube_replica.Watchdog(read, stale_seconds=600, clock=lambda: t[0], say=said.append)
  assert watch.check() is None
  value[0] = None
  for t[0] in (100.0, 700.0, 5000.0):  # An outage far longer than the limit.
    assert watch.check() is None
  assert len(said) == 1 and "the store is unreachable" in said[0] and \
      "OSError: store unavailable" in said[0] and kube_settings.ENV_ORPHAN in said[0]
  t[0], value[0] = 5100.0, "a"  # Back, and the executor had no chance to write yet.
  assert watch.check() is None
  assert "answers again after 5000 s" in said[1]
  t[0] = 5699.0
  assert watch.check() is None
  t[0] = 5700.0  # A full window of readable store without a beat: killed.
  assert "has not written its heartbeat for 600 s" in watch.check()


def test_a_heartbeat_the_store_says_is_gone_is_no_beat_not_an_outage():
  """NotFound is the store's answer (the heartbeat was deleted with the run's files):
  the window runs on and the replica stops, unlike an unreachable store."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  t, said, errors = [0.0], [], [FileNotFoundError("gone"),
                                tf.errors.NotFoundError(None, None, "gone")]
  for error in errors:
    def read(error=error):
      raise error
    t[0] = 0.0
    watch = kube_replica.Watchdog(read, stale_seconds=600, clock=lambda: t[0],
                                  say=said.append)
    assert watch.check() is None
    t[0] = 600.0
    assert "has not written its heartbeat for 600 s" in watch.check()
  assert said == []  # Never called an outage.


@pytest.mark.parametrize("value", ["60", "120", "209"])
def test_an_orphan_limit_below_three_heartbeats_is_refused(value):
  """Heartbeats are up to HEARTBEAT_SECONDS + the executor's poll apart: a limit below 3x
  that would stop a healthy job's replicas with the permanent ORPHANED_EXIT_CODE."""
  import inspect  # pylint: disable=g-import-not-at-top
  assert inspect.signature(kube_launch.run).parameters["poll_seconds"].default == \
      kube_settings.EXECUTOR_POLL_SECONDS
  assert kube_settings.MIN_ORPHAN_SECONDS == 3 * (kube_settings.HEARTBEAT_SECONDS + 10.0) == 210
  environ = {"TFX_PARALLEL_TFJOB_IMAGE": "img:1", "TFX_PARALLEL_TFJOB_NAMESPACE": "ns",
             "TFX_PARALLEL_TFJOB_ORPHAN_SECONDS": value}
  with pytest.raises(ValueError) as e:
    kube_settings.settings_from_env(environ, "multi_worker", 2)
  assert str(e.value).startswith(f"TFX_PARALLEL_TFJOB_ORPHAN_SECONDS: cannot parse '{value}': "
                                 f"must be >= 210 (3 x the heartbeat spacing")
  assert "set TFX_PARALLEL_TFJOB_ORPHAN_SECONDS=210 or more" in str(e.value)
  with pytest.raises(ValueError, match="TFX_PARALLEL_TFJOB_ORPHAN_SECONDS=60.0: must be >= 210"):
    _settings(orphan_seconds=60.0)
  environ["TFX_PARALLEL_TFJOB_ORPHAN_SECONDS"] = "210"
  assert kube_settings.settings_from_env(environ, "multi_worker", 2).orphan_seconds == 210.0


def test_a_replica_whose_executor_was_killed_stops_with_the_orphan_code(tmp_path):
  """The replica's own watchdog thread, in a real process, with a heartbeat file that
  stops changing (the executor was SIGKILLed): the process exits ORPHANED_EXIT_CODE."""
  alive = tmp_path / "j.json.alive"
  alive.write_text("1")
  script = ("import sys, time\n"
            "from tfx_parallel.components.distributed_trainer.kube import replica as kube_replica, settings as kube_settings\n"
            "kube_replica.start_watchdog({kube_settings.ENV_HEARTBEAT: sys.argv[1], kube_settings.ENV_ORPHAN: '2'},\n"
            "                     kube_replica.read_text, kube_replica.stop_replica)\n"
            "time.sleep(120)\n")
  proc = subprocess.run([sys.executable, "-c", script, str(alive)], capture_output=True,
                        text=True, timeout=110)
  assert proc.returncode == failures.ORPHANED_EXIT_CODE, proc.stderr[-2000:]
  assert "has not written its heartbeat" in proc.stderr


@pytest.mark.parametrize("denied,needle", [
    ({("create", "kubeflow.org", "tfjobs")}, "may not create tfjobs (kubeflow.org)"),
    ({("list", "", "events"), ("get", "", "pods/log")}, "may not get pods/log, list events"),
])
def test_missing_rbac_fails_before_the_job_naming_the_verb(tmp_path, denied, needle):
  with FakeCluster() as cluster:
    cluster.denied = denied
    with pytest.raises(PermissionError, match="tfx-parallel rbac --namespace ns") as e:
      _run(cluster, tmp_path)
    assert needle in str(e.value)
    assert not [m for m, p, _, _ in cluster.requests if "/tfjobs" in p]  # Nothing created.
  assert not (tmp_path / "DistributedTrainer" / "_tfjobs").exists()  # No job file either.


def test_a_cluster_without_tfjob_or_trainer_v2_fails_before_anything_naming_what_to_install(
    tmp_path):
  """(Trainer v2 alone is a backend now: tests/test_kubeflow_trainjob.py.)"""
  with FakeCluster() as cluster:
    cluster.served = {}
    with pytest.raises(RuntimeError, match="the training operator v1.9.4") as e:
      _run(cluster, tmp_path)
    assert "This cluster serves neither TFJob (kubeflow.org/v1 tfjobs)" in str(e.value)
    assert kube_client.TRAINING_OPERATOR_INSTALL in str(e.value)
    assert [m for m, _, _, _ in cluster.requests] == ["GET"] * len(cluster.requests)
  assert not (tmp_path / "DistributedTrainer" / "_tfjobs").exists()


def test_the_generated_role_grants_exactly_what_the_preflight_asks():
  role, binding = kube_manifest.rbac_manifests("kubeflow", "pipeline-runner")
  granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
             for resource in rule["resources"] for verb in rule["verbs"]
             if "resourceNames" not in rule}
  assert granted == set(kube_manifest.ALL_REQUIRED_ACCESS) >= set(kube_manifest.REQUIRED_ACCESS)
  # On an s3:// or minio:// root the step reads KFP's store secret, and only that one.
  named = [rule for rule in role["rules"] if "resourceNames" in rule]
  assert named == [{"apiGroups": [""], "resources": ["secrets"],
                    "resourceNames": ["mlpipeline-minio-artifact"], "verbs": ["get"]}]
  gcs_role, _ = kube_manifest.rbac_manifests("kubeflow", "pipeline-runner", s3_secret=None)
  assert all("secrets" not in rule["resources"] for rule in gcs_role["rules"])
  assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "pipeline-runner",
                                  "namespace": "kubeflow"}]
  assert binding["roleRef"]["name"] == role["metadata"]["name"]
  for doc, model in ((role, "V1Role"), (binding, "V1RoleBinding")):  # The API's schema.
    kube_settings._check_model(doc, model, doc["kind"])  # pylint: disable=protected-access


def test_the_rbac_command_prints_the_role_and_the_docs_show_the_same(capsys):
  import yaml  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  assert cli.main(["rbac", "--namespace", "kubeflow-user"]) == 0
  printed = list(yaml.safe_load_all(capsys.readouterr().out))
  assert printed == kube_manifest.rbac_manifests("kubeflow-user", "default-editor")
  doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "multi-node.md")).read()
  block = doc[doc.index("**RBAC.**"):]
  block = block[block.index("```yaml\n") + 8:]
  assert list(yaml.safe_load_all(block[:block.index("```")])) == printed


@pytest.mark.parametrize("when", ["create", "wait"])
def test_sigterm_deletes_the_tfjob(tmp_path, when):
  """A cancelled KFP run sends SIGTERM to the executor: the TFJob is deleted, also when
  the signal comes while the create call is in flight."""
  with FakeCluster({"worker-0": [Stuck()]}) as cluster:
    def terminate():
      os.kill(os.getpid(), signal.SIGTERM)
    if when == "create":
      cluster.on_create = terminate
    else:
      cluster.on_create = lambda: None
      original = cluster.tick
      def tick(name):
        original(name)
        if cluster.incarnations:
          terminate()
      cluster.tick = tick
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(kube_launch.ExecutorTerminated, match="SIGTERM.*the TFJob is deleted"):
      _run(cluster, tmp_path, _settings(pending_grace_seconds=1e6))
    assert signal.getsignal(signal.SIGTERM) is previous  # Handler restored.
    assert len(cluster.deleted_jobs) == 1 and not cluster.jobs
  assert _methods(cluster)[-1][0] == "DELETE"

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
  proc = subprocess.run([sys.executable, "-m", kube_manifest.replica_command("x")[2], "--job",
                         str(shared)], capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.path.exists(os.path.join(job["model_dir"], "saved_model.pb"))


def _checkpoint_steps(directory):
  from tfx_parallel.components.distributed_trainer.run import checkpoint  # pylint: disable=g-import-not-at-top
  return checkpoint.steps(directory)


@pytest.mark.slow
@pytest.mark.parametrize("workers,steps", [(1, 400), (2, 300)],
                         ids=["one_replica", "two_real_workers"])
def test_a_replica_oom_killed_after_a_checkpoint_restarts_and_all_resume(tmp_path, workers,
                                                                          steps):
  """The fake kubelet runs the replica entry point for real; the last worker's first
  process is SIGKILLed (exit 137, OOMKilled) after a checkpoint at step >= 100, and the
  operator's ExitCode rule recreates the pod. One replica: no TF_CONFIG (the operator's
  isDistributed), the new process resumes at the checkpointed step. Two real replicas with
  the operator's TF_CONFIG (127.0.0.1 services): worker 0 loses its peer and exits with
  PEER_LOST_EXIT_CODE, which the rule restarts as well; the recreated pair resumes."""
  import trainer_util  # pylint: disable=g-import-not-at-top  # Imports TensorFlow.
  examples = str(tmp_path / "examples")
  feature_keys, _, rows = trainer_util.write_examples(examples, rows=1024)
  job = Job(**trainer_util.job_dict(str(tmp_path / "out"), examples, feature_keys, rows,
                                    layout="multi_worker", steps=steps, epochs=1,
                                    checkpoint_every=50, log_every=50, batch_size=32))
  killed_after = []

  def oom_now():
    steps_saved = _checkpoint_steps(job.checkpoint_dir)
    if steps_saved and max(steps_saved) >= 100:
      killed_after.append(max(steps_saved))
      return True
    return False

  killed = f"worker-{workers - 1}"
  script = {f"worker-{i}": [Run()] for i in range(workers - 1)}
  script[killed] = [Run(oom_kill_when=oom_now), Run()]
  poll = 0.2 if workers == 1 else 0.5
  with FakeCluster(script, local_network=workers > 1, seconds_per_poll=poll) as cluster:
    result = kube_launch.run(job, _settings(worker_replicas=workers, gpus_per_replica=0,
                                            timeout_seconds=900.0),
                             client=kube_client.TFJobClient(cluster.api_client()),
                             poll_seconds=poll)
    name = cluster.deleted_jobs[0]
  messages = [e["message"] for e in cluster.events]
  print(f"restarts={result.restarts} incarnations={cluster.incarnations} events={messages}")
  assert result.succeeded, (result.message, messages, result.logs)
  assert f"Pod: ns.{name}-{killed} exited with code 137" in messages
  if workers == 1:
    assert result.restarts == 1 and cluster.incarnations == {f"{name}-worker-0": 2}
  else:
    assert (f"Pod: ns.{name}-worker-0 exited with code {failures.PEER_LOST_EXIT_CODE}"
            in messages), messages
  with open(os.path.join(job.history_dir, "history.json")) as f:
    history = json.load(f)
  # It resumed at a step the killed process had checkpointed, not from scratch. The kill
  # lands a poll after the step-100 checkpoint was seen, and the replicas may commit one
  # more checkpoint in between (CI: seen at 100, resumed at 150): any checkpoint step from
  # the one seen up to before the end is a resume; 0 or no resume is not.
  resumed = history["resumed_from_step"]
  assert killed_after[0] <= resumed < steps and resumed % 50 == 0, (resumed, killed_after)
  assert history["records"][-1]["step"] == steps
  assert os.path.exists(os.path.join(job.model_dir, "saved_model.pb"))


# --- The operator's SDK, in its own venv: round trip and strict schema. -------------

SDK_VENV = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        ".venv-tfjob")
SDK_REQUIREMENTS = ("kubeflow-training==1.9.*",)
SDK_CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tfjob_sdk_check.py")


def _sdk_python():
  """The cached venv's python with the training operator's SDK (created on first use,
  ~30 s with PyPI). Its `kubernetes` pin cannot share TFX 1.16's venv. The base
  interpreter is this venv's own (TFX_PARALLEL_KFP_PYTHON chooses another)."""
  import shutil  # pylint: disable=g-import-not-at-top
  python = os.path.join(SDK_VENV, "bin", "python")
  stamp = os.path.join(SDK_VENV, ".installed")
  wanted = "\n".join(SDK_REQUIREMENTS)
  if os.path.exists(stamp) and open(stamp).read() == wanted:
    return python
  base = os.environ.get("TFX_PARALLEL_KFP_PYTHON") or os.path.join(
      sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
  building = f"{SDK_VENV}.building-{os.getpid()}"
  shutil.rmtree(building, ignore_errors=True)
  subprocess.run([base, "-m", "venv", building], check=True, timeout=300)
  install = subprocess.run([os.path.join(building, "bin", "python"), "-m", "pip", "install",
                            "-q", "--disable-pip-version-check", *SDK_REQUIREMENTS],
                           capture_output=True, text=True, timeout=900)
  if install.returncode != 0:
    shutil.rmtree(building, ignore_errors=True)
    pytest.fail(f"pip install {' '.join(SDK_REQUIREMENTS)} failed (PyPI reachable?):\n"
                f"{install.stderr[-3000:]}")
  with open(os.path.join(building, ".installed"), "w") as f:
    f.write(wanted)
  shutil.rmtree(SDK_VENV, ignore_errors=True)
  os.rename(building, SDK_VENV)
  return python


# The documented settings (docs/multi-node.md's table), each combination the executor
# can produce: defaults; everything set; one replica; in the KFP pod's namespace.
DOCUMENTED_SETTINGS = {
    "defaults": {},
    "everything": {
        "TFX_PARALLEL_TFJOB_WORKERS": "4", "TFX_PARALLEL_TFJOB_CHIEF": "1",
        "TFX_PARALLEL_TFJOB_GPUS": "2",
        "TFX_PARALLEL_TFJOB_NODE_SELECTOR": '{"cloud.google.com/gke-accelerator": "nvidia-l4"}',
        "TFX_PARALLEL_TFJOB_TOLERATIONS": json.dumps(
            [TOLERATION, {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                          "effect": "NoExecute", "tolerationSeconds": 300}]),
        "TFX_PARALLEL_TFJOB_RESOURCES": '{"requests": {"cpu": "4", "memory": "16Gi"}, '
                                        '"limits": {"memory": "32Gi"}}',
        "TFX_PARALLEL_TFJOB_NAMESPACE": "kubeflow-user", "TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS": "7200",
        "TFX_PARALLEL_TFJOB_MAX_RESTARTS": "5", "TFX_PARALLEL_TFJOB_PENDING_GRACE_SECONDS": "600",
        "TFX_PARALLEL_TFJOB_TTL_SECONDS": "3600"},
    "one_replica": {"TFX_PARALLEL_TFJOB_WORKERS": "1"},
    "owned_by_the_kfp_pod": {"KFP_POD_NAME": "run-1-trainer-123",  # In its own namespace.
                             "KFP_POD_UID": "8d2e1a4c-0000-4000-8000-000000000001"},
}


def _gpu_yaml_settings():
  """The TFX_PARALLEL_TFJOB_* env of the commented multi-node variant in kubeflow/gpu.yaml."""
  import re  # pylint: disable=g-import-not-at-top
  import yaml  # pylint: disable=g-import-not-at-top
  path = os.path.join(os.path.dirname(SDK_VENV), "kubeflow", "gpu.yaml")
  with open(path) as f:
    found = re.findall(r"^#\s+(TFX_PARALLEL_TFJOB_\w+):\s*(.*)$", f.read(), re.M)
  return {name: str(yaml.safe_load(value)) for name, value in found}


def test_the_multi_node_variant_in_gpu_yaml_is_accepted():
  env = _gpu_yaml_settings()
  assert kube_settings.ENV_IMAGE in env and len(env) >= 5, env
  settings = kube_settings.settings_from_env(env, "multi_worker", 1)
  assert settings.worker_replicas == 2 and settings.gpus_per_replica == 4
  kube_manifest.manifest(kube_manifest.spec_for(settings, "tfx-parallel-train-a-1", "gs://b/j.json"))


def _documented_manifests():
  out = {}
  settings_by_label = dict(DOCUMENTED_SETTINGS, gpu_yaml=_gpu_yaml_settings())
  for label, env in settings_by_label.items():
    settings = kube_settings.settings_from_env(dict(env, TFX_PARALLEL_TFJOB_IMAGE="ghcr.io/o/t:1"),
                                       "multi_worker", 2)
    out[label] = kube_manifest.manifest(kube_manifest.spec_for(settings, kube_manifest.job_name("gs://b/c"),
                                               "gs://b/_tfjobs/j.json"))
  return out


@pytest.mark.slow
def test_documented_manifests_pass_the_operator_sdk_round_trip_and_strict_schema(tmp_path):
  manifests = _documented_manifests()
  assert manifests["everything"]["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] == 1
  # The checker is strict: these two are what the API server would prune or reject.
  broken = json.loads(json.dumps(manifests["everything"]))
  pod = broken["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
  pod["tolerations"][1]["toleration_seconds"] = pod["tolerations"][1].pop("tolerationSeconds")
  manifests["broken_field_name"] = broken
  mistyped = json.loads(json.dumps(manifests["everything"]))
  mistyped["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["tolerations"][1][
      "tolerationSeconds"] = "300"
  manifests["broken_type"] = mistyped
  path = tmp_path / "manifests.json"
  path.write_text(json.dumps(manifests))
  proc = subprocess.run([_sdk_python(), SDK_CHECK, str(path)], capture_output=True, text=True,
                        timeout=300, cwd=str(tmp_path))
  report = json.loads(proc.stdout or "{}")
  assert set(report) == set(manifests), proc.stderr[-3000:]
  for label in list(DOCUMENTED_SETTINGS) + ["gpu_yaml"]:
    assert report[label] == [], (label, report[label])
  where = "TFJob.spec.tfReplicaSpecs.Worker.template.spec.tolerations[1]"
  assert f"{where}: unknown field 'toleration_seconds' in V1Toleration" in report[
      "broken_field_name"]
  assert f"{where}.tolerationSeconds: expected int, got '300'" in report["broken_type"]
  assert any("round trip changed" in e for e in report["broken_type"])
  assert proc.returncode == 1
