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
"""
import collections
import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Tuple

from tfx_parallel.components.common.config_util import ConfigError

PARTIAL_SETTING = "trainer.warm_start_partial"
# Children of the saved model that are not the model's variables (module docstring).
SKIPPED_CHILDREN = frozenset({"optimizer", "keras_api", "tft_layer"})
_VALUE = "VARIABLE_VALUE"
_OBJECT_GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


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
  mismatched: List[str]  # Same path, other shape.

  def skipped(self) -> List[str]:
    return self.missing + self.extra + self.mismatched

  def record(self, partial: bool) -> Dict[str, Any]:
    """history.json's ``warm_start``."""
    return {"source": self.source, "loaded": len(self.pairs),
            "skipped": len(self.skipped()), "skipped_names": self.skipped(),
            "partial": partial}


def match(model, saved_model_dir: str, source: Optional[str] = None) -> Match:
  """The model's variables against the base's, by object path (module docstring)."""
  by_path, every = base_variables(saved_model_dir)
  pairs, missing, mismatched, used = [], [], [], set()
  for paths, variable in model_variables(model):
    base = next((by_path[p] for p in paths if p in by_path), None)
    shape = tuple(variable.shape.as_list())
    if base is None:
      missing.append(f"{_name(variable)} (path {paths[0]}, shape {list(shape)}): not in "
                     f"the base model")
    elif base.shape != shape:
      used.add(base.key)
      mismatched.append(f"{_name(variable)} (path {paths[0]}): shape {list(shape)} here, "
                        f"{list(base.shape)} in the base model ({base.name})")
    else:
      used.add(base.key)
      pairs.append((variable, base))
  extra = [f"{b.name} (shape {list(b.shape)}): in the base model, not in this one"
           for b in every if b.key not in used]
  return Match(source or saved_model_dir, pairs, missing, extra, mismatched)


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
    assign(variable, value)
    del value
