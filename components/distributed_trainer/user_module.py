"""The model module contract: how user code enters the trainer (one small door).

A module (``module_file=PATH`` or ``module_path="pkg.mod"``; without either, the built-in
``models/linear.py`` or ``models/mlp.py``) defines:

* ``build_model(spec) -> tf_keras.Model`` (required). ``spec`` is a
  :class:`model_spec.ModelSpec`. The model takes a dict of feature tensors keyed by
  feature name (float32 [B, 1]; int64 features as int64 [B, 1]; string features arrive
  as int64 ids [B, 1], 0 = missing or out of vocabulary, ``spec.feature(name).num_ids``
  ids in all) and returns one tensor:
  [B, 1] for regression, [B, 1] logits for binary, [B, K] logits for multiclass
  (``spec.output_units``). No strategy, mesh or device code: the layout does that.

Optional hooks:

* ``loss(spec) -> tf_keras loss`` (default: MSE, sigmoid or softmax cross-entropy on
  logits, by task);
* ``optimizer(spec) -> tf_keras optimizer`` (default: config ``optimizer`` and
  ``learning_rate``);
* ``layout_rules(spec) -> {variable-path regex: per-dimension sharding}`` for mesh
  layouts (default: components/distributed_trainer/sharding.py);
* ``callbacks(spec) -> [tf_keras.callbacks.Callback, ...]``: driven with the whole Keras
  protocol (train, epoch, batch and, at each per-epoch evaluation, test hooks) the same
  way on every layout, the Keras epochs being the run's epochs, each ``on_epoch_end``'s
  logs with the epoch's ``loss`` and its evaluation's ``val_loss`` (engines/epochs.py,
  engines/callbacks.py); one the trainer cannot honour is refused before training
  (:func:`make_callbacks`).

:func:`load` imports the module and :func:`check` builds the model on a tiny batch and
resolves its layout rules, before training starts; every error names the module.
"""
import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import os
import sys
from typing import Any, Callable, Dict, Optional

from tfx_parallel.components.common.config_util import ConfigError
from tfx_parallel.components.distributed_trainer import mesh_axes
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer import optimizers
from tfx_parallel.components.distributed_trainer import sharding

BUILTIN_PACKAGE = "tfx_parallel.components.distributed_trainer.models"
HOOKS = ("loss", "optimizer", "layout_rules", "callbacks")


class ModuleError(ValueError):
  """The user module breaks the contract; the message starts with the module's name."""


@dataclasses.dataclass(frozen=True)
class UserModule:
  name: str                       # The file path, module path or "mlp (built-in)".
  build_model: Callable
  loss: Optional[Callable] = None
  optimizer: Optional[Callable] = None
  layout_rules: Optional[Callable] = None
  callbacks: Optional[Callable] = None
  config_key: str = "model"       # The trainer config key that chose the module.
  builtin: Optional[str] = None   # "linear" / "mlp" for a built-in model, else None.
  # sha256 of the source the module was loaded from ("" for a built-in): a checkpoint
  # written by other source is not resumed (run/train.py restore_checkpoint).
  source_digest: str = ""


def load(module_file: Optional[str] = None, module_path: Optional[str] = None,
         builtin: str = "linear") -> UserModule:
  """Imports the module; raises ModuleError naming it (missing file, import error,
  no callable ``build_model``, a hook that is not callable)."""
  if module_file and module_path:
    raise ModuleError(f"{module_file}: exactly one of module_file and module_path may be "
                      f"set. Received: module_file={module_file!r}, module_path={module_path!r}")
  if module_file:
    name = module_file
    if not os.path.isfile(module_file):
      raise ModuleError(f"{module_file}: module file not found")
    digest = hashlib.sha256(os.path.abspath(module_file).encode()).hexdigest()[:12]
    import_name = f"tfx_parallel_user_module_{digest}"
    try:
      spec = importlib.util.spec_from_file_location(import_name, module_file)
      module = importlib.util.module_from_spec(spec)
      sys.modules[import_name] = module
      spec.loader.exec_module(module)
    except Exception as e:  # pylint: disable=broad-except
      raise ModuleError(f"{name}: importing the module failed: {type(e).__name__}: {e}") from e
  else:
    import_name = module_path or f"{BUILTIN_PACKAGE}.{builtin}"
    # What messages and the console call it: a built-in by its config name, not its path.
    name = module_path or f"{builtin} (built-in)"
    try:
      module = importlib.import_module(import_name)
    except Exception as e:  # pylint: disable=broad-except
      raise ModuleError(f"{name}: importing the module failed: {type(e).__name__}: {e}") from e
  build = getattr(module, "build_model", None)
  if not callable(build):
    raise ModuleError(f"{name}: the module defines no build_model(spec) function "
                      f"(found: {sorted(k for k in vars(module) if not k.startswith('_'))})")
  hooks: Dict[str, Any] = {}
  for hook in HOOKS:
    fn = getattr(module, hook, None)
    if fn is not None and not callable(fn):
      raise ModuleError(f"{name}: {hook} must be a function {hook}(spec). "
                        f"Received: {type(fn).__name__}")
    hooks[hook] = fn
  key = "module_file" if module_file else "module_path" if module_path else "model"
  return UserModule(name=name, build_model=build, config_key=key,
                    builtin=None if module_file or module_path else builtin,
                    source_digest=source_digest(module) if module_file or module_path else "",
                    **hooks)


