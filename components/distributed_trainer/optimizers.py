"""The one optimizer factory: config ``optimizer``/``learning_rate``, or the user module's
``optimizer(spec)`` hook, for every layout.

On a DTensor mesh a tf_keras optimizer must be built with ``mesh=`` (its step counter and
slots then live on the mesh, each slot in its variable's layout). A user's optimizer is
rebuilt there from its own config (``type(opt).from_config(config + mesh)``: learning-rate
schedules included) and checked to have the same config afterwards; where that cannot
be done (a legacy optimizer, a subclass whose constructor takes no ``mesh``, a config
that does not round-trip) :class:`OptimizerError` says so before training, naming the
module and the hook. Nothing is replaced silently.
"""
from typing import Any, Dict, Optional

MOMENTUM = 0.9                             # of ``momentum``
# Config ``optimizer``, the one list of names: name -> (tf_keras.optimizers class, its
# arguments besides the learning rate, slot variables per parameter: stock SGD keeps an
# ``m`` even at momentum 0, as MeshSGD does).
RULES = {"sgd": ("SGD", {}, 1), "momentum": ("SGD", {"momentum": MOMENTUM}, 1),
         "adam": ("Adam", {}, 2)}
OPTIMIZERS = tuple(RULES)
SLOTS_PER_PARAM = {name: slots for name, (_, _, slots) in RULES.items()}
HOOK = "optimizer(spec)"


class OptimizerError(ValueError):
  """The optimizer cannot be used on this layout; names the module and the hook."""


def _mesh_sgd_class():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top

  class MeshSGD(tf_keras.optimizers.SGD):
    """tf_keras SGD whose plain update (momentum 0) is ``variable -= lr * gradient``.
    Stock SGD computes ``m = -lr * g + m * 0.0`` even without momentum; Grappler folds
    ``m * 0.0`` into a zeros constant of the variable's GLOBAL shape, which then meets
    the local shard of a split variable on a DTensor mesh ("Incompatible shapes: [6,2]
    vs. [6,4]"). The result is the same number: ``-lr * g + 0`` is ``-lr * g``.

    It keeps stock SGD's variables: ``build`` is stock's, which allocates an ``m`` per
    variable even at momentum 0 (tf_keras/src/optimizers/sgd.py ``SGD.build``, 2.16),
    each in its variable's layout. Only the update differs, so a mesh checkpoint holds
    the keys the user's SGD holds on every layout (run/checkpoint.py saves the mesh's
    variables themselves) and uses the memory stock SGD uses.
    """

    def update_step(self, gradient, variable):
      if self.momentum:
        return super().update_step(gradient, variable)
      lr = tf.cast(self.learning_rate, variable.dtype)
      if isinstance(gradient, tf.IndexedSlices):
        return variable.scatter_add(tf.IndexedSlices(-gradient.values * lr, gradient.indices))
      return variable.assign_add(-gradient * lr)

  return MeshSGD


_MESH_SGD = None


def mesh_sgd_class():
  global _MESH_SGD
  if _MESH_SGD is None:
    _MESH_SGD = _mesh_sgd_class()
  return _MESH_SGD


def make(name: str, learning_rate: float, mesh=None):
  """Config ``optimizer``: ``sgd``, ``momentum`` (SGD, momentum 0.9) or ``adam``,
  tf_keras defaults otherwise; ``mesh=`` places it on a DTensor mesh."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  if name not in RULES:
    raise ValueError(f"optimizer: must be one of {list(OPTIMIZERS)}. Received: {name!r}")
  cls, kwargs, _ = RULES[name]
  opt = getattr(tf_keras.optimizers, cls)(learning_rate, **kwargs)
  return opt if mesh is None else on_mesh(opt, mesh, f"config optimizer {name!r}")


def _comparable(config: Dict[str, Any]) -> Dict[str, Any]:
  return {k: v for k, v in config.items() if k not in ("jit_compile", "is_legacy_optimizer")}


def on_mesh(optimizer, mesh, owner: str, hook: Optional[str] = None):
  """``optimizer`` rebuilt with ``mesh=`` (same class and config; XLA off: tf_keras would
  compile the update with XLA on GPUs only, a path not proven with DTensor, so an
  optimizer that would compile says so on the console). Raises OptimizerError naming
  ``owner`` (the module) and ``hook``. What the run records is ``optimizer`` itself, as
  written (run_record.py): the rebuilt one (``MeshSGD`` for a plain SGD, see there) is
  an internal detail."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tf_keras.src.optimizers import optimizer as optimizer_lib  # pylint: disable=g-import-not-at-top
  where = f"{owner}: {hook}" if hook else owner

  def fail(reason):
    raise OptimizerError(f"{where} returned {type(optimizer).__module__}."
                         f"{type(optimizer).__name__}, which the mesh layout cannot place: "
                         f"{reason}. Use a tf_keras.optimizers optimizer (not legacy), or a "
                         f"layout without a mesh (single, mirrored, multi_worker).")

  if not isinstance(optimizer, optimizer_lib.Optimizer):
    fail("DTensor needs a tf_keras optimizer that takes mesh= (tf_keras.optimizers.*; "
         "legacy and Keras 3 optimizers do not)")
  config = optimizer.get_config()
  cls = type(optimizer)
  if cls is tf_keras.optimizers.SGD and not config.get("momentum"):
    cls = mesh_sgd_class()  # The same update (see MeshSGD), without the zeros constant.
  try:
    rebuilt = cls.from_config(dict(config, jit_compile=False, mesh=mesh))
  except Exception as e:  # pylint: disable=broad-except
    fail(f"rebuilding it with mesh= from its config raised {type(e).__name__}: {e}")
  if _comparable(rebuilt.get_config()) != _comparable(config):
    fail(f"its config does not survive the rebuild with mesh= "
         f"({_comparable(config)} became {_comparable(rebuilt.get_config())})")
  if getattr(optimizer, "jit_compile", False):
    print(f"[trainer] optimizer: {where} {type(optimizer).__name__} has jit_compile=True; "
          f"the mesh layout runs its update without XLA (jit_compile=False): tf_keras "
          f"compiles the update with XLA on GPUs only, a path not proven with DTensor",
          flush=True)
  return rebuilt


def owner(module_name: str, has_hook: bool, name: str):
  """(owner, hook) that :func:`on_mesh`'s errors name: the module's ``optimizer(spec)``
  hook, or config ``optimizer``."""
  return (module_name, HOOK) if has_hook else (f"config optimizer {name!r}", None)
