"""The ``mesh`` layout for any tf_keras model: a DTensor mesh of batch x model devices.

:class:`MeshTrainer` trains a user's ``build_model()`` on a mesh (B, M) of logical CPU
devices (or GPUs when present) with a custom loop:

* **Placement.** ``build_model()`` runs once as a *probe* under tf_keras's
  ``lazy_init_scope`` (tf_keras/src/dtensor/lazy_variable.py, what its own
  ``LayoutMap`` builds with): its variables have names and shapes but no values, so
  nothing is allocated. The layout rules (:mod:`sharding`; the user's ``layout_rules``
  or the defaults) are resolved and validated on the probe's variables, then
  ``build_model()`` runs again under a variable creator that creates each variable
  once, as a ``dtensor.DVariable`` in its layout (sharding per dimension over the
  ``model`` axis, replicated over ``batch``). Its initial value is computed on the host
  (CPU:0), one variable at a time, with the random state the probe started from, and
  each device receives only its block (:meth:`MeshTrainer._place`). So a mesh run
  starts from exactly the weights a single-device run would, whatever the
  initialisers, and no device ever holds a whole split variable. Both builds run with
  tf_keras's ``tf.random.Generator`` on (:func:`tf_random_generator`), so its random
  layers (Dropout, ...) draw with stateless ops, which DTensor runs; each such layer
  draws its generator's seed from the sequence unseeded initialisers draw from, so the
  layers after it start from the weights of a single-device build with the generator
  on, not of one with tf_keras's default. (tf_keras's
  ``dtensor.utils.call_with_layout`` is not used: it runs the initializer under
  ``default_mesh``, replicated, a whole copy per device, before relayouting.)
* **Input.** Each global batch is split into B row blocks along the ``batch`` axis;
  device (b, m) receives row block b (replicated over the model axis).
* **Activations.** A layer holding a split variable returns its outputs gathered
  over the model axis (split over ``batch`` only), so the rest of the user's model
  sees ordinary tensors (DTensor's layout propagation otherwise carries the split
  into e.g. a concat with a float feature, and fails). The one exception is the
  Megatron hand-off: a column-split Dense whose every consumer is a row-split Dense
  keeps its output split, since those blocks are exactly the next layer's inputs.
* **Steps.** One ``tf.function`` call runs k steps (``steps_per_execution``) over k
  global batches stacked on a leading axis and packed onto the mesh once per dtype
  (:meth:`MeshTrainer.steps_async`), written out one step after another (k is static:
  one trace per k); each step: forward,
  ``loss_fn(labels, outputs)`` (a mean over the global batch, plus the model's
  regularisation losses), gradients, each put in its variable's layout (the batch-axis
  sum of per-device partial gradients happens there, before any non-linear update),
  then the tf_keras optimizer built with ``mesh=`` applies them; its slot variables
  (momentum, Adam m/v) are created with ``zeros_like(variable)`` and so follow the
  variable's layout. Step i's gradients wait for step i-1's writes, its update for its
  gradients. The order of variable reads and writes inside one function holds only
  with DTensor's all-reduce combining off (``tfenv.ENV_REQUIRED``, set before DTensor's
  device is made): that pass moves a function's all-reduces together and re-sorts the
  block by data edges alone, so on a 2x1 mesh Adam's update read m and v before their
  writes (no weight moved in the first step; 0.14 off fit after 5). No
  ``tf.while_loop``: DTensor turns a loop back into functions named per compiled module
  (``while4_body``) and registers them process-wide, so engines built one after another
  in one process collided ("Cannot add function ... already exists", issue #49 item 3;
  :func:`_unique_scope`). Per step this costs no host round trip: one DTensor call per
  k steps replaced two per step (13.3 ms per mesh 1x1 step of the issue #25 model,
  against 2.0 ms for a fit step; benchmarks/results/mesh_engine.md).

  The input is packed here rather than fed by ``dtensor.DTensorDataset``: its iterator
  (``_DTensorIterator.__next__``, tensorflow/dtensor/python/input_util.py lines 144-156,
  TF 2.16.2) takes each element on the host mesh and calls ``copy_to_mesh`` eagerly,
  between two ``context.async_wait()``, once per step: it cannot run inside the step
  function and costs what one pack does.

  DTensor's SPMD expansion turns the model's ops into the sharded math: a row-split
  kernel gives Y = Σ_i X_i W_i (partial products all-reduced over the model axis); shard
  i keeps its gradient block X_iᵀ ∂L/∂Y, but the tape's kernel gradient is computed
  whole on every device and the relayout into the kernel's layout slices it (not a
  local product: tests/test_trainer_linear_mesh.py reads it before the relayout), so a
  step briefly holds a whole gradient of each split kernel per device; a column-split kernel gives output blocks
  Y_i = X W_i with no communication; Megatron pairs (column then row) need one
  all-reduce per pair. See :mod:`sharding` for the rules and the defaults.
* **Boundaries.** Nothing outside the step gathers a split variable onto a device:
  :meth:`MeshTrainer.evaluation_sums` evaluates on the mesh itself (the sharded
  variables, the batch split over the batch axis); :meth:`MeshTrainer.copy_into` writes
  one variable into the export's host model block by block, each into its slice
  (mesh_engine.MeshEngine.copy_weights_to), :meth:`MeshTrainer.host_slices` hands an
  early stop's snapshot the blocks unassembled, :meth:`MeshTrainer.host_blocks` hands a
  streamed checkpoint each block unassembled (run/checkpoint.py), and
  :meth:`MeshTrainer.assign_from_host` writes one value back, each device receiving its
  block.
  ``full_weights()`` / ``state()`` return every variable through ``to_host``;
  ``shard_shapes()`` reads each device's local shape from the DTensor itself.

Only ``tf_keras`` models whose variables exist after ``build_model()`` (functional
models, or subclassed models built inside ``build_model`` with ``model.build(shapes)`` or
a call on ``tf_keras.Input``: the probe's variables hold no values, so a call on tensors
fails there, a ModuleError saying so) are supported.
"""
import contextlib
import importlib
import itertools
import random
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from tfx_parallel.components.common import tfenv
from tfx_parallel.components.distributed_trainer import user_module
from tfx_parallel.components.distributed_trainer import optimizers as optimizers_lib
from tfx_parallel.components.distributed_trainer import sharding as sharding_lib
from tfx_parallel.components.distributed_trainer.engines.tf_keras_fields import TfKerasFieldError

