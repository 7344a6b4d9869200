"""`tfx-parallel rbac`: prints the Role and RoleBinding that multi-node training needs;
`tfx-parallel runtime`: prints the Kubeflow Trainer v2 TensorFlow runtime;
`tfx-parallel manifests`: prints, without a cluster, what a step would submit per release.

The DistributedTrainer step creates a TFJob, or on Kubeflow Trainer v2 a TrainJob (after
reading this project's TrainingRuntime), and reads its pods, their logs and the job's
events (kube/manifest.py ALL_REQUIRED_ACCESS); before it creates anything it asks the API
server (SelfSubjectAccessReview) and fails naming each missing verb. This prints what
grants exactly that, for the account the step runs as:

* standalone KFP: ``pipeline-runner`` in KFP's namespace (``kubeflow``);
* a Kubeflow profile (multi-user): ``default-editor`` in the profile's namespace.

Apply it with ``tfx-parallel rbac --namespace NS --service-account SA | kubectl apply -f -``.
On Trainer v2, also ``tfx-parallel runtime --namespace NS | kubectl apply -f -`` (kube/trainjob.py).
"""
import argparse
import sys

import yaml

from tfx_parallel.components.distributed_trainer.kube import manifest
from tfx_parallel.components.distributed_trainer.kube import object_store
from tfx_parallel.components.distributed_trainer.kube import trainjob


def add_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--namespace", required=True,
                      help="where the pipeline's steps run: kubeflow on standalone KFP, the "
                           "profile's namespace on multi-user Kubeflow")
  parser.add_argument("--service-account", default="default-editor",
                      help="the steps' service account: pipeline-runner on standalone KFP, "
                           "default-editor in a Kubeflow profile (default)")
  parser.add_argument("--s3-secret", default=object_store.KFP_MINIO_SECRET,
                      help="the secret holding the object store's credentials, which the step "
                           "reads on an s3:// or minio:// pipeline root (default "
                           f"{object_store.KFP_MINIO_SECRET}, KFP's; '' on a gs:// root)")


def run(args: argparse.Namespace) -> int:
  docs = manifest.rbac_manifests(args.namespace, args.service_account,
                                 s3_secret=args.s3_secret or None)
  sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
  return 0


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--namespace", required=True,
                      help="where the pipeline's steps run (the TrainJobs are created there)")
  parser.add_argument("--max-restarts", type=int, default=3,
                      help="JobSet restarts after a retryable failure (OOM-kill, preemption, a "
                           "lost peer) before the TrainJob fails (default 3, as "
                           "TFX_PARALLEL_TFJOB_MAX_RESTARTS)")
  parser.add_argument("--active-deadline-seconds", type=int,
                      default=trainjob.ACTIVE_DEADLINE_SECONDS,
                      help="each attempt's Job activeDeadlineSeconds: past it the TrainJob "
                           "fails (default 86400, as TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS)")


def run_runtime(args: argparse.Namespace) -> int:
  doc = trainjob.runtime_manifest(args.namespace, args.max_restarts,
                                  args.active_deadline_seconds)
  sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
  return 0


# What `manifests --release` can print: each Trainer v2 release (its placement field:
# kube/trainjob.py RELEASE_FIELDS) and the training operator's TFJob.
RELEASES = tuple(trainjob.RELEASE_FIELDS) + ("tfjob",)


def add_manifests_arguments(parser: argparse.ArgumentParser) -> None:
  parser.add_argument("--release", required=True, choices=RELEASES,
                      help="Kubeflow Trainer release (v2.1: Kubeflow 1.11) or tfjob "
                           "(training-operator v1.9: Kubeflow 1.10)")
  parser.add_argument("--namespace", required=True, help="where the step runs")
  parser.add_argument("--image", required=True, help="TFX_PARALLEL_TFJOB_IMAGE")
  parser.add_argument("--workers", type=int, default=2,
                      help="the trainer's `workers` (default 2; TFX_PARALLEL_TFJOB_WORKERS "
                           "overrides it, as in the step)")
  parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                      help="a TFX_PARALLEL_TFJOB_* setting as the step's environment has it "
                           "(repeatable), e.g. TFX_PARALLEL_TFJOB_GPUS=1")
  parser.add_argument("--pipeline-root", default="gs://BUCKET/pipeline-root",
                      help="where the job file is written (the name and paths follow it)")


def run_manifests(args: argparse.Namespace) -> int:
  """Prints the documents a step with these settings would submit, like
  ``kubectl create --dry-run=client -o yaml``: on Trainer v2 the runtime and the TrainJob
  (placement in the release's field), else the TFJob. The object store's variables the
  step adds for s3:// roots (read from the cluster's secret) are not shown."""
  from tfx_parallel.components.distributed_trainer.kube import settings as settings_lib  # pylint: disable=g-import-not-at-top
  environ = dict(item.split("=", 1) for item in args.env if "=" in item)
  bad = [item for item in args.env if "=" not in item]
  if bad:
    raise SystemExit(f"--env takes NAME=VALUE. Received: {bad[0]!r}")
  environ.update({settings_lib.ENV_IMAGE: args.image,
                  settings_lib.ENV_PREFIX + "NAMESPACE": args.namespace})
  try:
    settings = settings_lib.settings_from_env(environ, "multi_worker", args.workers,
                                              namespace_file="/nonexistent")
  except ValueError as e:
    raise SystemExit(str(e)) from None
  checkpoint_dir = f"{args.pipeline_root.rstrip('/')}/DistributedTrainer/_checkpoints/RUN"
  name = manifest.job_name(checkpoint_dir)
  spec = manifest.spec_for(settings, name, f"{args.pipeline_root.rstrip('/')}/_tfjobs/"
                           f"{name}.json")
  if args.release == "tfjob":
    docs = [manifest.manifest(spec)]
  else:
    docs = [trainjob.runtime_manifest(args.namespace, settings.max_restarts),
            trainjob.manifest(spec, placement_field=trainjob.RELEASE_FIELDS[args.release])]
  sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False))
  return 0
