"""Multi-node training on Kubeflow Trainer v2: the TensorFlow runtime, the TrainJob, the
TF_CONFIG each replica derives from JobSet, backend discovery, and the executor's run
against tests/fake_kube.py's TrainJob -> JobSet -> Indexed Job -> pod path (each rule
cited there), through the real `kubernetes` client.
"""
import json
import os
import signal

import pytest

from fake_kube import CreateRefused, Exit, FakeCluster, Stuck
from tfx_parallel.components.distributed_trainer.job import Job
from tfx_parallel.components.distributed_trainer.kube import client as kube_client
from tfx_parallel.components.distributed_trainer.kube import launch as kube_launch
from tfx_parallel.components.distributed_trainer.kube import manifest as kube_manifest
from tfx_parallel.components.distributed_trainer.kube import replica as kube_replica
from tfx_parallel.components.distributed_trainer.kube import settings as kube_settings
from tfx_parallel.components.distributed_trainer.kube import trainjob
from tfx_parallel.components.distributed_trainer.kube import watch as kube_watch

TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _spec(**overrides):
  fields = dict(name="train-1", namespace="ns", image="registry.example.com/t:1",
                command=("python", "-m", "m", "--job", "gs://b/job.json"), worker_replicas=3,
                gpus_per_replica=2, resources={"requests": {"cpu": "4"}},
                node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
                tolerations=(TOLERATION,), env={"TF_USE_LEGACY_KERAS": "1"})
  fields.update(overrides)
  return kube_manifest.TFJobSpec(**fields).validate()


# --- The runtime and the TrainJob: pure. ---------------------------------------------

def test_the_runtime_is_a_jobset_template_trainer_v2_and_kubernetes_accept():
  runtime = trainjob.runtime_manifest("team-a", max_restarts=5)
  assert (runtime["apiVersion"], runtime["kind"]) == ("trainer.kubeflow.org/v1alpha1",
                                                      "TrainingRuntime")
  assert runtime["metadata"]["name"] == trainjob.RUNTIME_NAME == "tfx-parallel-tensorflow"
  assert runtime["metadata"]["namespace"] == "team-a"
  spec = runtime["spec"]
  assert spec["mlPolicy"] == {"numNodes": 1}  # No torch/mpi: the PlainML plugin.
  jobset = spec["template"]["spec"]
  assert jobset["failurePolicy"] == {
      "maxRestarts": 5, "rules": [{"name": "PermanentFailure", "action": "FailJobSet",
                                   "onJobFailureReasons": ["PodFailurePolicy",
                                                           "DeadlineExceeded"]}]}
  (rjob,) = jobset["replicatedJobs"]
  # Trainer fills the Job labelled as the trainer's ancestor, container "node".
  assert rjob["name"] == "node"
  assert rjob["template"]["metadata"]["labels"] == {
      "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
  job = rjob["template"]["spec"]
  assert job["backoffLimit"] == 0 and job["activeDeadlineSeconds"] == 86400
  (rule,) = job["podFailurePolicy"]["rules"]
  codes = rule["onExitCodes"]
  # Kubernetes' validation: In excludes 0, values sorted and unique, at most 255.
  assert rule["action"] == "FailJob" and codes["operator"] == "In"
  assert codes["values"] == sorted(set(codes["values"])) == list(range(1, 128))
  assert len(codes["values"]) <= 255 and codes["containerName"] == "node"
  pod = job["template"]
  assert pod["spec"]["restartPolicy"] == "Never"  # onExitCodes requires it.
  assert pod["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
  (container,) = pod["spec"]["containers"]
  assert container["name"] == "node" and container["ports"] == [{"name": "tf",
                                                                  "containerPort": 2222}]
  env = {e["name"]: e for e in container["env"]}
  assert env[trainjob.ENV_JOBSET_NAME]["valueFrom"]["fieldRef"]["fieldPath"] == \
      "metadata.labels['jobset.sigs.k8s.io/jobset-name']"
  assert env[trainjob.ENV_JOB_INDEX]["valueFrom"]["fieldRef"]["fieldPath"] == \
      "metadata.labels['jobset.sigs.k8s.io/job-index']"
  # The pod template and Job spec in the Kubernetes API's own schema (field names, types).
  kube_settings._check_model(pod, "V1PodTemplateSpec", "pod")  # pylint: disable=protected-access
  kube_settings._check_model(job, "V1JobSpec", "job")  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="max_restarts must be an integer >= 0. Received: -1"):
    trainjob.runtime_manifest("ns", max_restarts=-1)
  with pytest.raises(ValueError, match="active_deadline_seconds must be an integer >= 1"):
    trainjob.runtime_manifest("ns", active_deadline_seconds=0)


def test_the_trainjob_carries_nodes_image_command_resources_and_placement():
  body = trainjob.manifest(_spec(owner=("kfp-pod", "uid-1")))
  assert (body["apiVersion"], body["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
  assert body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod",
                                                  "name": "kfp-pod", "uid": "uid-1"}]
  spec = body["spec"]
  # kind defaults to ClusterTrainingRuntime (trainjob_types.go RuntimeRef): set it.
  assert spec["runtimeRef"] == {"name": "tfx-parallel-tensorflow",
                                "apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime"}
  trainer = spec["trainer"]
  assert trainer["numNodes"] == 3 and trainer["image"] == "registry.example.com/t:1"
  assert trainer["command"] == ["python", "-m", "m", "--job", "gs://b/job.json"]
  assert trainer["resourcesPerNode"] == {"requests": {"cpu": "4"},
                                         "limits": {"nvidia.com/gpu": "2"}}
  assert trainer["env"] == [{"name": "TFX_PARALLEL_NUM_NODES", "value": "3"},
                            {"name": "TF_USE_LEGACY_KERAS", "value": "1"}]
  assert spec["podTemplateOverrides"] == [{
      "targetJobs": [{"name": "node"}],
      "spec": {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
               "tolerations": [TOLERATION]}}]
  plain = trainjob.manifest(_spec(node_selector={}, tolerations=(), resources={},
                                  gpus_per_replica=0))
  assert "podTemplateOverrides" not in plain["spec"]
  assert "resourcesPerNode" not in plain["spec"]["trainer"]
  with pytest.raises(ValueError, match="TFX_PARALLEL_TFJOB_CHIEF=1: Kubeflow Trainer v2"):
    trainjob.manifest(_spec(chief_replicas=1))


def test_trainjob_state_maps_the_conditions_with_reason_and_message():
  running = {"status": {"conditions": [{"type": "Suspended", "status": "False"}]}}
  assert kube_client.TrainJobClient.state(running) == (None, "")
  done = {"status": {"conditions": [{"type": "Complete", "status": "True",
                                     "reason": "AllJobsCompleted",
                                     "message": "jobset completed successfully"}]}}
  assert kube_client.TrainJobClient.state(done) == (kube_watch.SUCCEEDED,
                                              "AllJobsCompleted: jobset completed successfully")
  failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "R",
                                       "message": "m"}]}}
  assert kube_client.TrainJobClient.state(failed) == (kube_watch.FAILED, "R: m")


