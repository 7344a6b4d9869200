"""Layout rules: which model variables are split over the mesh's ``model`` axis, and how.

A mesh has two axes, ``batch`` (data parallel: each row block of the global batch goes
to one batch index) and ``model`` (tensor parallel: a variable is split into M shards).
A *rule* maps a regex on variable paths to a sharding per dimension, each entry either
``None`` (the dimension is whole on every device) or ``"model"`` (it is split into M
equal blocks), e.g.::

    {r".*hidden_1/kernel": (None, "model"), r".*hidden_2/kernel": ("model", None)}

A variable's path is its name without the ``:0`` suffix (``hidden_1/kernel``). As in
Keras's ``LayoutMap``, a rule equal to a path places it; otherwise a rule applies to the
variables in whose path its regex is found (``re.search``: anchor it with ``^...$`` to
match the whole path). Two rules that match one variable are an error naming both; an
unmatched variable is replicated on every device.

The math DTensor runs for a Dense layer Y = X W (X [B, F], W [F, H], model axis M):

* **column split** ``(None, "model")``: device i holds W[:, i] (H/M output units) and
  computes Y_i = X W_i, its block of output columns, with no communication. The bias
  splits with the outputs, ``("model",)``. Gradient of shard i: Xᵀ ∂L/∂Y_i.
* **row split** ``("model", None)``: device i holds W_i = W[i] (F/M input rows) and
  the matching input columns X_i; the output is Y = Σ_i X_i W_i, a partial sum on
  each device, all-reduced over the model axis. The gradient of shard i is
  X_iᵀ ∂L/∂Y, but DTensor does not compute it locally: the tape's kernel gradient comes
  out whole on every device and the relayout into W's layout slices it
  (tests/test_trainer_linear_mesh.py reads it before the relayout). The bias is added
  once, after the sum (replicated).
* **Megatron pairs**: a column-split layer followed by a row-split one needs no
  communication in between (the column layer's output blocks are exactly the row
  layer's input blocks; an element-wise activation keeps them) and one all-reduce
  after the pair.

Default rules (:func:`default_rules`), when the user module gives none: Dense kernels
in layer order form Megatron pairs (the first of a pair is ``(None, "model")`` with its
bias ``("model",)``, the second ``("model", None)`` with its bias replicated); a kernel
that would start a pair but whose outputs the model axis does not divide (the built-in
linear model's ``[F, 1]``, a 3-logit head) is split by rows, ``("model", None)``: the
seed's ``Y = sum_i X_i W_i``, bias replicated; embedding tables are split along their OUTPUT dimension
``(None, "model")``, because DTensor cannot gather from a table sharded on dimension 0
("does not support sharded 0th dimension for the resource tensor for
ResourceGatherOp"). A variable whose dimensions the model axis divides for no default
rule (a ``[5, 3]`` head on a model axis of 2) stays replicated; :func:`default_plan`
lists these so the run can say so.

User rules are checked by :func:`validate_rules` before training starts: a rule that
matches no variable, names a dimension the model axis does not divide, has the wrong
rank, or splits a gathered table on its rows, is a :class:`ShardingError` naming the
module, the variable and the rule.
"""
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging

# The axes, VariableInfo and the divisibility check live in mesh_axes.py (one of each).
from tfx_parallel.components.distributed_trainer.mesh_axes import (  # pylint: disable=g-bad-import-order,unused-import
    BATCH_AXIS, DENSE_BIAS, DENSE_KERNEL, EMBEDDING, MODEL_AXIS, OTHER, Sharding, VariableInfo,
    undivided, undivided_message)

Rules = Mapping[str, Sharding]


class ShardingError(ValueError):
  """A layout rule cannot apply. ``module``, ``variable`` and ``rule`` name the culprit
  (``variable`` is None when the rule matches no variable)."""

  def __init__(self, module: str, rule: str, variable: Optional[str], message: str):
    self.module, self.rule, self.variable = module, rule, variable
    where = f" variable {variable!r}" if variable is not None else ""
    super().__init__(f"module {module!r}: layout rule {rule!r}{where}: {message}")


