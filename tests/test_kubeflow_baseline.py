"""The blessing loop on Kubeflow (issue #50 item 4): ``evaluator.baseline: latest_blessed``
with the baseline looked up in KFP's own ML Metadata and read from KFP's object store.

One compiled pipeline (PartitionedExampleGen -> DistributedTrainer -> ConvergenceEvaluator
-> the stock Pusher; no resolver node: the Argo compiler rejects them) runs three times
through the KFP stand-in (tests/kubeflow_launcher.py) on one ML Metadata store, served to
the steps over ML Metadata's gRPC API as metadata-grpc-service serves the cluster's, and
one S3 object store (moto's server, as KFP's MinIO/SeaweedFS; its keys in KFP's secret
``mlpipeline-minio-artifact`` on the fake API server, tests/fake_kube.py): good (enough
steps), worse (far fewer), better (more). The worse run's baseline is run 1's Model and
the better run's too (run 2's was not blessed): no launcher downloads it (it is no input
of the step), so the evaluator reads it at the ``minio://`` URI ML Metadata records, as
``s3://`` through tensorflow-io, set up by the entry point from the launcher's session and
KFP's secret (kubeflow/entrypoint.py ``baseline_store``).
"""
import json
import os

import pytest

from fake_kube import FakeCluster
from kubeflow_launcher import EXECUTOR_LOGS, Launcher
from test_kubeflow_launcher import _small_config
from test_kubeflow_object_store import BUCKET, _kubeconfig, _store_environ
from test_kubeflow_object_store import moto  # pylint: disable=unused-import  # The fixture.
from tfx_parallel.components.convergence_evaluator import baseline
from tfx_parallel.kubeflow import entrypoint

ROOT = f"minio://{BUCKET}/v2/artifacts"  # The open-source install's default.
STEPS = {"good": 60, "worse": 3, "better": 300}  # As the local loop (test_evaluator_baseline).


def _package(steps: int, env, serving: str):
  """The compiled package of the pipeline with the stock Pusher, as a user's own
  pipeline script builds it: create_components + Pusher, then kubeflow/package.build."""
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx_parallel.kubeflow import config as config_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.kubeflow import package as package_lib  # pylint: disable=g-import-not-at-top
  from tfx_parallel.pipeline import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
  data = _small_config()
  data["pipeline_root"] = ROOT
  data["pipeline"]["pipeline_name"] = "loop"
  data["pipeline"]["example_gen"] = {"rows": 400, "num_features": 2, "noise": 0.1}
  data["pipeline"]["trainer"] = {"layout": "single", "steps": steps, "min_steps": 0,
                                 "batch_size": 32, "learning_rate": 0.1, "log_every": 1,
                                 "steps_per_execution": 1}
  data["pipeline"]["evaluator"] = {"baseline": "latest_blessed", "require_converged": False,
                                   "min_eval_examples": 50}
  data["components"]["ConvergenceEvaluator"] = {"env": env}
  config = config_lib.from_mapping(data)
  components = pipeline_lib.create_components(config.pipeline)
  trainer = next(c for c in components if c.id == "DistributedTrainer")
  evaluator = next(c for c in components if c.id == "ConvergenceEvaluator")
  pusher = tfx.components.Pusher(
      model=trainer.outputs["model"], model_blessing=evaluator.outputs["blessing"],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(base_directory=serving)))
  pipeline = tfx.dsl.Pipeline(pipeline_name="loop", pipeline_root=ROOT,
                              components=components + [pusher],
                              enable_cache=config.pipeline.enable_cache)
  return package_lib.build(config, pipeline)