# --- TF_CONFIG from JobSet: a pure function of the environment. ----------------------

def _replica_env(index, nodes=3, name="tfx-parallel-train-ab"):
  return {trainjob.ENV_JOBSET_NAME: name, trainjob.ENV_REPLICATED_JOB: "node",
          trainjob.ENV_JOB_INDEX: "0", "JOB_COMPLETION_INDEX": str(index),
          trainjob.ENV_NUM_NODES: str(nodes), trainjob.ENV_PORT: "2222"}


def test_tf_config_lists_every_node_by_its_jobset_hostname_and_this_task():
  configs = [json.loads(trainjob.tf_config_from_jobset(_replica_env(i))) for i in range(3)]
  hosts = [f"tfx-parallel-train-ab-node-0-{i}.tfx-parallel-train-ab:2222" for i in range(3)]
  for i, config in enumerate(configs):
    assert config == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
  assert trainjob.tf_config_from_jobset(_replica_env(0, nodes=1)) is None  # One node.
  assert trainjob.tf_config_from_jobset({}) is None  # Not a JobSet replica.


def test_the_hostnames_of_our_trainjob_names_are_dns_labels():
  """A pod's hostname and its generated name (``<job>-<index>-`` + 5 characters) must be
  DNS labels (<= 63 characters) for the step's TrainJob names, up to 1000 nodes."""
  name = kube_manifest.job_name("gs://bucket/a/very/long/pipeline/root/DistributedTrainer/_checkpoints/x")
  for host in trainjob.hostnames(name, trainjob.REPLICATED_JOB, 0, 1000):
    label = host.split(".")[0]
    assert len(label) + len("-xxxxx") <= 63, label
    assert host.split(".")[1] == name


@pytest.mark.parametrize("name,value,needle", [
    ("JOB_COMPLETION_INDEX", "", "needs JOB_COMPLETION_INDEX"),
    ("JOB_COMPLETION_INDEX", "3", "JOB_COMPLETION_INDEX=3 is not below TFX_PARALLEL_NUM_NODES=3"),
    (trainjob.ENV_NUM_NODES, "two", "TFX_PARALLEL_NUM_NODES must be an integer >= 1. "
                                    "Received: 'two'"),
    (trainjob.ENV_PORT, "0", "TFX_PARALLEL_TF_PORT must be an integer >= 1"),
])
def test_a_malformed_jobset_environment_is_named(name, value, needle):
  env = dict(_replica_env(1), **{name: value})
  with pytest.raises(ValueError, match=needle):
    trainjob.tf_config_from_jobset(env)


def test_the_replica_sets_tf_config_only_where_no_operator_did():
  assert json.loads(kube_replica.replica_tf_config(_replica_env(1)))["task"]["index"] == 1
  operator = dict(_replica_env(1), TF_CONFIG='{"cluster": {}}')  # A TFJob's replica.
  assert kube_replica.replica_tf_config(operator) is None
  assert kube_replica.replica_tf_config({}) is None


