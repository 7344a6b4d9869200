"""Packages whose ``__init__`` imports far more than a local run needs, loaded piecemeal.

A local run imports TFX's orchestration and a few TFX modules by their full names. Two
package ``__init__`` files on that path import much more (benchmarks/RESULTS.md, "where
the time goes"):

* ``tfx.components``: every stock component with its executor, among them InfraValidator
  (the Kubernetes client), Tuner (Keras Tuner, which imports Keras 3 and pyplot),
  Transform and BulkInferrer (TensorFlow Transform, TFMA). LocalDagRunner reaches it
  through ``tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy``, which
  wants two constants from ``tfx.components.evaluator`` (and already runs without
  ``tfx.components`` for the ml-pipelines-sdk distribution); our ExampleGen through
  ``tfx.components.example_gen.utils``.
* ``tensorflow_model_analysis``: its evaluators and metrics (NLTK, scikit-learn, ...).
  ``tfx.types.standard_component_specs`` (used by TFX's ExampleGen driver) imports it as
  ``from tensorflow_model_analysis import sdk`` for ``EvalConfig``, a light module.

:func:`defer` puts such a package in ``sys.modules`` without running its ``__init__``:
an import statement naming one of its submodules (``import tfx.components.example_gen.utils``,
``from tensorflow_model_analysis import sdk``) loads that submodule alone, and any other
use of the package (``tfx.components.Evaluator``, ``tfma.EvalConfig``, ``from tfx.components
import Trainer``) runs the real ``__init__`` first, as importing the package would have. The package is the same
module object throughout. ``tests/test_pipeline_deferred_imports.py`` checks that no
``__init__`` of these packages binds a name to anything but the submodule of that name.
"""
import importlib
import importlib.util
import sys
import threading
from typing import Tuple

from absl import logging

# The packages the local run defers (see the module docstring).
PACKAGES: Tuple[str, ...] = ("tfx.components", "tensorflow_model_analysis")


def defer(name: str) -> bool:
  """Registers package ``name`` with its ``__init__`` not run yet; False (and nothing
  done) if it is imported already."""
  if name in sys.modules:
    return False
  spec = importlib.util.find_spec(name)  # Imports the parent package (light here).
  if spec is None or spec.submodule_search_locations is None:
    raise ValueError(f"{name} is not an installed package")
  module = importlib.util.module_from_spec(spec)
  lock = threading.RLock()
  state = {"initialized": False}

  def __getattr__(attr: str):
    """``from PACKAGE import SUBMODULE`` imports the submodule alone; any other name runs
    the package's ``__init__`` (once), as importing the package would have."""
    if attr.startswith("__"):
      raise AttributeError(f"module {name!r} has no attribute {attr!r}")
    with lock:
      if not state["initialized"]:
        if (sys._getframe(1).f_code.co_name == "_handle_fromlist"  # pylint: disable=protected-access
            and importlib.util.find_spec(f"{name}.{attr}") is not None):
          return importlib.import_module(f"{name}.{attr}")
        state["initialized"] = True
        logging.info("Importing all of %s (for %s.%s)", name, name, attr)
        spec.loader.exec_module(module)
      try:
        return module.__dict__[attr]
      except KeyError:
        raise AttributeError(f"module {name!r} has no attribute {attr!r}") from None

  module.__getattr__ = __getattr__
  sys.modules[name] = module
  parent, _, child = name.rpartition(".")
  if parent:
    setattr(sys.modules[parent], child, module)
  return True


def defer_all() -> Tuple[str, ...]:
  """:func:`defer` for every package of PACKAGES; returns the ones deferred now."""
  return tuple(name for name in PACKAGES if defer(name))
