"""Warm start: the ``base_model`` input (a Model artifact, ours or a stock Trainer's Keras
SavedModel at ``<uri>/Format-Serving``) initialises the model before the first step, on
every layout.

Variables are matched by their object path from the Keras model (``layer_with_weights-0/
kernel``: what a tf.train.Checkpoint of the model keys them by, whatever the layer names
were uniquified to in the process that built it), read from the SavedModel's variables
checkpoint one at a time (``tf.train.load_checkpoint``; the paths come from the
checkpoint's own object graph, ``_CHECKPOINTABLE_OBJECT_GRAPH``), and written into the
model by the engine: a whole value per variable on the host (a mesh places each device's
block: mesh_runtime ``assign_from_host``), never a second copy of the model (a re-indexed
table holds the base's value and its new one; fresh rows are drawn only for new ids).

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
  that way (an Embedding with either vocabulary's row count, else any such matrix, each
  named as only guessed) is a mismatch;
* hashed against vocabulary ids, or another bucket count: its tables are mismatched;
* a changed label vocabulary: the output table's variables are mismatched (the last
  layer with weights from the output back whose last dimension is a class count; none:
  a mismatch saying the output table could not be told);
* a changed normalisation is said (``normalization_changed``, NaN equal to NaN), not
  refused.

A table found only by its row count is named as guessed. With a Transform graph, its
vocabulary files are compared with the base's copies (:func:`compare_transform`).

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
TRANSFORM_NOT_COMPARED = "ids from the Transform graph are not compared"
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
    """This run's value: the base's entries moved to their new ids, and fresh ones drawn
    only for the -1 entries (never a second full-size table beside the base's)."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    index = np.asarray(self.index)
    kept = index >= 0
    moved_shape = (shape[self.axis],) + tuple(d for i, d in enumerate(shape) if i != self.axis)
    moved = np.empty(moved_shape, dtype=np.dtype(getattr(dtype, "as_numpy_dtype", dtype)))
    moved[kept] = np.moveaxis(base_value, self.axis, 0)[index[kept]]
    fresh = int((~kept).sum())
    if fresh:
      rows = (fresh,) + moved_shape[1:]
      drawn = self._initializer(shape, rows)(_on_axis(rows, self.axis), dtype=dtype)
      moved[~kept] = np.moveaxis(np.array(drawn), self.axis, 0)
    return np.moveaxis(moved, 0, self.axis)

  def _initializer(self, shape, rows):
    """The initializer, seeded, drawing ``rows`` entries with the distribution it gives
    the full ``shape``: a variance-scaling one (glorot, he, ...) scales by its fans, so
    its ``scale`` is corrected by the fan that the fewer entries change (tf_keras 2.16,
    ``tf_keras/initializers/initializers.py``: VarianceScaling.__call__, _compute_fans)."""
    import tf_keras  # pylint: disable=g-import-not-at-top
    from tf_keras.src.initializers import initializers as keras_init  # pylint: disable=g-import-not-at-top
    init = tf_keras.initializers.get(self.initializer)
    if isinstance(init, keras_init.VarianceScaling):  # Glorot/He/Lecun: only a seed config.
      def fan(s):
        fan_in, fan_out = keras_init._compute_fans(s)  # pylint: disable=protected-access
        return max(1.0, {"fan_in": fan_in, "fan_out": fan_out}.get(init.mode,
                                                                   (fan_in + fan_out) / 2.0))
      return keras_init.VarianceScaling(
          scale=init.scale * fan(_on_axis(rows, self.axis)) / fan(tuple(shape)),
          mode=init.mode, distribution=init.distribution, seed=self.seed)
    config = dict(init.get_config())
    if "seed" in config:
      config["seed"] = self.seed
    return type(init).from_config(config)


def _on_axis(rows: Tuple[int, ...], axis: int) -> Tuple[int, ...]:
  """``rows`` (the re-indexed axis first) in the variable's own axis order."""
  rest = list(rows[1:])
  rest.insert(axis, rows[0])
  return tuple(rest)


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
  Embeddings with that many rows, else any matrix with that many rows (a one-hot Dense).
  Only guessed by row count: an unrelated table of that size is among them too."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  tables = [layer.embeddings for layer in model.layers
            if isinstance(layer, tf_keras.layers.Embedding)
            and layer.embeddings.shape[0] in sizes]
  return tables or [v for v in model.variables if v.shape.rank == 2 and v.shape[0] in sizes]