def test_multi_worker_mirrored_strategy_reads_the_derived_tf_config():
  """TensorFlow's own resolver (the one MultiWorkerMirroredStrategy uses) reads it as a
  cluster of workers with this task's type and index."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for i in range(2):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    os.environ["TF_CONFIG"] = trainjob.tf_config_from_jobset(_replica_env(i, nodes=2, name="t"))
    try:
      assert resolver.cluster_spec().as_dict() == {
          "worker": ["t-node-0-0.t:2222", "t-node-0-1.t:2222"]}
      assert (resolver.task_type, resolver.task_id) == ("worker", i)
    finally:
      del os.environ["TF_CONFIG"]


# --- Against the fake cluster. -------------------------------------------------------

def _job(tmp_path):
  root = tmp_path / "DistributedTrainer"
  return Job(config={"layout": "multi_worker"}, examples_uri=str(tmp_path / "examples"),
             feature_keys=["x0"], label_key="y", train_rows=10,
             model_dir=str(root / "model" / "1" / "Format-Serving"),
             model_run_dir=str(root / "model_run" / "1"), history_dir=str(root / "history" / "1"),
             checkpoint_dir=str(root / "_checkpoints" / "abc"), num_shards=2)


def _settings(**overrides):
  fields = dict(image="img:1", namespace="ns", worker_replicas=2, gpus_per_replica=1,
                tolerations=(TOLERATION,), max_restarts=3, pending_grace_seconds=30.0,
                timeout_seconds=600.0)
  fields.update(overrides)
  return kube_settings.TFJobSettings(**fields)


def _trainer_v2(cluster, runtime=True, max_restarts=3, deadline=86400):
  cluster.serve_trainer_v2_only()
  if runtime:  # As kubectl apply would write it: through the API server, pruned.
    code, answer, _ = cluster.route_trainer_v2(
        "POST", "ns", "trainingruntimes", None,
        trainjob.runtime_manifest("ns", max_restarts, deadline))
    assert code == 201, answer  # The TrainingRuntime webhook admits it ([tj-webhook]).
  return cluster


RELEASES = ("v2.0.0", "v2.1.0", "v2.2.0", "v2.3.0")


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_keeps_every_field_we_write_in_its_own_placement_field(release):
  """Pruning against each release's vendored CRD (tests/crds, fake_kube [prune]) drops
  nothing of the runtime or of the TrainJob written for that release's field, and drops
  the other releases' fields and TFJob-only ones."""
  from fake_kube import crd_schema, prune_crd  # pylint: disable=g-import-not-at-top
  runtime = trainjob.runtime_manifest("ns")
  assert prune_crd(runtime, crd_schema("trainingruntimes", release)) == runtime
  field = trainjob.RELEASE_FIELDS[release[:4]]
  body = trainjob.manifest(_spec(owner=("p", "u")), placement_field=field)
  schema = crd_schema("trainjobs", release)
  assert prune_crd(body, schema) == body
  for other in set(trainjob.PLACEMENT_FIELDS) - {field}:
    wrong = trainjob.manifest(_spec(), placement_field=other)
    assert other not in prune_crd(wrong, schema)["spec"]  # Silently gone: GPUs unscheduled.
  body["spec"]["runPolicy"] = {"activeDeadlineSeconds": 60}  # TFJob's, not TrainJob's.
  body["spec"]["trainer"]["numWorkers"] = 3
  pruned = prune_crd(body, schema)
  assert "runPolicy" not in pruned["spec"] and "numWorkers" not in pruned["spec"]["trainer"]


def test_every_name_we_write_passes_the_vendored_webhook_rules():
  """JobSet's webhook (fake_kube [js-validate], vendored from kubernetes-sigs/jobset
  v0.10.1 pkg/webhooks/jobset_webhook.go:313-369), the TrainJob CRD's name rules (read
  from each vendored CRD) and the TFJob webhook's DNS-1035 name, for the JobSet the
  Trainer controller builds from our runtime, up to 64 nodes."""
  import fake_kube  # pylint: disable=g-import-not-at-top
  name = kube_manifest.job_name("gs://b/pipeline/DistributedTrainer/_checkpoints/123")
  for release in RELEASES:
    assert fake_kube.trainjob_name_errors(name, release) == ""
  assert not fake_kube.dns1035_errors(name)  # The TFJob's name, the same digest.
  tfjob = kube_manifest.manifest(_spec(name=name))
  assert fake_kube.tfjob_webhook_errors(tfjob) == []
  tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "x"
  assert fake_kube.tfjob_webhook_errors(tfjob) == [
      "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: must have at "
      "least one container with name tensorflow"]
  with FakeCluster() as cluster:
    _trainer_v2(cluster)
    body = trainjob.manifest(_spec(name=name, worker_replicas=64))
    cluster.create_trainjob("ns", body)
    jobset = cluster.build_jobset(cluster.trainjobs[name])
  assert fake_kube.jobset_webhook_errors(jobset, "v0.10.1") == []
  # The rules are live: the name the runtime had before is refused, as upstream.
  jobset["spec"]["failurePolicy"]["rules"][0]["name"] = "permanent-failure"
  (error,) = fake_kube.jobset_webhook_errors(jobset, "v0.10.1")
  assert error.startswith("invalid failure policy rule name 'permanent-failure'")
  assert fake_kube.trainjob_name_errors("9-digest", "v2.1.0") == \
      "metadata.name must match RFC 1035 DNS label format"
  assert fake_kube.trainjob_name_errors("9-digest", "v2.0.0") == ""  # No CRD rule in v2.0.0,


@pytest.mark.parametrize("release", RELEASES)
def test_the_runtime_and_the_trainjob_pass_trainers_own_webhooks(release):
  """fake_kube [tj-webhook] (kubeflow/trainer trainingruntime_webhook.go and the JobSet
  plugin's Validate at each tag): the runtime, and the TrainJob as the API server of
  `release` has it (pruned by its CRD), placement in the probe's three fields or in the
  release's own, are admitted; the rules are live."""
  import fake_kube  # pylint: disable=g-import-not-at-top
  from fake_kube import crd_schema, prune_crd  # pylint: disable=g-import-not-at-top
  runtime = prune_crd(trainjob.runtime_manifest("ns"), crd_schema("trainingruntimes", release))
  assert fake_kube.trainingruntime_webhook_errors(runtime, release) == []
  name = kube_manifest.job_name("gs://b/pipeline/DistributedTrainer/_checkpoints/123")
  probe = trainjob.manifest(_spec(name=name + "-dry-run"))
  for field in trainjob.PLACEMENT_FIELDS:  # As client.placement_field sends it.
    probe["spec"].update(trainjob.placement_patch(field, {"a": "b"}, (TOLERATION,)))
  own = trainjob.manifest(_spec(name=name),
                          placement_field=trainjob.RELEASE_FIELDS[release[:4]])
  for body in (probe, own):
    pruned = prune_crd(body, crd_schema("trainjobs", release))
    assert fake_kube.trainjob_webhook_errors(pruned, runtime, release) == []
  # Live: a manager without a domain, a target Job the runtime does not have, a name that
  # is not a DNS-1035 label on v2.0.0 (its webhook checks it; later, the CRD does).
  errors = fake_kube.trainjob_webhook_errors(
      {"metadata": {"name": "9-digest"}, "spec": {
          "runtimePatches": [{"manager": "tfx-parallel", "trainingRuntimeSpec": {
              "template": {"spec": {"replicatedJobs": [{"name": "worker"}]}}}}],
          "podTemplateOverrides": [{"targetJobs": [{"name": "worker"}]}]}}, runtime, release)
  assert ('spec.runtimePatches.manager: Invalid value: "tfx-parallel": must be a '
          'domain-prefixed path (such as "acme.io/foo")') in errors
  assert ("spec.runtimePatches: Invalid value: ...: must not have replicated job that "
          "doesn't exist in the runtime job template") in errors
  assert ("spec.podTemplateOverrides: Invalid value: ...: must not have targetJob that "
          "doesn't exist in the runtime job template") in errors
  assert any(e.startswith('metadata.name: Invalid value: "9-digest"') for e in errors) == (
      release == "v2.0.0")
  runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
      "spec"]["containers"][0]["name"] = "tensorflow"
  assert bool(fake_kube.trainingruntime_webhook_errors(runtime, release)) == (
      release != "v2.0.0")


