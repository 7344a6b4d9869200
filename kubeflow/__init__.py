"""tfx_parallel.kubeflow: compiles the pipeline to a KFP v2 package for GPU nodes."""
from tfx_parallel.pipeline import tfenv as _tfenv

_tfenv.prepare()
