"""What the API server, the training operator and the garbage collector do to our TFJob
once it is created, against tests/fake_kube.py (each rule cited there: [prune],
[tfjob-crd], [job.go], [3420], [gc]): structural-schema pruning, activeDeadlineSeconds,
cleanPodPolicy, ttlSecondsAfterFinished and the ownerReference cascade. Together they
bound how long replicas outlive an executor that was killed without deleting its job.
"""
import copy
import os
import tempfile

from fake_kube import FakeCluster, Hang
from tfx_parallel.components.distributed_trainer.kube import client as kube_client
from tfx_parallel.components.distributed_trainer.kube import manifest as kube_manifest
from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings
from tfx_parallel.components.distributed_trainer.kube import watch as kube_watch

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
HANG = {"chief-0": [Hang()], "worker-0": [Hang()], "worker-1": [Hang()]}


def _settings(own_namespace="ns", **overrides):
  """Every setting that reaches the manifest, as the executor decodes them, in a pod
  whose service account's namespace file says `own_namespace`."""
  env = {kube_settings.ENV_IMAGE: "registry.example.com/t:1",
         "TFX_PARALLEL_TFJOB_NAMESPACE": "ns", "TFX_PARALLEL_TFJOB_GPUS": "2",
         "TFX_PARALLEL_TFJOB_CHIEF": "1",
         "TFX_PARALLEL_TFJOB_NODE_SELECTOR": '{"cloud.google.com/gke-accelerator": "nvidia-l4"}',
         "TFX_PARALLEL_TFJOB_TOLERATIONS": '[{"key": "nvidia.com/gpu", "operator": "Exists", '
                                           '"effect": "NoSchedule"}]',
         "TFX_PARALLEL_TFJOB_RESOURCES": '{"requests": {"cpu": "8", "memory": "32G"}}'}
  env.update(overrides)
  with tempfile.TemporaryDirectory() as tmp:
    namespace_file = os.path.join(tmp, "namespace")
    with open(namespace_file, "w") as f:
      f.write(own_namespace)
    return kube_settings.settings_from_env(env, "multi_worker", 2, namespace_file)


def _body(settings, name="train-1"):
  return kube_manifest.manifest(kube_manifest.spec_for(settings, name, "gs://b/_tfjobs/j.json"))


def _poll_until_finished(k8s, name, polls=100):
  for _ in range(polls):
    job = k8s.get(name, "ns")
    if kube_watch.job_state(job)[0]:
      return job
  raise AssertionError(f"{name} did not finish in {polls} polls")


def test_every_field_our_tfjob_sets_survives_the_crds_structural_schema():
  """[prune] against the TFJob CRD (training-operator v1.9.4): the stored job is the job
  we sent, every field (runPolicy's deadline and TTL, the replica's restartPolicy, the
  Istio annotation, GPUs, placement, env) intact; fields the schema does not name are
  dropped without an error, which is why a misspelt field must be caught before."""
  body = _body(_settings())
  with FakeCluster() as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(body)
    stored = k8s.get("train-1", "ns")
    assert stored["spec"] == body["spec"]
    assert stored["spec"]["runPolicy"] == {"cleanPodPolicy": "None",
                                           "activeDeadlineSeconds": 86400,
                                           "ttlSecondsAfterFinished": 600}

    typo = copy.deepcopy(body)
    typo["metadata"]["name"] = "train-2"
    typo["spec"]["runPolicy"]["activeDeadline"] = 60  # Not a RunPolicy field.
    worker = typo["spec"]["tfReplicaSpecs"]["Worker"]
    worker["template"]["metadata"]["ownerReferences"] = [{"name": "x"}]  # Not in the CRD.
    worker["template"]["spec"]["containers"][0]["gpus"] = 2  # Not a core/v1 Container field.
    worker["template"]["spec"]["nodeSelectr"] = {"a": "b"}  # Misspelt PodSpec field.
    k8s.create(typo)
    pruned = k8s.get("train-2", "ns")
  assert pruned["spec"] == body["spec"]  # Every unknown field gone, nothing else.


def test_past_its_deadline_v1_9_4_fails_the_job_and_keeps_none_policy_pods_until_the_ttl():
  """[job.go] [3420]: at activeDeadlineSeconds the operator fails the job with its own
  message; under cleanPodPolicy None, v1.9.4 keeps the still-running replicas, so they
  hold their GPUs until ttlSecondsAfterFinished deletes the job and its pods."""
  body = _body(_settings(TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS="60",
                         TFX_PARALLEL_TFJOB_TTL_SECONDS="120"))
  with FakeCluster(HANG, operator_version="v1.9.4") as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(body)
    job = _poll_until_finished(k8s, "train-1")
    assert kube_watch.job_state(job) == (
        "Failed", "Job train-1 has failed because it was active longer than specified deadline")
    assert job["status"]["conditions"][-1]["reason"] == "TFJobFailed"
    assert any(e["reason"] == "TFJobFailed" and e["type"] == "Normal"
               for e in k8s.events("train-1", "ns"))
    running = sorted(p for p, v in cluster.pods.items() if v["status"]["phase"] == "Running")
    assert running == ["train-1-chief-0", "train-1-worker-0", "train-1-worker-1"]
    cluster.advance(119)
    assert "train-1" in cluster.jobs and len(cluster.pods) == 3
    cluster.advance(2)  # Past completionTime + 120 s.
    assert "train-1" not in cluster.jobs and not cluster.pods


