"""Warm start: the ``base_model`` input (a Model artifact, ours or a stock Trainer's Keras
SavedModel at ``<uri>/Format-Serving``) initialises the model before the first step, on
every layout.

Variables are matched by their object path from the Keras model (``layer_with_weights-0/
kernel``: what a tf.train.Checkpoint of the model keys them by, whatever the layer names
were uniquified to in the process that built it), read from the SavedModel's variables
checkpoint one at a time (``tf.train.load_checkpoint``; the paths come from the
checkpoint's own object graph, ``_CHECKPOINTABLE_OBJECT_GRAPH``), and written into the
model by the engine: a whole value per variable on the host (a mesh places each device's
block: mesh_runtime ``assign_from_host``), never a second copy of the model.

Not part of the model: the base's ``optimizer`` (a stock Trainer saves its compiled
model's), ``keras_api`` (the SavedModel's Keras metadata: metrics) and ``tft_layer``
(the Transform graph the export attaches, which the run's own input supplies).

A base variable without a match, a model variable the base lacks, or a shape that
differs is named, and the run fails with a ConfigError on ``trainer.warm_start_partial``
unless that setting is true: then the matching variables load and the rest keep their
fresh initialisation. A checkpoint of the same run wins: a resumed run does not warm
start again (run/train.py).

Ids, not only shapes (:func:`compare_inputs`). A string feature's ids follow its
vocabulary, most frequent first (model_spec.vocabulary_from_counts), so new data in other
proportions gives the same shape and another row order; a string label's class ids
follow its sorted vocabulary. Our export records the model spec and normalisation beside
the SavedModel (:data:`INPUTS_RECORD`, in ``assets.extra``, which TF Serving and the
stock Evaluator leave alone), and a warm start compares them with this run's:

* a vocabulary that changed: the rows of an Embedding fed straight from that feature's
  input are re-indexed by string (a string both know gets its base row at its new id,
  id 0 (missing / out of vocabulary) keeps its base row, a new string keeps its fresh
  initialisation), named in the record (``reindexed``). A table the trainer cannot find
  that way (an Embedding with either vocabulary's row count, else any such matrix) is a
  mismatch;
* hashed against vocabulary ids, or another bucket count: its tables are mismatched;
* a changed label vocabulary: the output layer's variables are mismatched;
* a changed normalisation is said (``normalization_changed``), not refused.

A base model without the record (a stock Trainer's, or an older one) loads by position,
and the record says so (``vocabularies``).
"""
import collections
import dataclasses
import json
import os
import zlib
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from tfx_parallel.components.common.config_util import ConfigError

PARTIAL_SETTING = "trainer.warm_start_partial"
# Children of the saved model that are not the model's variables (module docstring).
SKIPPED_CHILDREN = frozenset({"optimizer", "keras_api", "tft_layer"})
_VALUE = "VARIABLE_VALUE"
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"
# Beside the SavedModel: {"model_spec": ModelSpec.to_dict(), "normalization": ...}.
INPUTS_RECORD = os.path.join("assets.extra", "tfx_parallel_inputs.json")
_STRING = "string"  # model_spec.STRING (a unit of the same layer: not imported).
NOT_RECORDED = ("not recorded (a stock Trainer's base model, or an older one): embedding "
                "rows and output classes load by position; check that its vocabularies "
                "are this run's")


@dataclasses.dataclass(frozen=True)
class BaseVariable:
  """One variable of the base model: its name, shape and checkpoint key."""
  name: str
  shape: Tuple[int, ...]
  key: str


def variables_path(saved_model_dir: str) -> str:
  return os.path.join(saved_model_dir, "variables", "variables")