BATCH_AXIS, MODEL_AXIS = sharding_lib.BATCH_AXIS, sharding_lib.MODEL_AXIS
_LABELS = "__tfxp_labels__"  # The labels' key among the packed batch's columns.
# Numbers the mesh functions this process traces (_unique_scope).
_TRACES = itertools.count()


def _unique_scope(kind: str):
  """A name scope no other function traced in this process uses, around everything a
  mesh function traces. The step itself holds no loop (:meth:`MeshTrainer._train_steps`),
  but a user's model may: DTensor's MLIR pipeline turns each ``tf.while_loop`` back into
  functions named ``GetUniqueName(op) + "_body"``
  (tensorflow/compiler/mlir/tensorflow/transforms/region_control_flow_to_functional.cc,
  TF 2.16), unique only within one compiled module, and registers them in the
  process-wide function library ("Cannot add function 'while4_body' because a different
  function with the same name already exists"). Under this scope a loop's op, and so its
  functions, carry the trace's own number."""
  return tf.name_scope(f"mesh_{kind}_{next(_TRACES)}_")


def _rng_state():
  """Python's, numpy's and tf_keras's seed sequence's states (what
  ``tf_keras.utils.set_random_seed`` seeds), to draw the real build's initial values
  from where the probe started. The probe draws from tf_keras's sequence: each random
  layer's generator takes its seed from it when built (backend.py ``_create_seed``)."""
  generator = getattr(seed_generator(), "generator", None)  # None before set_random_seed.
  return random.getstate(), np.random.get_state(), generator and generator.getstate()


def _set_rng_state(state):
  random.setstate(state[0])
  np.random.set_state(state[1])
  if state[2] is not None:
    seed_generator().generator.setstate(state[2])


@contextlib.contextmanager
def tf_random_generator():
  """tf_keras's ``tf.random.Generator`` RNG on for the block (the mesh's builds), and as
  it was after it, so other layouts in the process keep tf_keras's default.

  DTensor cannot run stateful random ops ("Stateful random operations are not supported
  in DTensor"), which tf_keras's random layers (Dropout, GaussianNoise, GaussianDropout,
  AlphaDropout, SpatialDropout*) draw with by default (``tf.nn.dropout``,
  ``tf.random.uniform``). Each such layer is a ``BaseRandomLayer`` whose
  ``backend.RandomGenerator`` reads the flag once, when the layer is constructed (``_set_rng_type``: "stateful", i.e. a
  ``tf.random.Generator``, when ``is_tf_random_generator_enabled()``, else
  "legacy_stateful"; tf_keras 2.16 src/backend.py lines 1923-1951), and creates the
  generator's state variable when the layer is built (``BaseRandomLayer.build`` calls
  ``_maybe_init``, src/engine/base_layer.py line 3800; backend.py lines 1953-1990). So
  the flag must be on while ``build_model()`` constructs the layers, both builds: the
  generator's int64 state variable then goes through the mesh's variable creator like
  any other, a replicated DVariable, and each draw is a stateless op
  (``StatelessRandomUniformV2`` with a key and counter skipped from that state), which
  DTensor's SPMD expansion draws per shard (different masks per batch-axis shard, the
  same on the devices of the model axis). tf_keras's own ``LayoutMap`` demands the flag
  and makes the same state a DVariable (src/dtensor/layout_map.py lines 441-451). The
  state is not in ``model.weights`` nor in checkpoints (BaseRandomLayer keeps it out,
  base_layer.py lines 3765-3780).
  """
  experimental = tf_keras.backend.experimental
  was_on = experimental.is_tf_random_generator_enabled()
  experimental.enable_tf_random_generator()
  try:
    yield
  finally:
    if not was_on:
      experimental.disable_tf_random_generator()


# Private tf_keras fields the mesh relies on: checked where used, never guessed with a
# default; pinned by tests/test_trainer_tf_keras_fields.py.
# The probe build: tf_keras/src/dtensor/lazy_variable.py, what its LayoutMap builds with.
LAZY_VARIABLE_MODULE, LAZY_INIT_SCOPE = "tf_keras.src.dtensor.lazy_variable", "lazy_init_scope"
# The Megatron hand-off reads a functional model's graph: Layer._outbound_nodes, and each
# Node's outbound_layer (tf_keras/src/engine/base_layer.py, node.py).
OUTBOUND_NODES, OUTBOUND_LAYER = "_outbound_nodes", "outbound_layer"
# The seed sequence set_random_seed starts (tf_keras/src/utils/tf_utils.py line 71: a
# thread-local holding a random.Random), from which unseeded initializers and random
# layers draw their seeds (tf_keras/src/backend.py lines 1830, 2028-2034).
BACKEND_MODULE, SEED_GENERATOR = "tf_keras.src.backend", "_SEED_GENERATOR"
# A random layer's backend.RandomGenerator, and the method that creates its
# tf.random.Generator (state variable and seed) once (tf_keras/src/engine/base_layer.py
# BaseRandomLayer, src/backend.py RandomGenerator._maybe_init).
RANDOM_GENERATOR, MAYBE_INIT = "_random_generator", "_maybe_init"


