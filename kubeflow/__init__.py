"""tfx_parallel.kubeflow: compiles the pipeline to a KFP v2 package for GPU nodes."""