def _paths(root, children: Callable[[Any], List[Tuple[str, Any]]],
           is_variable: Callable[[Any], bool], ident: Callable[[Any], Any]
           ) -> "collections.OrderedDict[Any, List[str]]":
  """Breadth first from ``root``: every path to each variable (objects other than
  variables are entered once, by their first path), skipping SKIPPED_CHILDREN."""
  found: "collections.OrderedDict[Any, List[str]]" = collections.OrderedDict()
  seen = {ident(root)}
  queue = collections.deque([(root, "")])
  while queue:
    obj, prefix = queue.popleft()
    for name, child in children(obj):
      if name in SKIPPED_CHILDREN:
        continue
      path = f"{prefix}{name}"
      if is_variable(child):
        found.setdefault(ident(child), (child, []))[1].append(path)
      elif ident(child) not in seen:
        seen.add(ident(child))
        queue.append((child, path + "/"))
  return found


def base_variables(saved_model_dir: str) -> Tuple[Dict[str, BaseVariable], List[BaseVariable]]:
  """(object path -> variable, every variable once) of the SavedModel's checkpoint."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.core.protobuf import trackable_object_graph_pb2  # pylint: disable=g-import-not-at-top
  prefix = variables_path(saved_model_dir)
  if not tf.io.gfile.exists(prefix + ".index"):
    raise ConfigError("base_model", f"no SavedModel variables at {prefix}.index: the "
                      f"base_model input must be a Model artifact whose Format-Serving "
                      f"holds a Keras SavedModel (ours or a stock Trainer's). Received: "
                      f"{saved_model_dir}")
  reader = tf.train.load_checkpoint(prefix)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH))
  shapes = reader.get_variable_to_shape_map()

  def value_of(node_id):
    for attribute in graph.nodes[node_id].attributes:
      if attribute.name == _VALUE:
        return attribute
    return None

  found = _paths(0, lambda i: [(c.local_name, c.node_id) for c in graph.nodes[i].children],
                 lambda i: value_of(i) is not None, lambda i: i)
  by_path, every = {}, []
  for node_id, (_, paths) in found.items():
    attribute = value_of(node_id)
    variable = BaseVariable(attribute.full_name or paths[0],
                            tuple(shapes.get(attribute.checkpoint_key, ())),
                            attribute.checkpoint_key)
    every.append(variable)
    for path in paths:
      by_path[path] = variable
  return by_path, every


def model_variables(model) -> List[Tuple[List[str], Any]]:
  """(every object path, variable) of each variable of a tf_keras model, in order."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  view = tf.train.TrackableView(model)
  found = _paths(model, lambda obj: list(view.children(obj).items()),
                 lambda obj: isinstance(obj, tf.Variable) or hasattr(obj, "_dtensor_layout")
                 or type(obj).__name__.endswith("Variable"), id)
  return [(paths, variable) for variable, paths in found.values()]


def _name(variable) -> str:
  return variable.name.split(":")[0]


@dataclasses.dataclass
class Match:
  """What a warm start loads: (model variable, base variable) pairs, and what does not
  match, each named."""
  source: str
  pairs: List[Tuple[Any, BaseVariable]]
  missing: List[str]     # Model variables the base lacks.
  extra: List[str]       # Base variables the model lacks.
  mismatched: List[str]  # Same path, other shape (or other ids: compare_inputs).
  # id(model variable) -> its Reindex (rows / columns follow strings: compare_inputs).
  reindex: Dict[int, "Reindex"] = dataclasses.field(default_factory=dict)
  # What compare_inputs found, for the record (feature -> what changed, etc.).
  notes: Dict[str, Any] = dataclasses.field(default_factory=dict)

  def skipped(self) -> List[str]:
    return self.missing + self.extra + self.mismatched

  def record(self, partial: bool) -> Dict[str, Any]:
    """history.json's ``warm_start``."""
    return dict({"source": self.source, "loaded": len(self.pairs),
                 "skipped": len(self.skipped()), "skipped_names": self.skipped(),
                 "partial": partial}, **self.notes)


