"""Multi-node training as a Kubeflow TFJob (kubeflow.org/v1), for `multi_worker` only.

A KFP task is a single pod. To train on several nodes, the DistributedTrainer executor
(running in that pod) submits a TFJob whose replicas run the training entry point of
the same image, waits for it and returns its logs. The Kubeflow training operator
injects TF_CONFIG into each replica; `MultiWorkerMirroredStrategy` reads it. A TFJob of
one replica in total gets no TF_CONFIG (the operator treats it as not distributed:
``isDistributed``, training-operator v1.9.0 pkg/controller.v1/tensorflow/util.go:74);
that replica trains alone.

Opt-in only: the executor uses this when the trainer layout is ``multi_worker`` AND
``TFX_PARALLEL_TFJOB_IMAGE`` is set in its environment (in the compiled pipeline:
``components.DistributedTrainer.env``, see kubeflow/gpu.yaml). Otherwise the local
launcher runs, unchanged. Settings, all read and checked once by
:func:`settings_from_env` (an unknown ``TFX_PARALLEL_TFJOB_*`` name is an error):

    TFX_PARALLEL_TFJOB_IMAGE          image of the replicas (required to opt in)
    TFX_PARALLEL_TFJOB_WORKERS        Worker replicas (default: trainer `workers`)
    TFX_PARALLEL_TFJOB_CHIEF          1 adds a Chief replica (default 0: worker 0 is chief)
    TFX_PARALLEL_TFJOB_GPUS           nvidia.com/gpu limit per replica (default 0)
    TFX_PARALLEL_TFJOB_NODE_SELECTOR  JSON object of node labels (default {})
    TFX_PARALLEL_TFJOB_TOLERATIONS    JSON list of Kubernetes tolerations (default [])
    TFX_PARALLEL_TFJOB_RESOURCES      JSON {"requests": {...}, "limits": {...}} (default {})
    TFX_PARALLEL_TFJOB_NAMESPACE      default: the pod's own namespace, else "default"
    TFX_PARALLEL_TFJOB_TIMEOUT_SECONDS  default 86400; also the TFJob's activeDeadlineSeconds
    TFX_PARALLEL_TFJOB_MAX_RESTARTS   job restarts allowed after retryable failures (3)
    TFX_PARALLEL_TFJOB_PENDING_GRACE_SECONDS  how long a pod may be stuck (image pull,
                                      container config) or uncreated (FailedCreatePod)
                                      before the step fails (300)
    TFX_PARALLEL_TFJOB_UNSCHEDULABLE_GRACE_SECONDS  how long a pod may be Unschedulable
                                      (1200: a cluster autoscaler's node provisioning)
    TFX_PARALLEL_TFJOB_TTL_SECONDS    ttlSecondsAfterFinished (600)
    TFX_PARALLEL_TFJOB_ORPHAN_SECONDS how long replicas train without the executor's
                                      heartbeat before they stop (600; at least
                                      210, 3 x the heartbeat spacing)

What happens on failure (training-operator v1.9.0, cited per rule):

* ``restartPolicy: ExitCode``: the operator deletes and recreates a Failed pod whose
  ``tensorflow`` container exited with 128-255, and fails the job on 1-127
  (pkg/apis/kubeflow.org/v1/common_types.go:183-188; ``IsRetryableExitCode`` is
  ``exitCode >= 128``, pkg/util/train/train_util.go:24; applied in
  pkg/controller.v1/common/pod.go:350-375). Every replica exits with its failure's
  class (failures.exit_code, replica.py): a replica OOM-killed (137), sent SIGTERM on
  preemption (143), out of memory in TensorFlow (201), failing on the store (202), on
  a torn read (203), on another runtime error (204), or a survivor that lost a peer
  (:data:`PEER_LOST_EXIT_CODE`, 200) restarts; a config or user-code error (4) and a
  stale heartbeat (3) stop the job at once. Every replica then restores the last
  checkpoint.
* ``runPolicy.backoffLimit`` is not set: with ExitCode, v1.9 counts container restarts
  of Running pods only (``PastBackoffLimit``, pkg/core/job.go:95-133), while ExitCode
  pods are deleted and recreated, so the limit never trips (kubeflow/trainer#2045).
  The executor counts the restarts itself (new pod UIDs per replica) and deletes the
  job past ``TFX_PARALLEL_TFJOB_MAX_RESTARTS``, naming the last failure it saw.
* No orphans: the TFJob has an ownerReference to the KFP pod when ``KFP_POD_NAME`` and
  ``KFP_POD_UID`` are set (the KFP v2 driver sets them through the downward API) and
  the job is in the pod's namespace; SIGTERM deletes it. KFP keeps a finished step's
  pod until the workflow's TTL (a day), so for an executor killed outright (SIGKILL,
  OOM, node loss) the bound is the heartbeat: the executor writes ``<job file>.alive``
  every HEARTBEAT_SECONDS and each replica stops (exit ORPHANED_EXIT_CODE, which fails
  the job) once it has not changed for ``TFX_PARALLEL_TFJOB_ORPHAN_SECONDS`` (600);
  ``activeDeadlineSeconds`` and ``ttlSecondsAfterFinished`` stay as the last bounds: at
  the deadline the operator fails the job (job.go:208-247); v1.9.0-v1.9.3 also deleted
  every pod, but v1.9.4 honours ``cleanPodPolicy: None`` there (kubeflow/trainer#3420)
  and the running replicas stay until the TTL deletes the job, so the bound without a
  heartbeat is TIMEOUT_SECONDS + TTL_SECONDS (86400 + 600 s by default).
  The job's name is the checkpoint directory's digest, so a KFP retry of the step
  adopts the job of the attempt before (running or succeeded) or replaces a failed
  one: never two jobs on one checkpoint directory.
* Istio: the replica pods carry ``sidecar.istio.io/inject: "false"`` (as the operator's
  own SDK does, sdk/python/kubeflow/training/utils/utils.py:259): with a sidecar a pod
  never reaches ``Succeeded`` and the operator's success test needs that phase
  (``IsWorker0Completed``, pkg/controller.v1/tensorflow/tfjob_controller.go:608-628).
  Logs are read from the ``tensorflow`` container (the API server answers 400 without
  ``container=`` on a pod with two containers: ``validateContainer`` in kubernetes
  pkg/registry/core/pod/strategy.go).

The job file is written next to the checkpoints under the pipeline root, which the
replicas must reach (gs://, s3://, or a shared volume mounted at the same path). The
replicas run ``python -m tfx_parallel.components.distributed_trainer.replica --job URI``,
which copies the job file to local disk (run/train.py reads a local file) and runs
``train.main``.

The package, one concern per module; imports point down this list, and none reaches up
into ``run/``: the replica's entry point (its ``main``, which runs ``train.main``) is
distributed_trainer/replica.py, beside the executor.

    replica.py   what a replica needs: TF_CONFIG on a TrainJob, the executor-heartbeat
                 watchdog, the SIGTERM handler
    launch.py    the executor's side: ``run`` (submit or adopt, wait, delete, also on
                 SIGTERM) and the heartbeat it writes
    client.py    the Kubernetes API calls: discovery, access review, create/get/delete,
                 pods, events, logs, and the polling ``wait``
    watch.py     pure reading of what the API returns: conditions, pods, events, restarts
    manifest.py  the TFJob resource, its name, and the RBAC Role/RoleBinding
    trainjob.py  Kubeflow Trainer v2: the TensorFlow runtime, the TrainJob, JobSet's TF_CONFIG
    settings.py  TFX_PARALLEL_TFJOB_* and the replicas' variables, decoded once
Exit codes shared with the training process live in ``failures.py`` (the trainer's top level).
"""