def source_digest(module) -> str:
  """sha256 over the source files of an imported user module (``module_file`` and
  ``module_path`` alike): its own ``__file__``, and the files of the modules of its own
  directory tree that its top-level names come from (``from helpers import build_model``),
  followed transitively. "" when it has no source file."""
  files = source_files(module)
  if not files:
    return ""
  digest = hashlib.sha256()
  base = os.path.dirname(files[0]) if len(files) == 1 else os.path.commonpath(files)
  for path in files:  # Named relative to each other: the same source anywhere.
    with open(path, "rb") as f:
      digest.update(os.path.relpath(path, base).encode() + b"\0" + f.read() + b"\0")
  return digest.hexdigest()


def source_files(module) -> list:
  """The files :func:`source_digest` hashes, sorted (see there)."""
  path = getattr(module, "__file__", None)
  if not path or not os.path.isfile(path):
    return []
  path = os.path.abspath(path)
  top = sys.modules.get(module.__name__.split(".")[0], module)
  # The tree of the user's code: its top-level package, or the single module's directory
  # (not an installation's site-packages, which holds everyone's code).
  root = os.path.dirname(os.path.abspath(top.__file__) if hasattr(top, "__path__") and
                         getattr(top, "__file__", None) else path)
  if os.path.basename(root).endswith("-packages"):
    return [path]
  seen, todo = {path}, [module]
  while todo:
    for value in list(vars(todo.pop()).values()):
      name = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
      other = sys.modules.get(name) if isinstance(name, str) else None
      other_file = os.path.abspath(getattr(other, "__file__", None) or "")
      if (other is None or not os.path.isfile(other_file) or other_file in seen
          or not other_file.startswith(root + os.sep)):
        continue
      seen.add(other_file)
      todo.append(other)
  return sorted(seen)


def default_loss(task: str):
  import tf_keras  # pylint: disable=g-import-not-at-top
  if task == ms.BINARY:
    return tf_keras.losses.BinaryCrossentropy(from_logits=True)
  if task == ms.MULTICLASS:
    return tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  return tf_keras.losses.MeanSquaredError()


