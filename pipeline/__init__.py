"""tfx_parallel.pipeline: configuration, the pipeline factory, runners and the CLI."""
from tfx_parallel.pipeline import tfenv as _tfenv

_tfenv.prepare()