def test_a_dry_run_trainers_webhook_refuses_fails_before_anything_is_created(tmp_path,
                                                                             monkeypatch):
  """A runtimePatch manager Trainer v2.3's webhook refuses (not a domain-prefixed path):
  the dry run is refused, the step fails naming it, and no TrainJob is created."""
  monkeypatch.setattr(trainjob, "PATCH_MANAGER", "tfx-parallel")
  with _trainer_v2(FakeCluster(trainer_version="v2.3.0")) as cluster:
    with pytest.raises(RuntimeError, match="the server-side dry run that finds this Trainer "
                       "release's placement field was refused, so nothing was created: 422 "
                       "Unprocessable Entity: admission webhook \"validator.trainjob.trainer."
                       "kubeflow.org\" denied the request: spec.runtimePatches.manager"):
      _run(cluster, tmp_path)
    assert not cluster.trainjobs and not cluster.deleted_trainjobs


@pytest.mark.parametrize("release", ["v2.1.0", "v2.3.0"])
def test_a_stopped_trainer_controller_with_its_webhooks_fails_before_anything(tmp_path,
                                                                             release):
  """fake_kube [tj-webhook-down]: the controller manager also serves Trainer's webhooks
  (failurePolicy Fail), so with its pods gone the API server refuses the dry run with a
  500; the step fails at once naming the webhook and the controller to check."""
  with _trainer_v2(FakeCluster(trainer_version=release)) as cluster:
    cluster.trainer_webhook_reachable = False
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path)
    assert not cluster.trainjobs
  message = str(e.value)
  assert "dry run that finds this Trainer release's placement field was refused" in message
  assert "500 Internal Server Error: Internal error occurred: failed calling webhook" in message
  assert message.endswith(
      "(the Kubeflow Trainer controller serves these webhooks and is not running: kubectl get "
      "deployment -A --field-selector metadata.name=kubeflow-trainer-controller-manager)")


def _run(cluster, tmp_path, settings=None):
  def clock():  # 10 s per GET of the job, as the fake's own clock.
    return 10 * sum(1 for m, p, _, _ in cluster.requests
                    if m == "GET" and ("/trainjobs/" in p or "/tfjobs/" in p))
  return kube_launch.run(_job(tmp_path), settings or _settings(),
                   client=kube_client.TFJobClient(cluster.api_client()), now=lambda: 1700000000,
                   poll_seconds=0, clock=clock)


def test_a_two_node_trainjob_succeeds_on_a_cluster_with_only_trainer_v2(tmp_path):
  with _trainer_v2(FakeCluster()) as cluster:
    pods = {}
    tick = cluster.tick_trainjob

    def tick_and_keep(name):  # The pods go with the TrainJob's deletion: keep them.
      tick(name)
      pods.update(cluster.pods)
    cluster.tick_trainjob = tick_and_keep
    result = _run(cluster, tmp_path)
    name = cluster.deleted_trainjobs[0]
    assert not cluster.pods and not cluster.batch_jobs and not cluster.jobsets  # Collected.
  jobset_hosts = sorted(f'{p["spec"]["hostname"]}.{p["spec"]["subdomain"]}'
                        for p in pods.values())
  assert result.succeeded and result.restarts == 0, result.message
  assert result.message == "AllJobsCompleted: jobset completed successfully"
  assert name == kube_manifest.job_name(_job(tmp_path).checkpoint_dir)
  assert sorted(result.logs) == sorted(pods)  # Every node's log, container node.
  assert all("exiting with 0" in text for text in result.logs.values())
  logs = [q for m, p, q, _ in cluster.requests if p.endswith("/log")]
  assert logs and all(q["container"] == ["node"] for q in logs)
  assert jobset_hosts == [f"{name}-node-0-{i}.{name}" for i in range(2)]
  posted = next(b for m, p, q, b in cluster.requests
                if m == "POST" and p.endswith("/trainjobs") and not q.get("dryRun"))
  assert posted["spec"]["trainer"]["numNodes"] == 2
  assert not [p for _, p, _, _ in cluster.requests if "/tfjobs" in p]
  assert cluster.requests[-1][:2] == (
      "DELETE", f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/ns/trainjobs/{name}")


def test_each_pod_derives_the_tf_config_of_its_own_jobset_hostname(tmp_path):
  """The runtime's env, resolved as the kubelet does (downward API, the Job controller's
  JOB_COMPLETION_INDEX), gives each pod a worker list of the hostnames JobSet gave the
  pods, and its own index: what MultiWorkerMirroredStrategy needs."""
  with _trainer_v2(FakeCluster({"node-0": [Stuck()], "node-1": [Stuck()]})) as cluster:
    k8s = kube_client.TrainJobClient(cluster.api_client())
    k8s.create(trainjob.manifest(_spec(worker_replicas=2, node_selector={}, tolerations=())))
    for _ in range(2):
      k8s.get("train-1", "ns")
    pods = k8s.pods("train-1", "ns")
    assert len(pods) == 2
    hosts = {}
    for pod in pods:
      env = cluster.container_env(pod, pod["spec"]["containers"][0])
      config = json.loads(trainjob.tf_config_from_jobset(env))
      hosts[config["task"]["index"]] = (config["cluster"]["worker"],
                                        f'{pod["spec"]["hostname"]}.{pod["spec"]["subdomain"]}')
  assert sorted(hosts) == [0, 1]
  for index, (workers, own) in hosts.items():
    assert workers[index] == own + ":2222"
    assert workers == [f"train-1-node-0-{i}.train-1:2222" for i in range(2)]


def test_a_failing_node_fails_the_trainjob_at_once_naming_its_exit_code(tmp_path):
  with _trainer_v2(FakeCluster({"node-1": [Exit(1)]})) as cluster:
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path)
    name = cluster.deleted_trainjobs[0]
    restarts = cluster.jobsets.get(name, {}).get("status", {}).get("restarts")
  message = str(e.value)
  assert (f"TrainJob ns/{name} ended Failed: FailJobSetFailurePolicyAction: applying FailJobSet "
          f"failure policy action (first failed job: {name}-node-0)") in message
  assert f"Last failure: pod {name}-node-0-1-" in message
  assert ("container node exited with code 1 (permanent under restartPolicy ExitCode)"
          in message)
  assert restarts in (0, None)  # Not restarted: a code error would fail again.