def variable_path(variable) -> str:
  """The path rules match against: the variable's name without the ``:0`` suffix."""
  name = variable.name
  return name[:-2] if name.endswith(":0") else name


def leaf_layers(layer) -> List:
  """Layers that own variables, depth first in the model's layer order."""
  children = [l for l in getattr(layer, "layers", []) or [] if l is not layer]
  if not children:
    return [layer]
  out = []
  for child in children:
    out.extend(leaf_layers(child))
  return out


def describe_variables(model) -> List[VariableInfo]:
  """Path, shape and kind of every variable of a built model, in ``model.weights`` order."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  kinds: Dict[int, Tuple[str, str]] = {}
  for layer in leaf_layers(model):
    if isinstance(layer, tf_keras.layers.Dense):
      kinds[id(layer.kernel)] = (DENSE_KERNEL, layer.name)
      if layer.bias is not None:
        kinds[id(layer.bias)] = (DENSE_BIAS, layer.name)
    elif isinstance(layer, tf_keras.layers.Embedding):
      kinds[id(layer.embeddings)] = (EMBEDDING, layer.name)
  return [VariableInfo(variable_path(v), tuple(v.shape.as_list()),
                       *kinds.get(id(v), (OTHER, "")), dtype_bytes=v.dtype.size)
          for v in model.weights]


def _divides(model_axis: int, info: VariableInfo, sharding: Sharding) -> bool:
  return undivided(info.shape, sharding, model_axis) is None


def default_rules_for(variables: Sequence[VariableInfo], model_axis: int) -> Dict[str, Sharding]:
  """The default rules (module docstring) for ``variables``; pure."""
  return default_plan(variables, model_axis)[0]


def default_plan(variables: Sequence[VariableInfo], model_axis: int
                 ) -> Tuple[Dict[str, Sharding], List[VariableInfo]]:
  """(default rules, the Dense kernels and tables left replicated because the model axis
  divides none of their candidate dimensions); pure.

  Dense kernels in layer order: after a column split comes its row-split partner (a
  Megatron pair); otherwise a kernel is split by columns, or, when the model axis does
  not divide its outputs (a linear model's ``[F, 1]``, a 3-logit head) but divides its
  inputs, by rows: ``Y = sum_i X_i W_i``, the bias replicated.
  """
  rules: Dict[str, Sharding] = {}
  replicated: List[VariableInfo] = []
  if model_axis == 1:
    return rules, replicated  # One device on the model axis: nothing to split.
  biases = {v.layer: v for v in variables if v.kind == DENSE_BIAS}
  after_column = False
  for v in variables:
    if v.kind == EMBEDDING:
      options = [({v: (None, MODEL_AXIS)}, "embedding table split on its output dimension")]
    elif v.kind == DENSE_KERNEL:
      column = {v: (None, MODEL_AXIS)}
      if v.layer in biases:
        column[biases[v.layer]] = (MODEL_AXIS,)
      row = ({v: (MODEL_AXIS, None)}, "Dense kernel row split")
      options = ([row] if after_column else
                 [(column, "Dense kernel column split"), row])
    else:
      continue
    chosen = next((w for w, _ in options
                   if all(_divides(model_axis, info, s) for info, s in w.items())), None)
    if v.kind == DENSE_KERNEL:
      after_column = chosen is not None and chosen[v] == (None, MODEL_AXIS)
    if chosen is None:
      if model_axis > 1:
        replicated.append(v)
        logging.info("mesh: %s of %s%s does not divide by the model axis %d; keeping it "
                     "replicated", " or ".join(w for _, w in options), v.path, list(v.shape),
                     model_axis)
      continue
    rules.update({_exact_rule(info.path, variables): s for info, s in chosen.items()})
  return rules, replicated


def _exact_rule(path: str, variables: Sequence[VariableInfo]) -> str:
  """A rule that matches ``path`` and no other variable: the path itself (a rule equal
  to a path places it, :func:`_matching`), anchored ``^...$`` when it is also found
  inside another variable's path or holds regex characters."""
  escaped = re.escape(path)
  if escaped == path and not any(v.path != path and path in v.path for v in variables):
    return path
  return f"^{escaped}$"


def unsplit_kernels(variables: Sequence[VariableInfo], model_axis: int) -> List[VariableInfo]:
  """The Dense kernels that no default rule can split on a model axis of ``model_axis``
  (they would stay whole on every device); pure. The one divisibility check of the
  built-in models: ``user_module.check_builtin_split`` turns these into a config error."""
  return [v for v in default_plan(variables, model_axis)[1] if v.kind == DENSE_KERNEL]


def default_rules(model, model_axis: int) -> Dict[str, Sharding]:
  """Default rules for a built tf_keras model on a model axis of ``model_axis`` devices."""
  return default_rules_for(describe_variables(model), model_axis)


def _check_sharding(rule: str, sharding, module_name: str) -> Sharding:
  if not isinstance(sharding, (tuple, list)):
    raise ShardingError(module_name, rule, None,
                        f"a sharding is a tuple with one entry per dimension, each None or "
                        f"{MODEL_AXIS!r}. Received: {sharding!r}")
  bad = [s for s in sharding if s not in (None, MODEL_AXIS)]
  if bad:
    raise ShardingError(module_name, rule, None,
                        f"each entry must be None or {MODEL_AXIS!r} (the batch axis is for "
                        f"inputs). Received: {tuple(sharding)!r}")
  if list(sharding).count(MODEL_AXIS) > 1:
    raise ShardingError(module_name, rule, None,
                        f"the {MODEL_AXIS!r} axis can split at most one dimension. "
                        f"Received: {tuple(sharding)!r}")
  return tuple(sharding)


def resolve(rules: Rules, variables: Sequence[VariableInfo], model_axis: int,
            module_name: str = "built-in") -> Dict[str, Sharding]:
  """Validates ``rules`` against ``variables`` and returns every variable's sharding
  (path -> one entry per dimension; unmatched variables get all None).

  Raises:
    ShardingError: a rule that is not a regex or not a valid sharding; that matches no
      variable (or only variables a rule equal to their path places); two rules that
      match one variable; whose rank differs
      from a matched variable's; that splits a dimension the model axis does not
      divide; or that splits an embedding table on its rows.
  """
  compiled = []
  for rule, sharding in rules.items():
    try:
      pattern = re.compile(rule)
    except re.error as e:
      raise ShardingError(module_name, rule, None, f"not a valid regex: {e}") from e
    compiled.append((rule, pattern, _check_sharding(rule, sharding, module_name)))
  placed: Dict[str, Sharding] = {}
  used = set()
  for v in variables:
    matched = _matching(compiled, v.path, module_name)
    if matched is None:
      continue
    rule, sharding = matched
    used.add(rule)
    if len(sharding) != len(v.shape):
      raise ShardingError(module_name, rule, v.path,
                          f"the sharding has rank {len(sharding)} but the variable has "
                          f"shape {list(v.shape)} (rank {len(v.shape)}). "
                          f"Received: {sharding!r}")
    dim = undivided(v.shape, sharding, model_axis)
    if dim is not None:
      raise ShardingError(module_name, rule, v.path,
                          f"{undivided_message(v.path, v.shape, dim, model_axis)}. "
                          f"{undivided_fix(v.shape[dim], dim, model_axis)} "
                          f"Received: {sharding!r}")
    if v.kind == EMBEDDING and sharding and sharding[0] is not None:
      raise ShardingError(module_name, rule, v.path,
                          "an embedding table cannot be split on dimension 0: DTensor's "
                          "gather does not support a sharded 0th dimension "
                          "(ResourceGatherOp); split it on its output dimension, "
                          f"(None, {MODEL_AXIS!r}). Received: {sharding!r}")
    placed[v.path] = sharding
  paths = [v.path for v in variables]
  for rule, pattern, _ in compiled:
    if rule in used:
      continue
    exact = [p for p in paths if pattern.search(p)]
    if exact:
      raise ShardingError(module_name, rule, exact[0],
                          "every variable it matches is placed by the rule that is exactly "
                          "its path")
    raise ShardingError(module_name, rule, None,
                        f"matches no variable (rules are searched in the path, "
                        f"re.search). Variables: {paths}")
  return {v.path: placed.get(v.path, (None,) * len(v.shape)) for v in variables}


def _matching(compiled, path: str, module_name: str) -> Optional[Tuple[str, Sharding]]:
  """The (rule, sharding) that places ``path``, as Keras's ``LayoutMap`` picks it: a rule
  equal to the path, else the one rule whose regex is found in it (``re.search``);
  None when no rule matches. Two rules found in one path are a ShardingError naming
  both (keras/src/distribution/distribution_lib.py ``LayoutMap.__getitem__``, Keras
  3.x: "Path ... matches multiple layout specification keys")."""
  for rule, _, sharding in compiled:
    if rule == path:
      return rule, sharding
  found = [(rule, sharding) for rule, pattern, sharding in compiled if pattern.search(path)]
  if len(found) > 1:
    raise ShardingError(module_name, found[0][0], path,
                        f"the rules {found[0][0]!r} and {found[1][0]!r} both match it; a "
                        f"variable must match at most one rule (anchor them, e.g. "
                        f"'^{re.escape(path)}$')")
  return found[0] if found else None


def undivided_fix(size: int, dim: int, model_axis: int) -> str:
  """The fixes of a rule that splits a dimension of ``size`` the model axis does not
  divide, each with what the user types."""
  multiple = model_axis * -(-size // model_axis)
  return (f"To fix it: give the dimension a size the axis divides, e.g. {multiple}, with "
          f"the module's hparam that sets it (--hparams '{{\"embedding_dim\": {multiple}}}'"
          f" for examples/taxi_model.py's tables; the setting trainer.hparams); or leave "
          f"dimension {dim} whole (None) in this rule of layout_rules(spec); or use a mesh "
          f"whose model axis divides {size} (--mesh BxM; the setting trainer.mesh).")


def validate_rules(rules: Rules, variables: Sequence[VariableInfo], model_axis: int,
                   module_name: str) -> None:
  """Raises ShardingError (see :func:`resolve`) unless every rule applies cleanly."""
  resolve(rules, variables, model_axis, module_name)


def is_sharded(sharding: Sharding) -> bool:
  return any(s is not None for s in sharding)


def split_name(sharding: Sharding) -> str:
  """How a variable is split, in words: ``rows`` (dimension 0 of a matrix), ``columns``
  (dimension 1), ``dim K`` (other ranks), or ``replicated``."""
  dims = [d for d, s in enumerate(sharding) if s is not None]
  if not dims:
    return "replicated"
  if len(sharding) == 2:
    return "rows" if dims[0] == 0 else "columns"
  return f"dim {dims[0]}"


def split_record(shardings: Mapping[str, Sharding],
                 shard_shapes: Mapping[str, Sequence[int]], model_axis: int) -> Dict[str, dict]:
  """Per variable (path -> ``split``, ``sharding``, ``per_device`` shape) for the run
  record; ``shard_shapes`` is what each device really holds (read from the DTensor). On
  a model axis of 1 every variable is whole on each device: ``replicated``."""
  return {path: {"split": split_name(s) if model_axis > 1 else "replicated", "sharding": list(s),
                 "per_device": list(shard_shapes.get(path, ()))}
          for path, s in shardings.items()}


def describe_splits(record: Mapping[str, dict], shapes: Mapping[str, Sequence[int]]) -> str:
  """One line: ``linear/kernel [2, 1] rows -> [1, 1] per device, linear/bias [1] replicated``."""
  parts = []
  for path, r in record.items():
    shape = list(shapes.get(path, r["per_device"]))
    if r["split"] == "replicated":
      parts.append(f"{path} {shape} replicated")
    else:
      parts.append(f"{path} {shape} {r['split']} -> {r['per_device']} per device")
  return ", ".join(parts)