@pytest.fixture(scope="module")
def kfp_loop(tmp_path_factory, moto):  # pylint: disable=redefined-outer-name
  """Runs good, worse, better; {name: {task: {key: recorded artifact}}}, and
  ``"logs"``: {name: the evaluator's executor-logs}, ``"cached"``, ``"gets"``, ``"serving"``."""
  endpoint, s3, secret = moto
  home = tmp_path_factory.mktemp("kfp-loop")
  serving = str(home / "serving")  # A volume the Pusher's pod mounts, here a directory.
  runs = {"logs": {}, "serving": serving}
  with FakeCluster() as cluster:  # The API server of KFP's secret.
    cluster.secrets[("default", "mlpipeline-minio-artifact")] = dict(secret)
    env = {"KUBECONFIG": str(_kubeconfig(home, cluster.host)), **_store_environ(endpoint)}
    packages = {name: _package(steps, env, serving) for name, steps in STEPS.items()}
    first = packages["good"]
    launcher = Launcher(first.pipeline_spec, str(home / "launcher"), ROOT, run_id="run-good",
                        platform_spec=first.platform_spec, s3=s3)
    try:  # The store's gRPC server stops whatever happens (its threads would hold the exit).
      for name, package in packages.items():
        if name != "good":
          launcher.new_run(f"run-{name}", package.pipeline_spec, package.platform_spec)
        launcher.run()
        runs[name] = json.loads(json.dumps(launcher.mlmd))
        logs = launcher.mlmd["ConvergenceEvaluator"][EXECUTOR_LOGS]["uri"]
        runs["logs"][name] = s3.get_object(Bucket=BUCKET, Key=logs.split(f"{BUCKET}/", 1)[
            1])["Body"].read().decode()
      runs["cached"] = list(launcher.cached_tasks)
      runs["gets"] = [p for m, p, _, _ in cluster.requests if m == "GET"]
      yield runs
    finally:
      launcher.metadata.close()


def _props(runs, name, task, key):
  return runs[name][task][key]["custom_properties"]


def _comparison(runs, name, s3):
  uri = runs[name]["ConvergenceEvaluator"]["metrics"]["uri"]
  key = uri.split(f"{BUCKET}/", 1)[1] + "/" + baseline.FILE_NAME
  found = s3.list_objects_v2(Bucket=BUCKET, Prefix=key).get("Contents", [])
  return json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()) if found else None


def _assert_pushed(runs, name):
  pushed = _props(runs, name, "Pusher", "pushed_model")
  assert int(pushed["pushed"]) == 1, pushed
  destination = pushed["pushed_destination"]
  assert os.path.dirname(destination) == runs["serving"]
  assert os.path.isfile(os.path.join(destination, "saved_model.pb"))


@pytest.mark.slow
def test_first_kfp_run_is_judged_alone_blessed_and_pushed(kfp_loop, moto):
  # pylint: disable=redefined-outer-name
  assert int(_props(kfp_loop, "good", "ConvergenceEvaluator", "blessing")["blessed"]) == 1
  assert _comparison(kfp_loop, "good", moto[1]) is None
  assert "no blessed model in this pipeline yet" in kfp_loop["logs"]["good"]
  _assert_pushed(kfp_loop, "good")
  # The ingest of runs 2 and 3 was served from KFP's cache (same settings, same key).
  assert kfp_loop["cached"] == ["PartitionedExampleGen"] * 2


@pytest.mark.slow
def test_worse_kfp_run_is_not_blessed_nor_pushed_and_its_log_says_why(kfp_loop, moto):
  # pylint: disable=redefined-outer-name
  good_model = kfp_loop["good"]["DistributedTrainer"]["model"]
  assert int(_props(kfp_loop, "worse", "ConvergenceEvaluator", "blessing")["blessed"]) == 0
  pushed = _props(kfp_loop, "worse", "Pusher", "pushed_model")
  assert int(pushed["pushed"]) == 0 and "pushed_destination" not in pushed
  assert len(os.listdir(kfp_loop["serving"])) == 2  # Runs 1 and 3 only.
  comparison = _comparison(kfp_loop, "worse", moto[1])
  # The baseline is run 1's Model at the URI KFP recorded (minio://), read from the store.
  assert comparison["baseline_source"] == "latest_blessed"
  assert comparison["baseline_uri"] == good_model["uri"] and good_model["uri"].startswith(
      ROOT + "/loop/run-good/DistributedTrainer/")
  [mse] = [m for m in comparison["metrics"] if m["name"] == "eval_mse"]
  assert mse["candidate"] > mse["baseline"] and not comparison["passed"]
  metrics = _props(kfp_loop, "worse", "ConvergenceEvaluator", "metrics")
  assert metrics["baseline_uri"] == good_model["uri"] and int(metrics["baseline_passed"]) == 0
  good_mse = _props(kfp_loop, "good", "ConvergenceEvaluator", "metrics")["eval_mse"]
  assert mse["baseline"] == pytest.approx(good_mse, rel=1e-5)  # Doubles keep 6 decimals.
  reason = "ConvergenceEvaluator: not blessed: " + baseline.blessing_message(comparison)
  print("worse model on KFP:", reason)
  log = kfp_loop["logs"]["worse"]
  assert reason in log, log[-3000:]
  assert "evaluator.change_thresholds.regression.eval_mse.relative 0.01" in reason
  assert "Baseline lookup: the step reads a looked-up Model at its object store URI" in log


