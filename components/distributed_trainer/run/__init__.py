"""The run skeleton: one training run in its own process (train.py) for every layout, its
tf_keras callbacks, checkpoints, the run record (history.json), the export, which failures
a rerun can fix, and the local processes that run it (launcher.py); kube/ runs it on
Kubernetes replicas."""