def make_loss(module: UserModule, spec: ms.ModelSpec):
  """The loss every layout trains with: the hook's, or the task's default. A plain
  function is wrapped as tf_keras ``compile`` wraps it (``LossFunctionWrapper``: the mean
  over the batch), so that the fit and mesh engines reduce it the same way."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  loss = module.loss(spec) if module.loss else default_loss(spec.task)
  if not isinstance(loss, tf_keras.losses.Loss):
    if not callable(loss):
      raise ModuleError(f"{module.name}: loss(spec) must return a tf_keras loss or a function "
                        f"(labels, outputs) -> loss. Received: {type(loss).__name__}")
    from tf_keras.src import losses as losses_lib  # pylint: disable=g-import-not-at-top
    loss = losses_lib.LossFunctionWrapper(loss, name=getattr(loss, "__name__", "loss"))
  return loss


def make_optimizer(module: UserModule, spec: ms.ModelSpec, name: str, learning_rate: float,
                   mesh=None):
  """The optimizer of every layout (optimizers.py): the hook's, or config ``optimizer``;
  on a DTensor ``mesh`` rebuilt there (:func:`place_optimizer`)."""
  opt = module.optimizer(spec) if module.optimizer else optimizers.make(name, learning_rate)
  return opt if mesh is None else place_optimizer(module, opt, mesh, name)


def place_optimizer(module: UserModule, optimizer, mesh, name: str):
  """``optimizer`` (from :func:`make_optimizer`) rebuilt on a DTensor ``mesh``, or
  optimizers.OptimizerError naming the hook (or config ``optimizer`` ``name``)."""
  return optimizers.on_mesh(optimizer, mesh,
                            *optimizers.owner(module.name, bool(module.optimizer), name))


def check_optimizer(module: UserModule, spec: ms.ModelSpec, name: str, learning_rate: float,
                    layout: str, mesh_shape=(1, 1)):
  """Builds the optimizer as the training process will: the hook's (or config ``name``
  and ``learning_rate``) and, on a ``mesh`` layout, rebuilt with ``mesh=`` on a DTensor
  mesh of the run's ``mesh_shape`` over this process's logical CPUs. A process with
  fewer logical CPUs (the executor does not split its CPU: that would change the
  devices of every later component in the same process) checks on a one-device mesh:
  the rebuild places only the optimizer's own replicated variables (iterations,
  learning rate), so its outcome does not depend on the mesh's size. Raises
  optimizers.OptimizerError before training."""
  optimizer = make_optimizer(module, spec, name, learning_rate)
  if layout == "mesh":
    from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
    b, m = (int(x) for x in mesh_shape)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(cpus) < b * m:
      b, m = 1, 1
    mesh = dtensor.create_mesh([("batch", b), ("model", m)], devices=cpus[:b * m],
                               device_type="CPU")
    place_optimizer(module, optimizer, mesh, name)
  return optimizer


# Stock tf_keras callbacks the trainer cannot honour, with the reason and what to use.
REFUSED_CALLBACKS = {
    "BackupAndRestore": "the trainer checkpoints and resumes the run itself (config "
                        "checkpoint_every); a second resume mechanism would restore over it",
}
# ... and those it cannot honour on a mesh: they save or trace the model through
# ``model.fit``'s own functions, which a mesh run does not have. Every other stock
# callback (LearningRateScheduler, ReduceLROnPlateau, EarlyStopping without
# restore_best_weights, CSVLogger, ...) runs
# on every layout: ``model.optimizer`` is the optimizer that trains.
REFUSED_ON_MESH = {
    "ModelCheckpoint": "the mesh model's variables are DTensors split over devices; the "
                       "trainer's own checkpoints (checkpoint_every) and export save them",
    "TensorBoard": "it traces fit's train function, which a mesh run does not have; the "
                   "trainer writes its TensorBoard scalars to the ModelRun artifact",
}

# EarlyStopping(restore_best_weights=True) on a mesh (its weight copies need whole arrays).
RESTORE_BEST_ON_MESH = (
    "it copies the weights with model.get_weights(), which cannot read the mesh model's "
    "variables (DTensors split over devices); the trainer keeps and exports the best "
    "evaluation's weights itself (trainer patience, the automatic length), so pass "
    "restore_best_weights=False")


def make_callbacks(module: UserModule, spec: ms.ModelSpec, layout: str) -> list:
  """The module's ``callbacks(spec)`` ([] without the hook), checked: each must be a
  tf_keras.callbacks.Callback the trainer can honour on ``layout``; raises ModuleError
  naming the callback otherwise (before training)."""
  if not module.callbacks:
    return []
  import tf_keras  # pylint: disable=g-import-not-at-top
  try:
    callbacks = module.callbacks(spec)
  except Exception as e:  # pylint: disable=broad-except
    raise ModuleError(f"{module.name}: callbacks(spec) raised {type(e).__name__}: {e}") from e
  if not isinstance(callbacks, (list, tuple)):
    raise ModuleError(f"{module.name}: callbacks(spec) must return a list of "
                      f"tf_keras.callbacks.Callback. Received: {type(callbacks).__name__}")
  for c in callbacks:
    what = f"{type(c).__module__}.{type(c).__name__}"
    if not isinstance(c, tf_keras.callbacks.Callback):
      raise ModuleError(f"{module.name}: callbacks(spec) returned {what}, which is not a "
                        f"tf_keras.callbacks.Callback (tf_keras drives only its own)")
    for cls in type(c).__mro__:
      reason = REFUSED_CALLBACKS.get(cls.__name__) if cls.__module__.startswith("tf_keras") \
          else None
      if reason is None and layout == "mesh" and cls.__module__.startswith("tf_keras"):
        reason = REFUSED_ON_MESH.get(cls.__name__)
        if reason:
          reason = f"on the mesh layout {reason}"
      if reason:
        raise ModuleError(f"{module.name}: callbacks(spec) returned {what}, which the "
                          f"trainer cannot honour: {reason}")
    if (layout == "mesh" and isinstance(c, tf_keras.callbacks.EarlyStopping)
        and c.restore_best_weights):
      # Its on_epoch_end copies model.get_weights(), which cannot read a DTensor split
      # over devices (UnimplementedError at the first epoch's end, mid-run).
      raise ModuleError(f"{module.name}: callbacks(spec) returned {what} with "
                        f"restore_best_weights=True, which the trainer cannot honour: on the "
                        f"mesh layout {RESTORE_BEST_ON_MESH}")
  return list(callbacks)


def dummy_batch(spec: ms.ModelSpec, rows: int = 2):
  """A tiny input dict for ``spec`` (zeros; ids 0), as the input pipeline shapes it."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  out = {}
  for f in spec.features:
    dtype = tf.float32 if f.dtype == ms.FLOAT32 else tf.int64
    out[f.name] = tf.zeros((rows,) + tuple(f.shape), dtype)
  return out