def test_an_oom_killed_node_restarts_the_jobset_and_the_trainjob_succeeds(tmp_path):
  with _trainer_v2(FakeCluster({"node-1": [Exit(137, "OOMKilled"), Exit(0)]})) as cluster:
    result = _run(cluster, tmp_path)
    events = [(e["reason"], e["message"]) for e in cluster.events]
  assert result.succeeded and result.restarts == 1, result.message
  name = kube_manifest.job_name(_job(tmp_path).checkpoint_dir)
  assert ("RestartJobSetFailurePolicyAction",
          f"applying RestartJobSet failure policy action (first failed job: {name}-node-0)"
          ) in events


@pytest.mark.parametrize("runtime_limit,executor_limit,needle", [
    (1, 3, "ReachedMaxRestarts: jobset failed due to reaching max number of restarts"),
    (5, 1, "restarted 2 times, more than the limit of 1 (TFX_PARALLEL_TFJOB_MAX_RESTARTS); "
           "last failure: pod"),
])
def test_retryable_failures_stop_at_the_lower_restart_limit(tmp_path, runtime_limit,
                                                            executor_limit, needle):
  with _trainer_v2(FakeCluster({"node-0": [Exit(137, "OOMKilled")]}),
                   max_restarts=runtime_limit) as cluster:
    with pytest.raises(RuntimeError, match="ended Failed") as e:
      _run(cluster, tmp_path, _settings(max_restarts=executor_limit))
  assert needle in str(e.value)
  assert "exited with code 137 (OOMKilled)" in str(e.value)


def test_the_runtime_deadline_fails_the_trainjob_without_a_restart(tmp_path):
  """A job whose executor was killed (no heartbeat check here) ends at the runtime's
  activeDeadlineSeconds: DeadlineExceeded is a FailJobSet reason, not a restart."""
  with _trainer_v2(FakeCluster({"node-0": [Stuck()]}), deadline=60) as cluster:
    with pytest.raises(RuntimeError, match="ended Failed: FailJobSetFailurePolicyAction") as e:
      _run(cluster, tmp_path, _settings(pending_grace_seconds=1e6))
    name = cluster.deleted_trainjobs[0]
  assert f"(first failed job: {name}-node-0)" in str(e.value)
  assert not [ev for ev in cluster.events if ev["reason"] == "RestartJobSetFailurePolicyAction"]


def test_a_node_the_api_server_refuses_fails_the_step_within_the_grace(tmp_path):
  with _trainer_v2(FakeCluster({"node-1": [CreateRefused()]})) as cluster:
    with pytest.raises(RuntimeError, match="the Job controller cannot create a replica pod: "
                       "FailedCreate: Error creating: pods .* exceeded quota"):
      _run(cluster, tmp_path)


# --- Discovery, the runtime check and RBAC: before anything is created. --------------

def test_discovery_picks_tfjob_where_it_is_served(tmp_path):
  with FakeCluster() as cluster:
    cluster.served[trainjob.GROUP + "/" + trainjob.VERSION] = ["trainjobs"]  # Both served.
    result = _run(cluster, tmp_path)
  assert result.succeeded
  assert [p for m, p, _, _ in cluster.requests if m == "POST" and p.endswith("/tfjobs")]
  assert not [p for _, p, _, _ in cluster.requests if "/trainjobs" in p]


def test_neither_backend_fails_before_anything_naming_both_with_versions(tmp_path):
  with FakeCluster() as cluster:
    cluster.served = {}
    with pytest.raises(RuntimeError, match="serves neither TFJob") as e:
      _run(cluster, tmp_path)
    assert [m for m, _, _, _ in cluster.requests] == ["GET"] * len(cluster.requests)
  for needle in ("Kubeflow Trainer v2.1.0", trainjob.TRAINER_INSTALL, "JobSet v0.10.1",
                 "tfx-parallel runtime --namespace", "training operator v1.9.4",
                 kube_client.TRAINING_OPERATOR_INSTALL):
    assert needle in str(e.value)
  assert not (tmp_path / "DistributedTrainer" / "_tfjobs").exists()


def test_trainer_v2_without_the_runtime_fails_before_anything(tmp_path):
  with _trainer_v2(FakeCluster(), runtime=False) as cluster:
    with pytest.raises(RuntimeError, match="namespace 'ns' has no TrainingRuntime "
                       "'tfx-parallel-tensorflow'; nothing was created. Install it: "
                       r"'tfx-parallel runtime --namespace ns \| kubectl apply -f -'"):
      _run(cluster, tmp_path)
    assert not [m for m, _, _, _ in cluster.requests if m not in ("GET", "POST")]
    assert not [p for m, p, _, _ in cluster.requests if m == "POST" and "/trainjobs" in p]
    # The fake is as strict as Trainer's webhook about it.
    from kubernetes.client.rest import ApiException  # pylint: disable=g-import-not-at-top
    with pytest.raises(ApiException) as e:
      kube_client.TrainJobClient(cluster.api_client()).create(trainjob.manifest(_spec()))
    assert e.value.status == 422 and "specified trainingRuntime must be created" in e.value.body
  assert not (tmp_path / "DistributedTrainer" / "_tfjobs").exists()