@pytest.mark.slow
def test_better_kfp_run_is_blessed_and_pushed_against_run_1(kfp_loop, moto):
  # pylint: disable=redefined-outer-name
  assert int(_props(kfp_loop, "better", "ConvergenceEvaluator", "blessing")["blessed"]) == 1
  _assert_pushed(kfp_loop, "better")
  comparison = _comparison(kfp_loop, "better", moto[1])
  good_model = kfp_loop["good"]["DistributedTrainer"]["model"]
  assert comparison["baseline_uri"] == good_model["uri"]  # Run 2's was not blessed.
  assert comparison["baseline_uri"] != kfp_loop["worse"]["DistributedTrainer"]["model"]["uri"]
  [mse] = [m for m in comparison["metrics"] if m["name"] == "eval_mse"]
  assert comparison["passed"] and mse["candidate"] < mse["baseline"]
  # The blessing names the candidate by its ML Metadata id (what the next lookup reads).
  blessing = _props(kfp_loop, "better", "ConvergenceEvaluator", "blessing")
  assert blessing["current_model_id"] == kfp_loop["better"]["DistributedTrainer"]["model"]["id"]


@pytest.mark.slow
def test_the_secret_is_read_at_run_time_and_in_no_package(kfp_loop, moto):
  # pylint: disable=redefined-outer-name
  # Each evaluator step read KFP's secret once (to set up the s3 filesystem).
  assert kfp_loop["gets"] == ["/api/v1/namespaces/default/secrets/mlpipeline-minio-artifact"
                              ] * len(STEPS)
  for name in STEPS:
    for task in kfp_loop[name].values():
      assert moto[2]["secretkey"] not in json.dumps(task)


def test_only_an_evaluator_that_looks_up_its_baseline_sets_up_the_store():
  config = {"inputs": {"parameterValues": {"config": json.dumps({"baseline": "latest_blessed"})}}}
  evaluator = "tfx_parallel.components.convergence_evaluator.executor.Executor"
  assert entrypoint.looks_up_baseline(evaluator, config)
  assert not entrypoint.looks_up_baseline(
      "tfx_parallel.components.distributed_trainer.executor.Executor", config)
  assert not entrypoint.looks_up_baseline(evaluator, {"inputs": {"parameterValues": {
      "config": json.dumps({"baseline": None})}}})
  # gs:// is TensorFlow's own filesystem (the pod's credentials): nothing to set up.
  outputs = {"outputs": {"artifacts": {"metrics": {"artifacts": [
      {"uri": "gs://b/v2/artifacts/p/r/ConvergenceEvaluator/metrics"}]}}}}
  environ = {}
  assert entrypoint.baseline_store(outputs, environ) is None and environ == {}


def test_a_store_that_cannot_be_set_up_is_said_in_one_line(capsys):
  outputs = {"outputs": {"artifacts": {"metrics": {"artifacts": [
      {"uri": f"{ROOT}/p/r/ConvergenceEvaluator/metrics"}]}}}}
  environ = {"TFX_PARALLEL_S3_ENDPOINT": "9000"}
  assert entrypoint.baseline_store(outputs, environ) is None
  err = capsys.readouterr().err
  assert ("WARNING: a baseline looked up in ML Metadata (evaluator.baseline: latest_blessed) "
          f"cannot be read from this step: s3://{BUCKET}/v2/artifacts/p/r/") in err
  assert "TFX_PARALLEL_S3_ENDPOINT must be http://host[:port]" in err
  assert len(err.strip().splitlines()) == 1