def test_before_v1_9_4_the_deadline_deleted_every_pod_whatever_the_policy():
  """[3420]: v1.9.0-v1.9.3 deleted the pods before setting Failed, so cleanPodPolicy None
  was ignored at the deadline (kubeflow/trainer#3419)."""
  body = _body(_settings(TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS="60"))
  with FakeCluster(HANG, operator_version="v1.9.3") as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(body)
    job = _poll_until_finished(k8s, "train-1")
    assert kube_watch.job_state(job)[0] == "Failed"
    assert not cluster.pods and "train-1" in cluster.jobs


def test_with_the_default_settings_an_orphaned_jobs_replicas_stop_by_timeout_plus_ttl():
  """The last bound when nothing else stops the replicas (no heartbeat watchdog, an
  executor killed outright, the KFP pod kept for the workflow's TTL): the defaults'
  activeDeadlineSeconds (TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS, 86400) plus
  ttlSecondsAfterFinished (TFX_PARALLEL_TFJOB_TTL_SECONDS, 600) on v1.9.4."""
  settings = _settings()
  bound = int(settings.timeout_seconds) + settings.ttl_seconds
  assert bound == 86400 + 600
  with FakeCluster(HANG) as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(_body(settings))
    k8s.get("train-1", "ns")  # The operator's first reconcile: startTime, the pods.
    k8s.get("train-1", "ns")  # They run.
    cluster.advance(int(settings.timeout_seconds) - 20)
    assert "train-1" in cluster.jobs and len(cluster.pods) == 3
    cluster.advance(20)
    assert kube_watch.job_state(cluster.jobs["train-1"])[0] == "Failed"
    assert len(cluster.pods) == 3  # cleanPodPolicy None on v1.9.4: still running.
    cluster.advance(settings.ttl_seconds + 1)
    assert not cluster.jobs and not cluster.pods


def test_deleting_the_kfp_pod_deletes_the_tfjob_and_its_replicas():
  """[gc]: the TFJob is owned by the step's pod (KFP_POD_NAME/KFP_POD_UID); when that pod
  goes, the job goes, and its pods with it."""
  settings = _settings(KFP_POD_NAME="run-1-trainer", KFP_POD_UID="uid-1")
  assert settings.owner == ("run-1-trainer", "uid-1")
  with FakeCluster(HANG) as cluster:
    cluster.owner_pods[("ns", "run-1-trainer")] = "uid-1"
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(_body(settings))
    k8s.get("train-1", "ns")
    k8s.get("train-1", "ns")
    assert len(cluster.pods) == 3
    cluster.delete_owner_pod("ns", "run-1-trainer")
    assert not cluster.jobs and not cluster.pods and cluster.deleted_jobs == ["train-1"]


def test_an_owner_the_garbage_collector_cannot_find_deletes_the_job_at_once():
  """[gc]: an owner Pod is looked up in the job's own namespace with its uid. A job owned
  by a pod elsewhere (or a stale uid) is deleted as soon as it is created, and the
  executor's wait says so, which is why settings_from_env sets an owner only in the
  pod's own namespace."""
  owned = _settings(KFP_POD_NAME="run-1-trainer", KFP_POD_UID="uid-1")
  elsewhere = _settings(own_namespace="kubeflow", KFP_POD_NAME="run-1-trainer",
                        KFP_POD_UID="uid-1")  # Standalone KFP's namespace; the job in "ns".
  assert elsewhere.owner is None  # The executor does not write such an owner.
  body = _body(owned)
  with FakeCluster(HANG) as cluster:
    cluster.owner_pods[("kubeflow", "run-1-trainer")] = "uid-1"  # Not in "ns".
    k8s = kube_client.TFJobClient(cluster.api_client())
    k8s.create(body)
    assert not cluster.jobs
    result = k8s.wait("train-1", "ns", timeout_seconds=600, poll_seconds=0)
  assert result.state == kube_watch.FAILED
  assert result.message == "TFJob ns/train-1 was deleted while the executor waited for it"


def test_the_operators_own_messages_for_creation_and_a_permanent_exit():
  """[tfjob] onOwnerCreateFunc names the job without its namespace; [pod.go] a replica
  that exits 1-127 under ExitCode gives a Warning event and the Failed condition, both
  with the operator's quoting."""
  from fake_kube import Exit  # pylint: disable=g-import-not-at-top
  with FakeCluster({"chief-0": [Hang()], "worker-0": [Hang()], "worker-1": [Exit(1)]}) as cluster:
    k8s = kube_client.TFJobClient(cluster.api_client())
    created = k8s.create(_body(_settings()))
    assert created["status"]["conditions"] == [
        {"type": "Created", "status": "True", "reason": "TFJobCreated",
         "message": "TFJob train-1 is created."}]
    job = _poll_until_finished(k8s, "train-1")
    events = [(e["type"], e["reason"], e["message"]) for e in k8s.events("train-1", "ns")]
  message = 'job "train-1" is failing because "Worker" replica(s) failed.'
  assert kube_watch.job_state(job) == ("Failed", message)
  assert ("Warning", "TFJobFailed", message) in events
  assert ("Normal", "ExitedWithCode", "Pod: ns.train-1-worker-1 exited with code 1") in events