def lazy_init_scope():
  """tf_keras's ``lazy_init_scope`` (variables with names and shapes, no values), or
  TfKerasFieldError naming the tf_keras version."""
  try:
    module = importlib.import_module(LAZY_VARIABLE_MODULE)
  except ImportError as e:
    raise TfKerasFieldError(LAZY_VARIABLE_MODULE, "the lazy build of its LayoutMap") from e
  scope = getattr(module, LAZY_INIT_SCOPE, None)
  if scope is None:
    raise TfKerasFieldError(f"{LAZY_VARIABLE_MODULE}.{LAZY_INIT_SCOPE}",
                            "the lazy build of its LayoutMap")
  return scope()


def seed_generator():
  """tf_keras's thread-local seed sequence (:data:`SEED_GENERATOR`; its ``generator`` is
  set by ``set_random_seed``), or TfKerasFieldError naming the tf_keras version."""
  backend = importlib.import_module(BACKEND_MODULE)
  if not hasattr(backend, SEED_GENERATOR):
    raise TfKerasFieldError(f"{BACKEND_MODULE}.{SEED_GENERATOR}",
                            "the seed sequence the mesh's two builds draw from")
  return getattr(backend, SEED_GENERATOR)


def init_random_generators(model):
  """Creates the generator of each of ``model``'s random layers that its build left
  unbuilt (a Dropout only called when training), as tf_keras's own LayoutMap does
  (src/dtensor/layout_map.py ``_init_state_variable_for_rng``): called inside the mesh's
  builds, its state is then created by their variable creators, a replicated DVariable,
  and its seed drawn there, not at the first step, as a plain variable on CPU:0 inside the
  DTensor step (the devices of the model axis then drew different masks for one
  replicated activation, and two runs from one seed differed). TfKerasFieldError if the
  fields are gone."""
  for layer in [model, *model.submodules]:
    if not isinstance(layer, tf_keras.__internal__.layers.BaseRandomLayer):
      continue
    generator = getattr(layer, RANDOM_GENERATOR, None)
    if not hasattr(generator, MAYBE_INIT):
      raise TfKerasFieldError(f"BaseRandomLayer.{RANDOM_GENERATOR}.{MAYBE_INIT}",
                              f"on layer {layer.name!r}, whose generator the mesh creates")
    getattr(generator, MAYBE_INIT)()


def outbound_layers(layer) -> List:
  """The layers that consume ``layer``'s outputs in a functional model's graph, read from
  tf_keras's private ``Layer._outbound_nodes``; TfKerasFieldError if it is gone."""
  if not hasattr(layer, OUTBOUND_NODES):
    raise TfKerasFieldError(f"Layer.{OUTBOUND_NODES}", f"on layer {layer.name!r}, where the "
                            f"mesh finds a Megatron hand-off")
  out = []
  for node in getattr(layer, OUTBOUND_NODES):
    if not hasattr(node, OUTBOUND_LAYER):
      raise TfKerasFieldError(f"Node.{OUTBOUND_LAYER}", f"on a node of layer {layer.name!r}")
    out.append(getattr(node, OUTBOUND_LAYER))
  return out


def _dtensor():
  from tensorflow.experimental import dtensor  # pylint: disable=g-import-not-at-top
  return dtensor


def create_mesh(mesh_shape: Tuple[int, int]):
  """A (batch, model) mesh over the first B*M GPUs, or logical CPUs when there is no GPU."""
  tfenv.require_dtensor_env()  # Before DTensor's device is made (entry points did already).
  dtensor = _dtensor()
  b, m = mesh_shape
  device_type = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
  local = tf.config.list_logical_devices(device_type)
  if len(local) < b * m:
    raise ValueError(f"mesh: {b}x{m} needs {b * m} {device_type} devices, found {len(local)} "
                     f"(split the CPU first: tfenv.split_cpu). Received: mesh_shape={mesh_shape}")
  return dtensor.create_mesh([(BATCH_AXIS, b), (MODEL_AXIS, m)],
                             devices=[d.name for d in local[:b * m]], device_type=device_type)


def _check_model(model, module_name: str):
  if not isinstance(model, tf_keras.Model):
    raise TypeError(f"module {module_name!r}: build_model() must return a tf_keras.Model. "
                    f"Received: {type(model).__name__}")
  if not model.weights:
    raise ValueError(f"module {module_name!r}: build_model() returned a model with no variables; "
                     f"the mesh layout places variables when they are created, so build the "
                     f"model inside build_model (tf_keras.Input, or call model.build).")