@dataclasses.dataclass(frozen=True)
class Reindex:
  """A variable whose ``axis`` is indexed by ids of a vocabulary: entry i of this run's
  value is entry ``index[i]`` of the base's, or fresh (``initializer``, with ``seed``
  when it takes one: every worker of a multi_worker run draws the same rows) where -1."""
  axis: int
  index: Tuple[int, ...]
  initializer: Any
  seed: int = 0

  def apply(self, base_value, shape, dtype):
    import numpy as np  # pylint: disable=g-import-not-at-top
    init = self.initializer
    if "seed" in init.get_config():
      init = type(init).from_config(dict(init.get_config(), seed=self.seed))
    fresh = np.array(init(shape, dtype=dtype))
    index = np.asarray(self.index)
    kept = index >= 0
    moved = np.moveaxis(fresh, self.axis, 0)
    moved[kept] = np.moveaxis(base_value, self.axis, 0)[index[kept]]
    return np.moveaxis(moved, 0, self.axis)


def write_inputs_record(saved_model_dir: str, spec_dict: Mapping[str, Any],
                        normalization: Optional[Mapping[str, Any]]) -> None:
  """Writes :data:`INPUTS_RECORD` beside an exported SavedModel (run/train.py)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(saved_model_dir, INPUTS_RECORD)
  tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(json.dumps({"model_spec": dict(spec_dict), "normalization": normalization},
                       sort_keys=True))


def read_inputs_record(saved_model_dir: str) -> Optional[Dict[str, Any]]:
  """The base model's :data:`INPUTS_RECORD`; None when it has none."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(saved_model_dir, INPUTS_RECORD)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.loads(f.read())


def _ids(feature: Mapping[str, Any]) -> Tuple:
  """How a string feature's ids are made: ("hash", buckets) or ("vocabulary", values)."""
  if feature.get("hash_buckets"):
    return ("hash", int(feature["hash_buckets"]))
  return ("vocabulary", tuple(feature.get("vocabulary") or ()))


def _index(new: Tuple[str, ...], old: Tuple[str, ...]) -> Tuple[int, ...]:
  """Base id of each id of this run (id 0, missing or out of vocabulary, keeps 0; -1:
  a string the base does not know)."""
  where = {v: i + 1 for i, v in enumerate(old)}
  return (0,) + tuple(where.get(v, -1) for v in new)


def _fed_by(model) -> Dict[int, str]:
  """id(input tensor) -> feature name of a functional model ({} otherwise)."""
  try:
    inputs = model.input
    names = list(model.input_names)
  except (AttributeError, ValueError):  # A subclassed model that has no graph of layers.
    return {}
  if isinstance(inputs, dict):
    return {id(t): name for name, t in inputs.items()}
  listed = inputs if isinstance(inputs, (list, tuple)) else [inputs]
  return {id(t): name for name, t in zip(names, listed)}


def _embeddings(model) -> Dict[str, List[Any]]:
  """feature name -> the Embedding layers fed straight from its input."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  fed = _fed_by(model)
  out: Dict[str, List[Any]] = {}
  for layer in model.layers:
    if not isinstance(layer, tf_keras.layers.Embedding):
      continue
    try:
      source = fed.get(id(layer.input))
    except (AttributeError, ValueError):  # Called more than once, or never.
      source = None
    if source is not None:
      out.setdefault(source, []).append(layer)
  return out


def _tables_of_size(model, sizes) -> List[Any]:
  """What may be indexed by a feature's ids when no Embedding reads its input: the
  Embeddings with that many rows, else any matrix with that many rows (a one-hot Dense)."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  tables = [layer.embeddings for layer in model.layers
            if isinstance(layer, tf_keras.layers.Embedding)
            and layer.embeddings.shape[0] in sizes]
  return tables or [v for v in model.variables if v.shape.rank == 2 and v.shape[0] in sizes]


def _output_layer(model):
  try:
    return model.get_layer(model.output_names[0])
  except (AttributeError, ValueError, IndexError):
    return None


