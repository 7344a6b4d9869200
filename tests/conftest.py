"""Shared by every test module: the environment, and the ``slow`` marker.

The test process is an entry point like the CLI: it prepares TensorFlow's environment
(components/common/tfenv.py) before any test module imports TensorFlow, and the child
processes the tests start inherit it. Importing our components does not do it for them
(tests/test_common_tfenv.py checks that).
"""
from tfx_parallel.components.common import tfenv

tfenv.prepare()


def pytest_configure(config):
  config.addinivalue_line("markers", "slow: end-to-end tests")