class MeshTrainer:
  """Trains ``build_model()`` on a (batch, model) DTensor mesh; see the module docstring.

  Args:
    build_model: returns a fresh tf_keras.Model taking a dict of feature tensors.
    mesh_shape: (B, M): B devices along the batch axis, M along the model axis.
    rules: variable-path regex -> sharding per dimension (:mod:`sharding`); None uses
      :func:`sharding.default_rules`.
    loss_fn: (labels, outputs) -> scalar mean loss over the global batch.
    optimizer: config ``optimizer`` ("sgd", "momentum" or "adam", with ``learning_rate``),
      or ``mesh -> tf_keras optimizer built with mesh=`` (user_module.make_optimizer).
    learning_rate: the learning rate of a named optimizer.
    global_batch: rows per step; B divides it (TrainerConfig.validate checks it).
    module_name: names the user module in errors.

  Raises:
    sharding.ShardingError: a rule does not apply (before any training).
    ValueError: bad mesh shape, global batch, optimizer, or too few devices.
  """

  def __init__(self, build_model: Callable[[], tf_keras.Model], *, mesh_shape: Tuple[int, int],
               rules: Optional[Mapping[str, Tuple[Optional[str], ...]]],
               loss_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor],
               optimizer, learning_rate: float = 0.0, global_batch: int,
               module_name: str = "built-in"):
    mesh_shape = tuple(int(x) for x in mesh_shape)
    if len(mesh_shape) != 2 or min(mesh_shape) < 1:
      raise ValueError(f"mesh_shape: two positive sizes (batch, model). Received: {mesh_shape}")
    if isinstance(optimizer, str) and optimizer not in optimizers_lib.OPTIMIZERS:
      raise ValueError(f"optimizer: must be one of {list(optimizers_lib.OPTIMIZERS)}. "
                       f"Received: {optimizer!r}")
    self.mesh_shape = mesh_shape
    self.global_batch = global_batch
    self.module_name = module_name
    self.loss_fn = loss_fn
    self._d = _dtensor()
    self.mesh = create_mesh(mesh_shape)

    # 1. Probe: a build whose variables hold no values (tf_keras's LazyInitVariable, what
    # its own LayoutMap builds with: tf_keras/src/dtensor/layout_map.py
    # ``layout_map_scope``) gives the variables' paths, shapes and kinds; the rules are
    # resolved on them. Nothing is allocated, so no device ever holds a whole probe.
    rng_state = _rng_state()
    paths: List[str] = []  # Every variable the build creates, in order (Model counters too).

    def record(next_creator, **kwargs):
      v = next_creator(**kwargs)
      paths.append(sharding_lib.variable_path(v))
      return v

    with (tf_random_generator(), user_module.layer_names(fresh=False), lazy_init_scope(),
          tf.variable_creator_scope(record)):
      try:
        probe = build_model()
      except user_module.ModuleError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        raise user_module.ModuleError(
            f"module {module_name!r}: build_model() raised {type(e).__name__} on the mesh's "
            f"probe build, whose variables have shapes but no values yet (tf_keras "
            f"lazy_init_scope): a model that computes on values while it is built (a "
            f"subclassed model called on tensors) cannot be placed. Build it with "
            f"model.build(input shapes) or by calling it on tf_keras.Input. "
            f"{type(e).__name__}: {str(e).strip().splitlines()[0][:300] if str(e).strip() else ''}"
        ) from e
      _check_model(probe, module_name)
      init_random_generators(probe)  # Its state recorded, as the real build creates it.
    infos = sharding_lib.describe_variables(probe)
    del probe
    _set_rng_state(rng_state)  # The real build draws what a single-device build draws.
    # Default-rule variables left replicated on a model axis > 1 (nothing divides).
    self.replicated: List[sharding_lib.VariableInfo] = []
    if rules is None:
      rules, self.replicated = sharding_lib.default_plan(infos, mesh_shape[1])
    self.rules = dict(rules)
    self.shardings = sharding_lib.resolve(self.rules, infos, mesh_shape[1], module_name)

    # 2. The real build: each variable is created once, as a DVariable in its layout. Its
    # initial value is computed on the host (CPU:0), one variable at a time, exactly as a
    # single-device build computes it, and each device receives only its block
    # (:meth:`_place`). tf_keras's ``call_with_layout`` (dtensor/utils.py) is not used:
    # it runs the initializer under ``default_mesh``, i.e. replicated, a whole copy on
    # every device, before the relayout.
    placed: List[tf.Variable] = []

    def place(next_creator, **kwargs):
      del next_creator
      i = len(placed)
      if i >= len(paths):
        raise RuntimeError(f"module {module_name!r}: build_model() created more variables on "
                           f"the second build than on the first; it must be deterministic.")
      initial = kwargs.get("initial_value")
      with tf.device("/CPU:0"):
        value = tf.convert_to_tensor(initial() if callable(initial) else initial,
                                     dtype=kwargs.get("dtype"))
      spec = self.shardings.get(paths[i], (None,) * value.shape.rank)
      v = self._d.DVariable(self._place(value, self._layout(spec)), name=kwargs.get("name"),
                            trainable=kwargs.get("trainable", True),
                            constraint=kwargs.get("constraint"))
      del value
      if sharding_lib.variable_path(v) != paths[i]:
        raise RuntimeError(f"module {module_name!r}: variable {i} is {paths[i]!r} on the first "
                           f"build and {sharding_lib.variable_path(v)!r} on the second; "
                           f"build_model() must be deterministic.")
      placed.append(v)
      return v

    with tf_random_generator(), tf.variable_creator_scope(place):
      self.model = build_model()
      _check_model(self.model, module_name)
      init_random_generators(self.model)
    if len(placed) != len(paths):
      raise RuntimeError(f"module {module_name!r}: build_model() created {len(paths)} "
                         f"variables on the first build and {len(placed)} on the second.")

    self._gather_split_outputs()
    if isinstance(optimizer, str):
      self.optimizer = optimizers_lib.make(optimizer, learning_rate, mesh=self.mesh)
    else:
      self.optimizer = optimizer(self.mesh)
    self.optimizer.build(self.model.trainable_variables)
    # Layouts are read eagerly (fetch_layout cannot run inside a tf.function).
    self._grad_layouts = [self._d.fetch_layout(v) for v in self.model.trainable_variables]
    # What an update writes: the next step's reads wait for these (_train_steps).
    self._written = list(self.model.trainable_variables) + list(self.optimizer.variables)
    self._train_fns: Dict[tuple, Callable] = {}  # per grouping of the batch (steps_async)
    self._gradients_fn = tf.function(self._gradients)  # one batch's gradients alone

  def _hands_off_split_output(self, layer) -> bool:
    """True for a column-split Dense whose every consumer (in a functional model's
    graph) is a row-split Dense: the Megatron hand-off, where the split activations
    are exactly the next layer's input blocks and stay split."""
    path = sharding_lib.variable_path
    if (not isinstance(layer, tf_keras.layers.Dense)
        or self.shardings.get(path(layer.kernel)) != (None, MODEL_AXIS)):
      return False
    consumers = outbound_layers(layer)
    return bool(consumers) and all(
        isinstance(c, tf_keras.layers.Dense)
        and self.shardings.get(path(c.kernel)) == (MODEL_AXIS, None) for c in consumers)

  def _gather_split_outputs(self):
    """Makes each layer that holds a split variable return its outputs split over the
    batch axis only (whole on every model-axis device), except at a Megatron hand-off.

    The variables stay split (each device stores and updates only its block); only
    the layer's activations are all-gathered, so the rest of the user's model sees
    ordinary tensors. Without this, DTensor's layout propagation carries a split
    into the next op: concatenating a split [B, 4] embedding lookup (or a
    column-split Dense output) with a [B, 1] float feature fails with "requires
    dimension 1 to be divisible by sharding".
    """
    d = self._d
    self.gathered: List[str] = []  # names of the layers whose outputs are gathered

    def gather(t):
      if not isinstance(t, tf.Tensor) or t.shape.rank in (None, 0):
        return t
      return d.relayout(t, d.Layout([BATCH_AXIS] + [d.UNSHARDED] * (t.shape.rank - 1),
                                    self.mesh))

    handing_off = {id(layer) for layer in sharding_lib.leaf_layers(self.model)
                   if self._hands_off_split_output(layer)}
    for layer in sharding_lib.leaf_layers(self.model):
      if self._takes_whole_inputs(layer, handing_off):
        call = layer.call

        def gather_then_call(inputs, *args, _call=call, **kwargs):
          return _call(tf.nest.map_structure(gather, inputs), *args, **kwargs)

        layer.call = gather_then_call
      split = [v for v in layer.weights
               if sharding_lib.is_sharded(self.shardings.get(sharding_lib.variable_path(v), ()))]
      if not split or id(layer) in handing_off:
        continue
      call = layer.call

      def call_then_gather(*args, _call=call, **kwargs):
        return tf.nest.map_structure(gather, _call(*args, **kwargs))

      layer.call = call_then_gather
      self.gathered.append(layer.name)

  def _takes_whole_inputs(self, layer, handing_off) -> bool:
    """True for a row-split Dense whose input is not a Megatron hand-off: its input is
    pinned whole over the model axis, so that DTensor slices X_i locally for
    ``Y = sum_i X_i W_i`` instead of pushing the row split back into the op that made
    X (a concat of the features: "concat dimension in sharded dimension is not
    supported")."""
    path = sharding_lib.variable_path
    if (not isinstance(layer, tf_keras.layers.Dense)
        or self.shardings.get(path(layer.kernel)) != (MODEL_AXIS, None)):
      return False
    producers = [node.inbound_layers for node in getattr(layer, "_inbound_nodes", [])]
    producers = [p for group in producers for p in tf.nest.flatten(group)]
    return not (producers and all(id(p) in handing_off for p in producers))

  # --- layouts ------------------------------------------------------------------
  def _layout(self, spec: Sequence[Optional[str]]):
    d = self._d
    return d.Layout([s if s is not None else d.UNSHARDED for s in spec], self.mesh)

  def _block_index(self, specs, device: int) -> Tuple[int, ...]:
    """Which block of each dimension mesh device ``device`` holds under ``specs`` (the
    mesh orders its devices batch-major: device i is (i // M, i % M))."""
    m = self.mesh_shape[1]
    where = {BATCH_AXIS: device // m, MODEL_AXIS: device % m}
    return tuple(where.get(s, 0) for s in specs)

  def _block_slices(self, specs, shape, key) -> Tuple[slice, ...]:
    sizes = {BATCH_AXIS: self.mesh_shape[0], MODEL_AXIS: self.mesh_shape[1]}
    out = []
    for s, n, k in zip(specs, shape, key):
      width = n // sizes.get(s, 1)
      out.append(slice(k * width, (k + 1) * width))
    return tuple(out)

  def _place(self, value, layout):
    """A host value as a DTensor in ``layout``: the value is cut into blocks on the host
    (CPU:0) and each device receives only its block; no device ever holds the whole
    value of a split variable."""
    specs = list(layout.sharding_specs)
    with tf.device("/CPU:0"):
      value = tf.convert_to_tensor(value)
      shape = value.shape.as_list()
      blocks: Dict[tuple, tf.Tensor] = {}
      components = []
      for device in range(self.mesh_shape[0] * self.mesh_shape[1]):
        key = self._block_index(specs, device)
        if key not in blocks:
          blocks[key] = value[self._block_slices(specs, shape, key)] if specs else value
        components.append(blocks[key])
    return self._d.pack(components, layout)

  def _distinct_blocks(self, variable, specs) -> Iterator[Tuple[Tuple[slice, ...], tf.Tensor]]:
    """Each distinct block the devices hold of ``variable`` (laid out by ``specs``) once,
    with the slices of the global value it covers: one block, the whole value, for a
    variable no dimension of which is split."""
    shape = variable.shape.as_list()
    done = set()
    for device, component in enumerate(self._d.unpack(variable.read_value())):
      key = self._block_index(specs, device)
      if key not in done:
        done.add(key)
        yield self._block_slices(specs, shape, key), component

  def host_slices(self, variable) -> Iterator[Tuple[Tuple[slice, ...], np.ndarray]]:
    """One variable as (slices of the global value, block in host memory) pairs, each
    distinct block the devices hold copied once when it is asked for, never assembled:
    what the export writes into its host model slice by slice (``copy_into``) and what
    an early stop's snapshot keeps (mesh_engine.MeshEngine.snapshot)."""
    specs = list(self._d.fetch_layout(variable).sharding_specs)
    with tf.device("/CPU:0"):
      for slices, component in self._distinct_blocks(variable, specs):
        yield slices, component.numpy()

  def copy_into(self, variable, target: tf.Variable, blocks=None):
    """Writes ``variable``'s value (or ``blocks``, what :meth:`host_slices` gave) into
    ``target``, a host variable of the same shape, block by block into its slices: the
    host holds one block in transit, never the whole value of a split variable."""
    if tuple(target.shape.as_list()) != tuple(variable.shape.as_list()):
      raise ValueError(f"export: {target.name} has shape {target.shape.as_list()}, the "
                       f"trained {variable.name} {variable.shape.as_list()}")
    whole = tuple(slice(0, n) for n in variable.shape.as_list())
    with tf.device("/CPU:0"):
      for slices, block in (self.host_slices(variable) if blocks is None else blocks):
        if slices == whole or not slices:
          target.assign(block)
        else:
          # The op itself, not ``target[slices].assign``: that reads the whole variable
          # first (a strided slice of ``target.value()``), and after the first sliced
          # write a resource variable is in copy-on-read mode, so each such read copies it
          # whole (tensorflow/core/kernels/training_op_helpers.h EnsureSparseVariableAccess,
          # TF 2.16): the export's copy peaked 180 MB above its
          # start with it, 108 MB with this, on the bench's 6144-wide kernel (mesh 1x4).
          tf.raw_ops.ResourceStridedSliceAssign(
              ref=target.handle, begin=[s.start for s in slices],
              end=[s.stop for s in slices], strides=[1] * len(slices), value=block)
        del block

  def to_host(self, variable) -> np.ndarray:
    """One variable's whole value in host memory, assembled from the blocks the devices
    hold (each block copied once); the devices keep only their blocks. For tests and
    ``state``; the export writes block by block instead (:meth:`copy_into`)."""
    specs = list(self._d.fetch_layout(variable).sharding_specs)
    with tf.device("/CPU:0"):
      if not specs:
        return self._d.unpack(variable.read_value())[0].numpy()
      out = np.empty(variable.shape.as_list(), variable.dtype.as_numpy_dtype)
      for slices, component in self._distinct_blocks(variable, specs):
        out[slices] = component.numpy()
    return out

  def host_blocks(self, variable) -> Iterator[Tuple[str, tf.Tensor]]:
    """One variable as (slice spec, block on the host) pairs, each distinct block the
    devices hold copied to CPU:0 when it is asked for, never assembled: what a streamed
    checkpoint writes (run/checkpoint.py). The spec is SaveV2's ``shape_and_slices`` entry, the
    global shape then the block's extent per dimension (``"3072 3072 0,768:-"``,
    tensor_slice.h: ``start,length``, ``-`` for a whole dimension); ``""`` for a variable
    no dimension of which is split."""
    specs = list(self._d.fetch_layout(variable).sharding_specs)
    whole = all(s == self._d.UNSHARDED for s in specs)
    shape = " ".join(map(str, variable.shape.as_list()))
    with tf.device("/CPU:0"):
      for slices, component in self._distinct_blocks(variable, specs):
        if whole:
          yield "", tf.identity(component)
          continue
        extent = ":".join(
            "-" if s == self._d.UNSHARDED else f"{piece.start},{piece.stop - piece.start}"
            for s, piece in zip(specs, slices))
        yield f"{shape} {extent}", tf.identity(component)

  def assign_from_host(self, variable, value):
    """Writes a whole host value into ``variable``, each device receiving its block."""
    value = np.asarray(value, variable.dtype.as_numpy_dtype)
    if tuple(value.shape) != tuple(variable.shape.as_list()):
      raise ValueError(f"state: {variable.name} has shape {variable.shape.as_list()}, the "
                       f"value {list(value.shape)}")
    variable.assign(self._place(value, self._d.fetch_layout(variable)))

  def _pack(self, value) -> tf.Tensor:
    """A global-batch host tensor as a DTensor split by rows over the batch axis:
    device (b, m) gets row block b (the mesh orders devices batch-major)."""
    return self._pack_on(tf.convert_to_tensor(value), 0)

  def _pack_steps(self, value) -> tf.Tensor:
    """k global batches stacked on a leading axis (``[k, global_batch, ...]``), packed the
    same way: device (b, m) gets row block b of every batch."""
    return self._pack_on(tf.convert_to_tensor(value), 1)

  def _pack_on(self, value: tf.Tensor, rows: int) -> tf.Tensor:
    if value.shape.rank <= rows or value.shape[rows] != self.global_batch:
      raise ValueError(f"inputs: every feature and the labels must have the global batch "
                       f"{self.global_batch} as {('first', 'second')[rows]} dimension. "
                       f"Received: shape {value.shape}")
    b, m = self.mesh_shape
    blocks = tf.split(value, b, axis=rows)
    specs = [self._d.UNSHARDED] * value.shape.rank
    specs[rows] = BATCH_AXIS
    return self._d.pack([blk for blk in blocks for _ in range(m)],
                        self._d.Layout(specs, self.mesh))

  # --- training -----------------------------------------------------------------
  def _gradients(self, features, labels):
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      outputs = self.model(features, training=True)
      loss = self.loss_fn(labels, outputs)
      if self.model.losses:
        loss += tf.add_n(self.model.losses)
    grads = tape.gradient(loss, variables)
    # Each gradient in its variable's layout: this sums the per-device partial
    # gradients over the batch axis before the (non-linear) optimizer update.
    return loss, [self._d.relayout(tf.convert_to_tensor(g), layout)
                  for g, layout in zip(grads, self._grad_layouts)]

  def _train_steps(self, features, labels):
    """k steps in one graph (``features``/``labels`` hold k global batches stacked on a
    leading axis; k is static, one trace per k); returns the k losses. Written out step
    by step, no ``tf.while_loop`` (module docstring, Steps): step i's gradients wait for
    step i-1's writes, its update waits for its gradients."""
    k = labels.shape[0]
    if k is None:
      raise ValueError(f"steps: the number of stacked batches must be static. Received: "
                       f"labels of shape {labels.shape}")
    with _unique_scope("steps"):
      losses, written = [], []
      for i in range(k):
        # tf.gather, not t[i]: DTensor lays a shrinking strided slice of a
        # [k, batch-split, ...] tensor out on the wrong dimension.
        batch = {name: tf.gather(t, i) for name, t in features.items()}
        with tf.control_dependencies(written):
          loss, grads = self._gradients(batch, tf.gather(labels, i))
        with tf.control_dependencies(grads):
          self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
          written = [tf.identity(v) for v in self._written]
        losses.append(tf.cast(loss, tf.float32))
      with tf.control_dependencies(written):
        return tf.identity(tf.stack(losses))

  def step(self, features: Dict[str, tf.Tensor], labels: tf.Tensor) -> float:
    """One synchronous step on a global batch; returns the loss.

    Every feature and the labels must have exactly ``global_batch`` rows (batch the
    input with ``drop_remainder=True``).
    """
    stack = lambda t: tf.expand_dims(tf.convert_to_tensor(t), 0)  # pylint: disable=unnecessary-lambda-assignment
    return self.fetch([self.steps_async({k: stack(v) for k, v in features.items()},
                                        stack(labels))])[0]

  def steps_async(self, features: Dict[str, tf.Tensor], labels: tf.Tensor):
    """k steps in ONE DTensor call, without waiting for the losses: every feature and
    the labels hold k global batches stacked on a leading axis (``[k, global_batch,
    ...]``, e.g. ``dataset.batch(k)`` over global batches). Returns the k losses on the
    mesh (see :meth:`fetch`). One function is traced per grouping of the features and
    per k."""
    return self.run_packed(self.pack_steps(features, labels))

  def pack_steps(self, features: Dict[str, tf.Tensor], labels: tf.Tensor):
    """The host half of :meth:`steps_async`: the k stacked batches packed onto the mesh,
    for :meth:`run_packed`. A loop that packs the next execution's batches after
    starting the current one (which returns before the devices finish) overlaps the
    host's packing with the devices' steps, as ``fit`` reads its input inside its
    train function."""
    return self._pack_batch(features, labels)

  def run_packed(self, packed):
    """The device half of :meth:`steps_async`: starts the k steps on what
    :meth:`pack_steps` returned; returns the k losses on the mesh (see :meth:`fetch`)."""
    key, groups, singles = packed
    fn = self._train_fns.get(key)
    if fn is None:
      fn = self._train_fns[key] = self._steps_function(key)
    return fn(groups, singles)

  def _steps_function(self, key):
    return tf.function(
        lambda g, s, _key=key: self._train_steps(*self._unpack_batch(_key, g, s)))

  def _pack_batch(self, features, labels):
    """The k stacked batches onto the mesh with one pack per dtype (each pack is an eager
    round trip that costs as much as a small step): the [k, B, w] columns of a dtype are
    concatenated, packed once, and split again inside the step function
    (:meth:`_unpack_batch`). Returns (static key of the grouping, packed groups, other
    tensors packed alone)."""
    values = {k: tf.convert_to_tensor(v) for k, v in features.items()}
    values[_LABELS] = tf.convert_to_tensor(labels)
    groups: Dict[str, List[Tuple[str, int]]] = {}
    singles = {}
    for k in sorted(values):
      v = values[k]
      if v.shape.rank == 3 and v.shape[2] is not None:
        groups.setdefault(v.dtype.name, []).append((k, int(v.shape[2])))
      else:
        singles[k] = self._pack_steps(v)
    key = tuple((dtype, tuple(members)) for dtype, members in sorted(groups.items()))
    packed = tuple(self._pack_steps(tf.concat([values[k] for k, _ in members], axis=2))
                   for _, members in key)
    return key, packed, singles

  @staticmethod
  def _unpack_batch(key, groups, singles):
    values = dict(singles)
    for (_, members), packed in zip(key, groups):
      parts = tf.split(packed, [w for _, w in members], axis=2)
      values.update({k: part for (k, _), part in zip(members, parts)})
    labels = values.pop(_LABELS)
    return values, labels

  def fetch(self, losses) -> List[float]:
    """The values of the losses that :meth:`steps_async` returned, in step order (one
    device read per call)."""
    return [float(x) for loss in losses for x in self._d.unpack(loss)[0].numpy()]

  # --- evaluation ---------------------------------------------------------------
  def evaluation_sums(self, per_example: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
                      ) -> Callable[[Dict[str, tf.Tensor], tf.Tensor], Tuple[float, float, int]]:
    """``(features, labels) -> (sum, sum of squares, count)`` of ``per_example(labels,
    model(features))`` on the mesh: the model's own sharded variables, the batch's rows
    split over the batch axis (a batch whose rows the batch axis does not divide is
    padded with copies of its first row, masked out of the sums). Traced once per batch
    shape."""
    @tf.function
    def sums(features, labels, mask):
      with _unique_scope("eval"):
        return scoped_sums(features, labels, mask)

    def scoped_sums(features, labels, mask):
      values = tf.cast(per_example(labels, self.model(features, training=False)), tf.float64)
      mask = tf.reshape(mask, [-1] + [1] * (values.shape.rank - 1))
      values = values * mask
      return (tf.reduce_sum(values), tf.reduce_sum(tf.square(values)),
              tf.reduce_sum(tf.ones_like(values) * mask))

    def evaluate(features, labels) -> Tuple[float, float, int]:
      labels = tf.convert_to_tensor(labels)
      rows = int(labels.shape[0])
      pad = -rows % self.mesh_shape[0]
      fill = lambda t: (tf.concat([t, tf.repeat(t[:1], pad, axis=0)], 0) if pad else t)  # pylint: disable=unnecessary-lambda-assignment
      mask = tf.constant([1.0] * rows + [0.0] * pad, tf.float64)
      out = sums({k: self._pack_rows(fill(tf.convert_to_tensor(v))) for k, v in features.items()},
                 self._pack_rows(fill(labels)), self._pack_rows(mask))
      s, s2, n = (self._d.unpack(t)[0].numpy() for t in out)
      return float(s), float(s2), int(round(float(n)))
    return evaluate

  def _pack_rows(self, value: tf.Tensor) -> tf.Tensor:
    """A host tensor split by rows over the batch axis (any multiple of B rows)."""
    b, m = self.mesh_shape
    specs = [self._d.UNSHARDED] * value.shape.rank
    specs[0] = BATCH_AXIS
    return self._d.pack([blk for blk in tf.split(value, b, axis=0) for _ in range(m)],
                        self._d.Layout(specs, self.mesh))

  # --- reading back -------------------------------------------------------------
  def full_weights(self) -> List[np.ndarray]:
    """Unsharded values in ``model.get_weights()`` order."""
    return [self.to_host(v) for v in self.model.weights]

  def shard_shapes(self) -> Dict[str, Tuple[int, ...]]:
    """Variable path -> the shape of the block each device holds, read from the DTensor
    (every device's component is checked to have the same shape)."""
    out = {}
    for v in self.model.weights:
      shapes = {tuple(c.shape.as_list()) for c in self._d.unpack(v.read_value())}
      if len(shapes) != 1:
        raise RuntimeError(f"{v.name}: devices hold blocks of different shapes {shapes}")
      out[sharding_lib.variable_path(v)] = shapes.pop()
    return out

  def global_shapes(self) -> Dict[str, List[int]]:
    """Variable path -> its whole shape."""
    return {sharding_lib.variable_path(v): v.shape.as_list() for v in self.model.weights}

  def layouts(self) -> Dict[str, Tuple[str, ...]]:
    """Variable path -> the DTensor sharding spec per dimension, model and optimizer state
    (e.g. ``"m/hidden_1/kernel": ("unsharded", "model")``)."""
    return {name: tuple(self._d.fetch_layout(v).sharding_specs)
            for name, v in self.state_variables().items()}

  def state_variables(self) -> Dict[str, tf.Variable]:
    out: Dict[str, tf.Variable] = {}
    for prefix, variables in (("model/", self.model.weights),
                              ("optimizer/", self.optimizer.variables)):
      for v in variables:
        key = prefix + sharding_lib.variable_path(v)
        if key in out:
          raise ValueError(f"state: two variables are named {key!r}; give the layers "
                           f"unique names")
        out[key] = v
    return out

  def state(self) -> Dict[str, np.ndarray]:
    """Every model and optimizer variable, unsharded: ``model/<path>``, ``optimizer/<name>``."""
    return {k: self.to_host(v) for k, v in self.state_variables().items()}

  def load_state(self, state: Dict[str, np.ndarray]):
    """Restores what :meth:`state` returned (same model, optimizer and rules)."""
    variables = self.state_variables()
    missing, extra = sorted(set(variables) - set(state)), sorted(set(state) - set(variables))
    if missing or extra:
      raise ValueError(f"state: does not fit this model and optimizer; missing {missing}, "
                       f"unexpected {extra}")
    for key, v in variables.items():
      value = np.asarray(state[key])
      if tuple(value.shape) != tuple(v.shape.as_list()):
        raise ValueError(f"state: {key} has shape {list(value.shape)}, the variable "
                         f"{v.shape.as_list()}")
      self.assign_from_host(v, value)
