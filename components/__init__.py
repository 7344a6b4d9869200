"""tfx_parallel.components: the custom TFX components, one folder each."""
from tfx_parallel.components.common.quiet import install_if_asked as _install_if_asked
from tfx_parallel.components.common.quiet import quiet

__all__ = ["quiet"]  # tfx_parallel.components.quiet(): see components/common/quiet.py.

_install_if_asked()  # A child process of a pipeline that called quiet() (e.g. training).
