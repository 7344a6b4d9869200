"""tfx_parallel.pipeline: configuration, the pipeline factory, runners and the CLI."""