def _last_layers(model) -> List[Any]:
  """The model's layers from its (first) output back: a functional model's along the
  first input of each layer, else ``model.layers`` last first (a subclassed model)."""
  try:
    layer = model.get_layer(model.output_names[0])
  except (AttributeError, ValueError, IndexError):  # No graph of layers.
    return list(reversed(getattr(model, "layers", [])))
  chain, seen = [], set()
  while layer is not None and id(layer) not in seen:
    seen.add(id(layer))
    chain.append(layer)
    nodes = getattr(layer, "_inbound_nodes", None) or []
    inbound = nodes[0].inbound_layers if nodes else []
    inbound = inbound if isinstance(inbound, (list, tuple)) else [inbound]
    layer = inbound[0] if len(inbound) == 1 else None  # A merge: stop.
  return chain


def _output_variables(model, class_counts) -> Tuple[List[Any], Optional[str]]:
  """The output table's variables: those of the last layer with weights (a final
  Softmax/Activation has none), when its last dimension is one of ``class_counts``;
  else ([], why it could not be told)."""
  for layer in _last_layers(model):
    variables = list(layer.variables)
    if not variables:
      continue
    if any(v.shape.rank and v.shape[-1] in class_counts for v in variables):
      return variables, None
    return [], (f"the last layer with weights ({layer.name}: "
                f"{[list(v.shape) for v in variables]}) has no dimension of "
                f"{sorted(class_counts)} classes")
  return [], "no layer with weights found from the output back"


def _same(a, b) -> bool:
  """Equal, NaN equal to NaN (a constant column's std, say) whatever object holds it
  (json.loads gives its one NaN object, and == on containers checks identity first, but
  a NaN made elsewhere is another object: plain == would call it a change)."""
  if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
    return True
  if isinstance(a, dict) and isinstance(b, dict):
    return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
  if isinstance(a, list) and isinstance(b, list):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
  return a == b


def compare_inputs(model, spec_dict: Mapping[str, Any],
                   normalization: Optional[Mapping[str, Any]], base_record
                   ) -> Tuple[Dict[int, Reindex], Dict[int, str], List[str], Dict[str, Any]]:
  """This run's vocabularies, label vocabulary and normalisation against the base's
  :data:`INPUTS_RECORD` (module docstring): (id(variable) -> Reindex, id(variable) ->
  why it does not match, mismatches whose table could not be told, notes for the
  record)."""
  if base_record is None:  # Said when this run has ids that a vocabulary orders.
    ordered = spec_dict.get("label_vocabulary") or any(
        f["dtype"] == _STRING and not f.get("hash_buckets")
        for f in spec_dict.get("features", ()))
    return {}, {}, [], ({"vocabularies": NOT_RECORDED} if ordered else {})
  base_spec = base_record.get("model_spec") or {}
  base_features = {f["name"]: f for f in base_spec.get("features", ())}
  tables = _embeddings(model)
  reindex: Dict[int, Reindex] = {}
  refused: Dict[int, str] = {}
  reindexed: Dict[str, Any] = {}
  unplaced: List[str] = []
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
    if layers:
      for layer in layers:
        refused.setdefault(id(layer.embeddings), why)
      continue
    sizes = {int(f.get("num_ids") or 0), int(old.get("num_ids") or 0)}
    guessed = _tables_of_size(model, sizes)
    for v in guessed:
      others = [_name(o) for o in guessed if o is not v]
      refused.setdefault(id(v), why + (
          f": its table could not be told (no Embedding fed straight from its input); "
          f"only guessed by its row count {sorted(sizes)}" + (
              f", as are {', '.join(others)} (one of them may be another feature's)"
              if others else "")))
    if not guessed:
      unplaced.append(f"{why}; its table could not be told (no Embedding fed straight from its "
                      f"input, no matrix of {sorted(sizes)} rows)")
  labels = [None if v is None else list(v) for v in (spec_dict.get("label_vocabulary"),
                                                     base_spec.get("label_vocabulary"))]
  if labels[0] != labels[1]:
    why = (f"label {spec_dict.get('label_key')!r} classes differ from the base model's "
           f"({_short(spec_dict.get('label_vocabulary'))} here, "
           f"{_short(base_spec.get('label_vocabulary'))} there)")
    counts = {len(v) for v in labels if v is not None}
    counts |= {1} if 2 in counts else set()  # Binary: one logit.
    variables, unknown = _output_variables(model, counts)
    for v in variables:
      refused.setdefault(id(v), why)
    if unknown:
      unplaced.append(f"{why}: the output table could not be told ({unknown})")
  notes: Dict[str, Any] = {}
  if reindexed:
    notes["reindexed"] = reindexed
  base_norm = base_record.get("normalization")
  if not _same(json.loads(json.dumps(normalization)), base_norm):  # Tuples: lists.
    notes["normalization_changed"] = True
  return reindex, refused, unplaced, notes