def build(module: UserModule, spec: ms.ModelSpec):
  """``build_model(spec)``, checked to be a tf_keras.Model; raises ModuleError."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  try:
    model = module.build_model(spec)
  except Exception as e:  # pylint: disable=broad-except
    raise ModuleError(f"{module.name}: build_model(spec) raised {type(e).__name__}: {e}") from e
  if not isinstance(model, tf_keras.Model):
    raise ModuleError(f"{module.name}: build_model(spec) must return a tf_keras.Model. "
                      f"Received: {type(model).__module__}.{type(model).__name__}")
  return model


def probe(module: UserModule, spec: ms.ModelSpec):
  """``build_model(spec)`` whose variables have names, shapes and dtypes but no values
  (tf_keras's ``lazy_init_scope``, tf_keras/src/dtensor/lazy_variable.py, what its own
  ``LayoutMap`` builds with): nothing the size of the model is allocated. Named as a
  fresh process names them (the training process). What the planner counts."""
  # Start-up: lazy_variable imports TensorFlow.
  from tf_keras.src.dtensor import lazy_variable  # pylint: disable=g-import-not-at-top
  with layer_names(fresh=True), lazy_variable.lazy_init_scope():
    return build(module, spec)


@contextlib.contextmanager
def layer_names(fresh: bool):
  """Runs a block, then restores tf_keras's auto layer-name counters to where they were,
  so the next build of the same model gets the same names (``dense`` again, not
  ``dense_2``). With ``fresh`` the block starts from empty counters: the names a fresh
  process gives, as in the training process."""
  from tf_keras.src import backend  # pylint: disable=g-import-not-at-top
  uids = backend.get_default_graph_uid_map()
  saved_uids, saved_observed = dict(uids), set(backend.OBSERVED_NAMES)
  if fresh:
    uids.clear()
    backend.OBSERVED_NAMES.clear()
  try:
    yield
  finally:
    uids.clear()
    uids.update(saved_uids)
    backend.OBSERVED_NAMES.clear()
    backend.OBSERVED_NAMES.update(saved_observed)


def check_layout_rules(module: UserModule, spec: ms.ModelSpec, model, model_axis: int):
  """Resolves the module's ``layout_rules(spec)`` against the built ``model``'s variables
  on a model axis of ``model_axis`` devices, as the mesh layout will (sharding.resolve).
  A rule that matches nothing, is shadowed, has the wrong rank, splits a dimension the
  axis does not divide or splits a table on its rows is a ConfigError naming the config
  key that chose the module. No-op without the hook."""
  if not module.layout_rules:
    return
  try:
    rules = module.layout_rules(spec)
  except Exception as e:  # pylint: disable=broad-except
    raise ModuleError(f"{module.name}: layout_rules(spec) raised {type(e).__name__}: {e}") from e
  if not isinstance(rules, dict):
    raise ModuleError(f"{module.name}: layout_rules(spec) must return a dict "
                      f"{{variable-path regex: sharding}}. Received: {type(rules).__name__}")
  try:
    sharding.resolve(rules, sharding.describe_variables(model), model_axis, module.name)
  except sharding.ShardingError as e:
    raise ConfigError(f"trainer.{module.config_key}", str(e)) from None


def check_builtin_split(module: UserModule, spec: ms.ModelSpec, model, model_axis: int,
                        widths_key: str = "trainer.hidden_units"):
  """A built-in model on a model axis > 1 must split every Dense kernel as docs/layouts.md
  says (the linear kernel by rows, the mlp's hidden layers as Megatron pairs): where the
  default rules cannot (sharding.unsplit_kernels, through mesh_axes.undivided), a
  ConfigError names the config key that decides the shape. A user module is not refused
  here: what nothing divides stays replicated, said on the console by the run.
  ``widths_key`` names where the mlp's widths came from (``trainer.hparams`` when the
  user's hparams set them)."""
  if module.builtin is None or model_axis <= 1:
    return
  whole = sharding.unsplit_kernels(sharding.describe_variables(model), model_axis)
  if not whole:
    return
  v = whole[0]
  widths = list(spec.hparams.get("hidden_units", ())) if module.builtin == "mlp" else []
  uneven = [h for h in widths
            if mesh_axes.undivided((h,), (mesh_axes.MODEL_AXIS,), model_axis) is not None]
  if uneven:
    raise ConfigError(widths_key,
                      f"hidden width {uneven[0]} is not divisible by the model axis "
                      f"{model_axis}: the built-in mlp splits each hidden layer over the model "
                      f"axis, and {v.path} {list(v.shape)} would stay whole on every device. "
                      f"Received: hidden_units={widths}, mesh model axis {model_axis}")
  raise ConfigError("trainer.mesh",
                    f"the model axis ({model_axis}) must divide the feature count "
                    f"({v.shape[0]} inputs of {v.path} {list(v.shape)}): the built-in "
                    f"{module.builtin} model splits this kernel by rows over the model axis "
                    f"(Y = sum_i X_i W_i). Use a mesh whose model axis divides {v.shape[0]}, "
                    f"or a user module (module_file), whose undividable variables stay "
                    f"replicated")


def check(module: UserModule, spec: ms.ModelSpec, model_axis: int = 0,
          widths_key: str = "trainer.hidden_units"):
  """Builds the model and calls it on a 2-example batch; raises ModuleError naming the
  module when the model is not a tf_keras.Model, does not take the input dict, or returns
  an output that does not fit the task. With ``model_axis`` >= 1 (a mesh layout, or
  ``auto``, which may choose one) the module's layout rules are resolved against the
  model too (:func:`check_layout_rules`). Returns the model."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with layer_names(fresh=True):
    model = build(module, spec)
  if model_axis >= 1:
    check_layout_rules(module, spec, model, model_axis)
    check_builtin_split(module, spec, model, model_axis, widths_key)
  batch = dummy_batch(spec)
  try:
    out = model(batch, training=False)
  except Exception as e:  # pylint: disable=broad-except
    raise ModuleError(
        f"{module.name}: the model failed on a batch of its input dict "
        f"{ {k: f'{v.dtype.name}{list(v.shape)}' for k, v in batch.items()} }: "
        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
  if not isinstance(out, tf.Tensor):
    raise ModuleError(f"{module.name}: the model must return one tensor. "
                      f"Received: {type(out).__name__}")
  want = [2, spec.output_units]
  if out.shape.as_list() != want:
    what = {"regression": "1 value", "binary": "1 logit",
            "multiclass": f"{spec.num_classes} logits"}[spec.task]
    raise ModuleError(
        f"{module.name}: the model's output has shape {out.shape.as_list()[1:]} per batch of "
        f"2 examples, but task {spec.task!r} needs {what} per example (shape "
        f"[batch, {spec.output_units}]). Received output shape {out.shape.as_list()}")
  if module.loss:
    make_loss(module, spec)
  return model
