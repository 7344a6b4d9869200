"""tfx_parallel.components: the custom TFX components, one folder each."""
from tfx_parallel.pipeline import tfenv as _tfenv

_tfenv.prepare()