def test_a_chief_on_trainer_v2_fails_before_anything(tmp_path):
  with _trainer_v2(FakeCluster()) as cluster:
    with pytest.raises(ValueError, match="TFX_PARALLEL_TFJOB_CHIEF=1"):
      _run(cluster, tmp_path, _settings(chief_replicas=1))
    assert [m for m, _, _, _ in cluster.requests] == ["GET"] * len(cluster.requests)


def test_missing_trainjob_rbac_fails_before_anything_naming_the_verb(tmp_path):
  with _trainer_v2(FakeCluster()) as cluster:
    cluster.denied = {("create", "trainer.kubeflow.org", "trainjobs"),
                      ("get", "trainer.kubeflow.org", "trainingruntimes")}
    with pytest.raises(PermissionError, match="may not create trainjobs "
                       r"\(trainer.kubeflow.org\), get trainingruntimes \(trainer.kubeflow.org\)"
                       " in namespace 'ns'; the TrainJob was not created"):
      _run(cluster, tmp_path)
    assert not [p for _, p, _, _ in cluster.requests if "/trainjobs" in p]


def test_the_role_grants_both_backends_and_the_runtime_command_prints_the_runtime(capsys):
  import yaml  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  role, _ = kube_manifest.rbac_manifests("kubeflow", "pipeline-runner")
  granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
             for r in rule["resources"] for v in rule["verbs"]
             if "resourceNames" not in rule}  # Only the store's secret (test_kubeflow_tfjob).
  assert granted == set(kube_manifest.REQUIRED_ACCESS) | set(trainjob.REQUIRED_ACCESS)
  assert cli.main(["runtime", "--namespace", "team-a", "--max-restarts", "2",
                   "--active-deadline-seconds", "3600"]) == 0
  assert yaml.safe_load(capsys.readouterr().out) == trainjob.runtime_manifest("team-a", 2, 3600)


def test_sigterm_deletes_the_trainjob(tmp_path):
  with _trainer_v2(FakeCluster({"node-0": [Stuck()]})) as cluster:
    cluster.on_create = lambda: os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(kube_launch.ExecutorTerminated, match="SIGTERM.*the TrainJob is deleted"):
      _run(cluster, tmp_path, _settings(pending_grace_seconds=1e6))
    assert len(cluster.deleted_trainjobs) == 1 and not cluster.trainjobs
    assert not cluster.pods and not cluster.jobsets


@pytest.mark.parametrize("earlier,how", [("running", "Adopted"), ("failed", "Replaced")])
def test_a_retried_step_adopts_or_replaces_the_trainjob_of_the_attempt_before(
    tmp_path, earlier, how):
  script = {"node-0": [Exit(1), Exit(0)]} if earlier == "failed" else {}
  with _trainer_v2(FakeCluster(script)) as cluster:
    k8s = kube_client.TrainJobClient(cluster.api_client())
    name = kube_manifest.job_name(_job(tmp_path).checkpoint_dir)
    k8s.create(trainjob.manifest(_spec(name=name, worker_replicas=2)))
    for _ in range(4 if earlier == "failed" else 1):
      k8s.get(name, "ns")
    assert (k8s.state(k8s.get(name, "ns"))[0] == kube_watch.FAILED) == (earlier == "failed")
    body = trainjob.manifest(_spec(name=name, worker_replicas=2))
    assert kube_launch._submit(k8s, body, sleep=lambda s: None) == how  # pylint: disable=protected-access
    result = k8s.wait(name, "ns", timeout_seconds=600, poll_seconds=0)
  assert result.succeeded, result.message
  posts = [p for m, p, _, _ in cluster.requests if m == "POST" and p.endswith("/trainjobs")]
  assert len(posts) == (3 if earlier == "failed" else 2)  # First, the retry's 409, the new one.


@pytest.mark.slow
def test_two_real_replicas_train_with_the_tf_config_they_derive(tmp_path):
  """The fake kubelet runs the replica entry point of both nodes for real, with the env
  the runtime and the Job controller give them; each derives its TF_CONFIG from it (the
  JobSet hostnames, mapped to 127.0.0.1 ports as DNS would: fake_kube.local_hosts) and
  MultiWorkerMirroredStrategy trains across the two processes."""
  import trainer_util  # pylint: disable=g-import-not-at-top  # Imports TensorFlow.
  from fake_kube import Run  # pylint: disable=g-import-not-at-top
  examples = str(tmp_path / "examples")
  feature_keys, _, rows = trainer_util.write_examples(examples, rows=256)
  job = Job(**trainer_util.job_dict(str(tmp_path / "out"), examples, feature_keys, rows,
                                    layout="multi_worker", steps=40, epochs=1,
                                    checkpoint_every=20, log_every=20, batch_size=32))
  with _trainer_v2(FakeCluster({"node-0": [Run()], "node-1": [Run()]},
                               local_network=True, seconds_per_poll=0.5)) as cluster:
    result = kube_launch.run(job, _settings(gpus_per_replica=0, timeout_seconds=900.0),
                       client=kube_client.TFJobClient(cluster.api_client()), poll_seconds=0.5)
    mapped = sorted(cluster.ports)
  assert result.succeeded, (result.message, result.logs)
  name = kube_manifest.job_name(job.checkpoint_dir)
  assert mapped == [f"{name}-node-0-{i}.{name}:2222" for i in range(2)]
  with open(os.path.join(job.history_dir, "history.json")) as f:
    history = json.load(f)
  assert history["records"][-1]["step"] == 40
  assert history["replicas"] == 2, history["replicas"]  # One strategy over both processes.
  assert len(result.logs) == 2 and all("replicas 2" in text for text in result.logs.values())
  assert os.path.exists(os.path.join(job.model_dir, "saved_model.pb"))