def compare_inputs(model, spec_dict: Mapping[str, Any],
                   normalization: Optional[Mapping[str, Any]], base_record
                   ) -> Tuple[Dict[int, Reindex], Dict[int, str], Dict[str, Any]]:
  """This run's vocabularies, label vocabulary and normalisation against the base's
  :data:`INPUTS_RECORD` (module docstring): (id(variable) -> Reindex, id(variable) ->
  why it does not match, notes for the record)."""
  if base_record is None:  # Said when this run has ids that a vocabulary orders.
    ordered = spec_dict.get("label_vocabulary") or any(
        f["dtype"] == _STRING and not f.get("hash_buckets")
        for f in spec_dict.get("features", ()))
    return {}, {}, ({"vocabularies": NOT_RECORDED} if ordered else {})
  base_spec = base_record.get("model_spec") or {}
  base_features = {f["name"]: f for f in base_spec.get("features", ())}
  tables = _embeddings(model)
  reindex: Dict[int, Reindex] = {}
  refused: Dict[int, str] = {}
  reindexed: Dict[str, Any] = {}
  for f in spec_dict.get("features", ()):
    old = base_features.get(f["name"])
    if f["dtype"] != _STRING or old is None or old.get("dtype") != _STRING:
      continue
    new_ids, old_ids = _ids(f), _ids(old)
    if new_ids == old_ids:
      continue
    layers = tables.get(f["name"], [])
    if new_ids[0] == old_ids[0] == "vocabulary" and layers:
      index = _index(new_ids[1], old_ids[1])
      for layer in layers:
        reindex[id(layer.embeddings)] = Reindex(
            0, index, layer.embeddings_initializer,
            zlib.crc32(_name(layer.embeddings).encode()) % 2**31)
      known = set(old_ids[1])
      reindexed[f["name"]] = {
          "variables": [_name(layer.embeddings) for layer in layers],
          "kept": sum(1 for i in index[1:] if i >= 0),
          "new": [v for v in new_ids[1] if v not in known][:20],
          "dropped": [v for v in old_ids[1] if v not in set(new_ids[1])][:20]}
      continue
    why = (f"feature {f['name']!r} ids differ from the base model's "
           f"({_describe_ids(new_ids)} here, {_describe_ids(old_ids)} there)")
    sizes = {int(f.get("num_ids") or 0), int(old.get("num_ids") or 0)}
    variables = [layer.embeddings for layer in layers] or _tables_of_size(model, sizes)
    for v in variables:
      refused.setdefault(id(v), why + ("" if layers else
                                       ": its table could not be told (no Embedding fed "
                                       "straight from its input)"))
  labels = [None if v is None else list(v) for v in (spec_dict.get("label_vocabulary"),
                                                     base_spec.get("label_vocabulary"))]
  if labels[0] != labels[1]:
    layer = _output_layer(model)
    why = (f"label {spec_dict.get('label_key')!r} classes differ from the base model's "
           f"({_short(spec_dict.get('label_vocabulary'))} here, "
           f"{_short(base_spec.get('label_vocabulary'))} there)")
    for v in (layer.variables if layer is not None else []):
      refused.setdefault(id(v), why)
  notes: Dict[str, Any] = {}
  if reindexed:
    notes["reindexed"] = reindexed
  base_norm = base_record.get("normalization")
  if json.loads(json.dumps(normalization)) != base_norm:  # Tuples as JSON lists.
    notes["normalization_changed"] = True
  return reindex, refused, notes


def describe_notes(notes: Mapping[str, Any]) -> List[str]:
  """Console lines of :func:`compare_inputs`'s notes."""
  lines = []
  if "vocabularies" in notes:
    lines.append(f"the base model's vocabularies are {notes['vocabularies']}")
  for name, what in notes.get("reindexed", {}).items():
    lines.append(f"feature {name!r}: vocabulary changed; {what['kept']} known value(s) "
                 f"moved to their new ids in {', '.join(what['variables'])}, new (fresh): "
                 f"{_short(what['new'])}, dropped: {_short(what['dropped'])}")
  if notes.get("normalization_changed"):
    lines.append("the normalisation (train mean/std) differs from the base model's: the "
                 "loaded weights see inputs standardised another way")
  return lines


def _describe_ids(ids: Tuple) -> str:
  return f"{ids[1]} hash buckets" if ids[0] == "hash" else f"vocabulary {_short(ids[1])}"


