"""`tfx-parallel rbac`: prints the Role and RoleBinding that multi-node training needs;
`tfx-parallel runtime`: prints the Kubeflow Trainer v2 TensorFlow runtime.

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