def test_a_jobset_restart_names_the_failed_job_when_no_poll_saw_the_pod():
  """JobSet deletes every Job of an attempt when it restarts, so a poll every 10 s can miss
  the failed pod; its RestartJobSetFailurePolicyAction event (message format cited in
  kube/watch.py) is then the cause on the console, not "not recorded"."""
  watch = kube_watch.PodWatch(max_restarts=0, grace_seconds=300.0,
                              container=trainjob.CONTAINER_NAME,
                              replica_of=trainjob.replica_key)
  assert watch.cause([]) == ""
  events = [{"reason": kube_watch.RESTART_JOBSET, "lastTimestamp": f"2026-01-01T00:0{i}:00Z",
             "message": ("applying RestartJobSet failure policy action (first failed job: "
                         f"tj-node-{i})")} for i in (0, 1)]
  cause = watch.cause(events)
  assert cause == ("RestartJobSetFailurePolicyAction: applying RestartJobSet failure policy "
                   "action (first failed job: tj-node-1) (the restart deleted the failed pod "
                   "before a poll saw its exit code)")
  assert watch.budget_message(cause).endswith("last failure: " + cause)
  # A pod exit that was seen wins over the event.
  watch.observe([{"metadata": {"name": "tj-node-0-1-abc", "uid": "u1"}, "status": {
      "containerStatuses": [{"name": "node", "state": {"terminated": {"exitCode": 137,
                                                                      "reason": "OOMKilled"}}}]}}],
                now=0.0)
  assert watch.cause(events) == "pod tj-node-0-1-abc: container node exited with code 137 (OOMKilled)"


def test_deleting_the_kfp_pod_deletes_the_trainjob_its_jobset_and_pods():
  """fake_kube [gc]: the TrainJob is owned by the step's pod; the JobSet is owned by the
  TrainJob ([tj-build]), its Jobs and pods by the JobSet; one deletion frees them all."""
  from fake_kube import Hang  # pylint: disable=g-import-not-at-top
  body = trainjob.manifest(_spec(owner=("run-1-trainer", "uid-1"), worker_replicas=2))
  with _trainer_v2(FakeCluster({"node-0": [Hang()], "node-1": [Hang()]})) as cluster:
    cluster.owner_pods[("ns", "run-1-trainer")] = "uid-1"
    k8s = kube_client.TrainJobClient(cluster.api_client())
    k8s.create(body)
    for _ in range(3):
      k8s.get("train-1", "ns")
    assert len(k8s.pods("train-1", "ns")) == 2 and "train-1" in cluster.jobsets
    cluster.delete_owner_pod("ns", "run-1-trainer")
    assert not cluster.trainjobs and not cluster.jobsets and not cluster.batch_jobs
    assert not cluster.pods and cluster.deleted_trainjobs == ["train-1"]


# --- Per Trainer release, webhooks, controllers that do not act (issue 48). -----------