def _transform_files(transform_graph_uri: str) -> Dict[str, str]:
  """Transform's vocabulary files: name -> path, in ``<graph>/transform_fn/assets``
  (tensorflow_transform 1.16 output_wrapper.py:68 TRANSFORM_FN_DIR, :97
  transform_savedmodel_dir, :136-171 vocabulary_file_by_name reads that ``assets``)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  folder = os.path.join(transform_graph_uri, "transform_fn", "assets")
  if not tf.io.gfile.isdir(folder):
    return {}
  return {name: os.path.join(folder, name) for name in sorted(tf.io.gfile.listdir(folder))
          if not tf.io.gfile.isdir(os.path.join(folder, name))}


def _read(path: str) -> bytes:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path, "rb") as f:
    return f.read()


def compare_transform(model, spec_dict: Optional[Mapping[str, Any]],
                      transform_graph_uri: Optional[str], saved_model_dir: str
                      ) -> Tuple[Dict[int, str], List[str], Dict[str, Any]]:
  """Ids made by this run's Transform graph (``tft.compute_and_apply_vocabulary``: int64
  features, ordered by frequency) against the base's: each vocabulary file of the graph
  against the same-named file the base SavedModel's ``assets/`` holds (its ``tft_layer``
  copied them there; tensorflow builder_impl.get_asset_filename_to_add keeps the base
  name). A file that differs: the Embeddings not fed by one of our own string features
  are mismatched (which transformed feature a file feeds is not recorded: they are
  named as guessed). A file the base lacks: noted (``transform_vocabularies``), never
  silent. (id(variable) -> why, mismatches without a table, notes)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  if not transform_graph_uri:
    return {}, [], {}
  files = _transform_files(transform_graph_uri)
  if not files:
    return {}, [], {}
  base_assets = os.path.join(saved_model_dir, "assets")
  changed, uncompared = [], []
  for name, path in files.items():
    there = os.path.join(base_assets, name)
    if not tf.io.gfile.exists(there):
      uncompared.append(name)
    elif _read(there) != _read(path):
      changed.append(name)
  notes: Dict[str, Any] = {}
  if uncompared:
    notes["transform_vocabularies"] = (
        f"{TRANSFORM_NOT_COMPARED}: the base model has no {', '.join(uncompared)} in "
        f"{base_assets} (not trained on this Transform graph's output?): their ids load "
        f"by position")
  if not changed:
    return {}, [], notes
  ours = {f["name"] for f in (spec_dict or {}).get("features", ()) if f["dtype"] == _STRING}
  fed = _embeddings(model)
  own = {id(layer) for name in ours for layer in fed.get(name, [])}
  tables = [layer.embeddings for layer in model.layers
            if isinstance(layer, tf_keras.layers.Embedding) and id(layer) not in own]
  why = (f"Transform vocabulary {', '.join(changed)} differs from the base model's "
         f"({os.path.join(transform_graph_uri, 'transform_fn', 'assets')} against "
         f"{base_assets}): its ids are ordered otherwise")
  refused = {id(v): why + (": this Embedding is only guessed to read it (which "
                           "transformed feature a vocabulary feeds is not recorded)")
             for v in tables}
  unplaced = [] if tables else [f"{why}; the tables fed from it could not be told (no "
                                f"Embedding in the model)"]
  notes["transform_vocabularies_changed"] = changed
  return refused, unplaced, notes


def describe_notes(notes: Mapping[str, Any]) -> List[str]:
  """Console lines of :func:`compare_inputs`'s notes."""
  lines = []
  if "vocabularies" in notes:
    lines.append(f"the base model's vocabularies are {notes['vocabularies']}")
  for name, what in notes.get("reindexed", {}).items():
    lines.append(f"feature {name!r}: vocabulary changed; {what['kept']} known value(s) "
                 f"moved to their new ids in {', '.join(what['variables'])}, new (fresh): "
                 f"{_short(what['new'])}, dropped: {_short(what['dropped'])}")
  if "transform_vocabularies" in notes:
    lines.append(notes["transform_vocabularies"])
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
          normalization: Optional[Mapping[str, Any]] = None,
          transform_graph_uri: Optional[str] = None) -> Match:
  """The model's variables against the base's, by object path and shape and, given this
  run's ``spec_dict`` (ModelSpec.to_dict()), by ids (:func:`compare_inputs`), and given
  its ``transform_graph_uri``, by Transform's vocabularies (:func:`compare_transform`)."""
  by_path, every = base_variables(saved_model_dir)
  reindex, refused, unplaced, notes = ({}, {}, [], {}) if spec_dict is None else (
      compare_inputs(model, spec_dict, normalization, read_inputs_record(saved_model_dir)))
  t_refused, t_unplaced, t_notes = compare_transform(model, spec_dict, transform_graph_uri,
                                                     saved_model_dir)
  for key, why in t_refused.items():
    refused.setdefault(key, why)
  notes = dict(notes, **t_notes)
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
  return Match(source or saved_model_dir, pairs, missing, extra,
               mismatched + unplaced + t_unplaced,
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