def _short(values) -> str:
  if values is None:
    return "none"
  values = list(values)
  return repr(values[:5])[:-1] + (f", ... {len(values) - 5} more]" if len(values) > 5 else "]")


def match(model, saved_model_dir: str, source: Optional[str] = None,
          spec_dict: Optional[Mapping[str, Any]] = None,
          normalization: Optional[Mapping[str, Any]] = None) -> Match:
  """The model's variables against the base's, by object path and shape and, given this
  run's ``spec_dict`` (ModelSpec.to_dict()), by ids (:func:`compare_inputs`)."""
  by_path, every = base_variables(saved_model_dir)
  reindex, refused, notes = ({}, {}, {}) if spec_dict is None else compare_inputs(
      model, spec_dict, normalization, read_inputs_record(saved_model_dir))
  pairs, missing, mismatched, used = [], [], [], set()
  for paths, variable in model_variables(model):
    base = next((by_path[p] for p in paths if p in by_path), None)
    shape = tuple(variable.shape.as_list())
    if base is None:
      missing.append(f"{_name(variable)} (path {paths[0]}, shape {list(shape)}): not in "
                     f"the base model")
      continue
    used.add(base.key)
    plan = reindex.get(id(variable))
    if id(variable) in refused:
      mismatched.append(f"{_name(variable)} (path {paths[0]}): {refused[id(variable)]}")
    elif plan is not None and (len(plan.index) != shape[plan.axis]
                               or len(base.shape) != len(shape)
                               or max(plan.index) >= base.shape[plan.axis]
                               or any(a != b for i, (a, b) in enumerate(zip(shape, base.shape))
                                      if i != plan.axis)):
      mismatched.append(f"{_name(variable)} (path {paths[0]}): shape {list(shape)} here, "
                        f"{list(base.shape)} in the base model ({base.name}), which does "
                        f"not fit its recorded vocabulary")
    elif plan is None and base.shape != shape:
      mismatched.append(f"{_name(variable)} (path {paths[0]}): shape {list(shape)} here, "
                        f"{list(base.shape)} in the base model ({base.name})")
    else:
      pairs.append((variable, base))
  extra = [f"{b.name} (shape {list(b.shape)}): in the base model, not in this one"
           for b in every if b.key not in used]
  return Match(source or saved_model_dir, pairs, missing, extra, mismatched,
               {k: v for k, v in reindex.items()
                if any(id(var) == k for var, _ in pairs)}, notes)


def check(found: Match, partial: bool) -> None:
  """Raises ConfigError on ``trainer.warm_start_partial`` naming what does not match,
  unless ``partial``; also when nothing at all matches."""
  skipped = found.skipped()
  if not found.pairs:
    raise ConfigError(PARTIAL_SETTING, f"no variable of the model matches the base model "
                      f"{found.source} by path and shape: {'; '.join(skipped[:10])}. Pass "
                      f"the base_model of a run of the same module (and hparams)")
  if skipped and not partial:
    shown = "; ".join(skipped[:20]) + (f"; ... {len(skipped) - 20} more"
                                       if len(skipped) > 20 else "")
    raise ConfigError(PARTIAL_SETTING, f"{len(skipped)} variable(s) do not match the base "
                      f"model {found.source}: {shown}. Set {PARTIAL_SETTING}=true to load "
                      f"the {len(found.pairs)} that match and start the rest fresh, or "
                      f"pass a base_model of the same architecture")


def load(found: Match, saved_model_dir: str, assign: Callable[[Any, Any], None]) -> None:
  """Writes each matched base value into its variable, one variable on the host at a
  time (``assign(variable, numpy value)``: the engine's)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(variables_path(saved_model_dir))
  for variable, base in found.pairs:
    value = reader.get_tensor(base.key)
    plan = found.reindex.get(id(variable))
    if plan is not None:  # Rows follow their strings (compare_inputs).
      value = plan.apply(value, tuple(variable.shape.as_list()), variable.dtype)
    assign(variable, value)
    del value