@pytest.mark.parametrize("release", RELEASES)
def test_placement_resources_and_env_reach_the_pods_on_each_release(tmp_path, release):
  """The executor finds the release's placement field by a server-side dry run, and the
  node selector, tolerations, resources and env reach every pod on v2.0 to v2.3."""
  seen = {}
  with _trainer_v2(FakeCluster(trainer_version=release)) as cluster:
    tick = cluster.tick_trainjob

    def tick_and_keep(name):
      tick(name)
      seen.update(cluster.pods)
    cluster.tick_trainjob = tick_and_keep
    result = _run(cluster, tmp_path, _settings(
        node_selector={"cloud.google.com/gke-accelerator": "nvidia-l4"},
        resources={"requests": {"cpu": "2"}}))
    dry_runs = [q for m, p, q, _ in cluster.requests if m == "POST" and q.get("dryRun")]
  assert result.succeeded, result.message
  assert len(dry_runs) == 1
  assert len(seen) == 2
  for pod in seen.values():
    assert pod["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["spec"]["tolerations"] == [TOLERATION]
    (node,) = [c for c in pod["spec"]["containers"] if c["name"] == "node"]
    assert node["resources"] == {"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}
    assert {e["name"] for e in node["env"]} >= {"TF_USE_LEGACY_KERAS",
                                                trainjob.ENV_NUM_NODES}


def test_a_jobset_the_webhook_refuses_fails_the_step_within_the_grace_naming_it(
    tmp_path, monkeypatch):
  """With the rule name the runtime had before (kube/trainjob.py), the Trainer controller's
  JobSet apply is refused; the step fails after the pending grace, quoting the event."""
  monkeypatch.setattr(trainjob, "FAILURE_RULE_NAME", "permanent-failure")
  with _trainer_v2(FakeCluster()) as cluster:
    with pytest.raises(RuntimeError) as e:
      _run(cluster, tmp_path)
    assert not cluster.jobsets
  assert ("nothing started in 30 s (the 30 s grace, TFX_PARALLEL_TFJOB_PENDING_GRACE_SECONDS): "
          "the Kubeflow Trainer controller cannot create the JobSet: "
          "TrainJobResourcesCreationFailed: TrainJob resources reconciliation failed: "
          "admission webhook \"vjobset.kb.io\" denied the request: invalid failure policy "
          "rule name 'permanent-failure'") in str(e.value)


@pytest.mark.parametrize("stopped,needle", [
    ("trainer_controller_running", "no JobSet, no event and no condition: the Kubeflow "
     "Trainer controller is not running"),
    ("jobset_controller_running", "exists but has no Job or pod: JobSet's controller is not "
     "running")])
def test_a_controller_that_does_not_run_fails_the_step_within_the_grace(tmp_path, stopped,
                                                                        needle):
  with _trainer_v2(FakeCluster()) as cluster:
    setattr(cluster, stopped, False)
    with pytest.raises(RuntimeError, match="nothing started in 30 s") as e:
      _run(cluster, tmp_path)
  assert needle in str(e.value)


def test_a_stopped_jobset_controller_with_its_webhooks_fails_within_the_grace(tmp_path):
  """fake_kube: JobSet's webhooks are served by its controller's pods, so with them gone the
  Trainer controller's apply fails (its event quotes the apiserver's 500); the step names
  JobSet's controller and how to find it."""
  with _trainer_v2(FakeCluster()) as cluster:
    cluster.jobset_webhook_reachable = False
    with pytest.raises(RuntimeError, match="nothing started in 30 s") as e:
      _run(cluster, tmp_path)
    assert not cluster.jobsets
  assert ('TrainJobResourcesCreationFailed: TrainJob resources reconciliation failed: Internal '
          'error occurred: failed calling webhook "mjobset.kb.io"') in str(e.value)
  assert ("(JobSet's controller serves that webhook and is not running: kubectl get deployment "
          "-A --field-selector metadata.name=jobset-controller-manager)") in str(e.value)


def test_a_trainer_controller_stopped_after_the_pods_finished_fails_the_step(tmp_path):
  with _trainer_v2(FakeCluster()) as cluster:
    reconcile = cluster.reconcile_jobset

    def stop_once_done(jobset):  # The JobSet completes, the TrainJob's status never does.
      reconcile(jobset)
      if cluster.true_condition(jobset, "Completed"):
        cluster.trainer_controller_running = False
        jobset["status"]["conditions"].clear()
    cluster.reconcile_jobset = stop_once_done
    with pytest.raises(RuntimeError, match="every replica pod succeeded .* and the job's status "
                       "did not follow: the Kubeflow Trainer controller has stopped"):
      _run(cluster, tmp_path)


def test_the_access_review_evaluates_the_generated_role(tmp_path):
  """fake_kube [rbac]: the SelfSubjectAccessReview answers from the Role `tfx-parallel
  rbac` prints, resourceNames included; a Role without one verb fails before anything."""
  role, _ = kube_manifest.rbac_manifests("ns", "default-editor")
  with _trainer_v2(FakeCluster()) as cluster:
    cluster.role_rules = role["rules"]
    assert _run(cluster, tmp_path).succeeded
    assert cluster.allowed("get", "", "secrets", "mlpipeline-minio-artifact")
    assert not cluster.allowed("get", "", "secrets", "another-secret")  # resourceNames.
    assert not cluster.allowed("list", "", "secrets")
    cluster.role_rules = [r for r in role["rules"] if r["resources"] != ["trainingruntimes"]]
    with pytest.raises(PermissionError, match=r"may not get trainingruntimes"):
      _run(cluster, tmp_path / "again")


def test_deleting_a_pod_sends_sigterm_and_waits_out_the_grace_period(tmp_path):
  """fake_kube [sigterm]: a process that ends on SIGTERM ends that way; one that ignores
  it is killed once the pod's terminationGracePeriodSeconds has passed."""
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  marker = tmp_path / "got-sigterm"
  handles = ("import signal, sys, time, pathlib\n"
             f"def h(*a): pathlib.Path({str(marker)!r}).write_text('1'); sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, h)\nprint('ready', flush=True)\ntime.sleep(60)\n")
  ignores = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
             "print('ready', flush=True)\ntime.sleep(60)\n")
  with FakeCluster() as cluster:
    for name, code in (("handles", handles), ("ignores", ignores)):
      proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
      assert proc.stdout.readline() == "ready\n"  # Its handler is installed.
      cluster.procs[name] = proc
      cluster.pods[name] = {"spec": {"terminationGracePeriodSeconds": 1}}
      cluster.delete_pod(name)
      assert name not in cluster.pods and proc.poll() is not None
  assert cluster.terminations == {"handles": "SIGTERM", "ignores": "SIGKILL"}
  assert marker.read_text() == "1"


def test_a_tfjob_no_operator_acts_on_fails_within_the_grace(tmp_path):
  with FakeCluster() as cluster:
    cluster.operator_running = False
    with pytest.raises(RuntimeError, match="TFJob ns/.*: nothing started in 30 s .*no Created "
                       "condition, no pod and no event: the training operator is not running"):
      _run(cluster, tmp_path, _settings(tolerations=()))


@pytest.mark.parametrize("release,field", [("v2.0", "podSpecOverrides"),
                                           ("v2.1", "podTemplateOverrides"),
                                           ("v2.3", "runtimePatches"), ("tfjob", None)])
def test_the_manifests_command_prints_what_a_step_submits_per_release(capsys, release, field):
  import yaml  # pylint: disable=g-import-not-at-top
  from fake_kube import crd_schema, prune_crd  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  assert cli.main(["manifests", "--release", release, "--namespace", "team-a", "--image",
                   "reg/t:1", "--env", "TFX_PARALLEL_TFJOB_GPUS=1", "--env",
                   'TFX_PARALLEL_TFJOB_NODE_SELECTOR={"pool": "gpu"}']) == 0
  docs = list(yaml.safe_load_all(capsys.readouterr().out))
  if field is None:
    (tfjob,) = docs
    assert tfjob["kind"] == "TFJob"
    assert prune_crd(tfjob, crd_schema("tfjobs", "v1.9.4")) == tfjob
    return
  runtime, job = docs
  assert runtime == trainjob.runtime_manifest("team-a")
  assert job["spec"]["trainer"]["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": "1"}}
  assert list(set(job["spec"]) & set(trainjob.PLACEMENT_FIELDS)) == [field]
  full = {"v2.0": "v2.0.0", "v2.1": "v2.1.0", "v2.3": "v2.3.0"}[release]
  assert prune_crd(job, crd_schema("trainjobs", full)) == job  # Kept whole by that release.
