"""Warm start from a base_model (warm_start.py): variables matched by object path and
shape, mismatches named, a partial warm start only by trainer.warm_start_partial; ids
compared with the base's recorded vocabularies (embedding rows re-indexed by string, a
changed label vocabulary named); and slow runs: a mesh of another shape warm-started
from a single-device run, whose loss starts where the base model ended, not from
scratch, and a string feature whose vocabulary order changed between the runs."""
import json
import os
import types

import numpy as np
import pytest

from tfx_parallel.components.common import config_util, run_history

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def _network(units, outputs=1, extra=False):
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs = {n: tf_keras.Input(shape=(1,), name=n) for n in ("x0", "x1")}
  h = tf_keras.layers.Concatenate()(list(inputs.values()))
  h = tf_keras.layers.Dense(units, activation="relu", name="hidden")(h)
  out = tf_keras.layers.Dense(outputs, name="output")(h)
  if extra:  # A layer the base model lacks (path layer_with_weights-2).
    out = tf_keras.layers.Dense(1, name="more")(out)
  return tf_keras.Model(inputs, out)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  """A stock-Trainer-like SavedModel: compiled (optimizer and metrics saved), fitted."""
  model = _network(4)
  model.compile(optimizer="adam", loss="mse", metrics=["mae"])
  x = {"x0": np.ones((8, 1), np.float32), "x1": np.zeros((8, 1), np.float32)}
  model.fit(x, np.ones((8, 1)), verbose=0)
  path = str(tmp_path_factory.mktemp("base") / "Format-Serving")
  model.save(path, save_format="tf")
  return path, model.get_weights()


def test_same_architecture_loads_every_variable_by_path(base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, weights = base
  _network(4)  # Layer names in this process are now uniquified ("hidden_1"): paths match.
  model = _network(4)
  found = warm_start.match(model, path)
  warm_start.check(found, partial=False)
  assert found.record(False) == {"source": path, "loaded": 4, "skipped": 0,
                                 "skipped_names": [], "partial": False}
  warm_start.load(found, path, lambda v, value: v.assign(value))
  for got, want in zip(model.get_weights(), weights):
    np.testing.assert_array_equal(got, want)


def test_shape_mismatch_and_missing_are_named_and_fail_without_partial(base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = base
  found = warm_start.match(_network(8, extra=True), path)
  with pytest.raises(config_util.ConfigError) as e:
    warm_start.check(found, partial=False)
  assert e.value.key == "trainer.warm_start_partial"
  text = str(e.value)
  assert "hidden/kernel" in text and "shape [2, 8] here, [2, 4] in the base model" in text
  assert "more/kernel (path layer_with_weights-2/kernel, shape [1, 1]): not in the base " \
      "model" in text
  assert "warm_start_partial=true" in text
  warm_start.check(found, partial=True)  # Allowed: loads what matches.
  record = found.record(True)
  assert record["loaded"] == 1 and record["skipped"] == 5  # Only output/bias matches.


def test_extra_base_variables_are_named(base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = base
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs = {n: tf_keras.Input(shape=(1,), name=n) for n in ("x0", "x1")}
  h = tf_keras.layers.Concatenate()(list(inputs.values()))
  model = tf_keras.Model(inputs, tf_keras.layers.Dense(4, name="hidden")(h))
  found = warm_start.match(model, path)
  assert [n.split(" ")[0] for n in found.extra] == ["output/kernel", "output/bias"]
  with pytest.raises(config_util.ConfigError, match="output/kernel"):
    warm_start.check(found, partial=False)


def test_no_saved_model_names_the_input(tmp_path):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  with pytest.raises(config_util.ConfigError, match="base_model"):
    warm_start.match(_network(4), str(tmp_path))


# --- Ids: vocabularies recorded beside the base model (warm_start.INPUTS_RECORD). -----

def _spec(colors=("red", "blue"), classes=("a", "b", "c"), hashed=0):
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  color = (ms.FeatureSpec("color", "string", hash_buckets=hashed, num_ids=hashed + 1)
           if hashed else ms.FeatureSpec("color", "string", vocabulary=tuple(colors),
                                         num_ids=len(colors) + 1))
  return ms.ModelSpec(features=(ms.FeatureSpec("x0", "float32"), color), label_key="y",
                      task="multiclass", num_classes=len(classes),
                      label_vocabulary=tuple(classes), hparams={"hidden_units": [4]})


def _mlp(spec):
  from tfx_parallel.components.distributed_trainer.models import mlp  # pylint: disable=g-import-not-at-top
  return mlp.build_model(spec)


@pytest.fixture(scope="module")
def recorded_base(tmp_path_factory):
  """The built-in mlp over colors (red, blue) and classes (a, b, c), saved with its
  inputs record as our export writes it (run/train.py)."""
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  spec = _spec()
  model = _mlp(spec)
  path = str(tmp_path_factory.mktemp("recorded") / "Format-Serving")
  model.save(path, save_format="tf")
  warm_start.write_inputs_record(path, spec.to_dict(), None)
  return path, model.get_layer("color_embedding").get_weights()[0]


def test_a_permuted_vocabulary_moves_embedding_rows_to_their_strings(recorded_base):
  """Base ids: red 1, blue 2. This run: blue 1, red 2, green 3 (new), 0 kept."""
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, rows = recorded_base
  spec = _spec(colors=("blue", "red", "green"))
  model = _mlp(spec)
  found = warm_start.match(model, path, spec_dict=spec.to_dict())
  warm_start.check(found, partial=False)  # Re-indexed by design: nothing skipped.
  record = found.record(False)
  assert record["skipped"] == 0 and record["loaded"] == len(model.variables)
  assert record["reindexed"] == {"color": {"variables": ["color_embedding/embeddings"],
                                           "kept": 2, "new": ["green"], "dropped": []}}
  warm_start.load(found, path, lambda v, value: v.assign(value))
  got = model.get_layer("color_embedding").get_weights()[0]
  np.testing.assert_array_equal(got[[0, 1, 2]], rows[[0, 2, 1]])
  assert not any(np.array_equal(got[3], r) for r in rows)  # green: its fresh init,
  plan, = found.reindex.values()  # seeded: every worker of a multi_worker run draws it.
  np.testing.assert_array_equal(plan.apply(rows, got.shape, "float32")[3], got[3])
  assert any("vocabulary changed; 2 known value(s) moved" in line
             for line in warm_start.describe_notes(found.notes))


def _tables_behind_a_layer(spec, tables=("color",)):
  """x0 and an Embedding(3, 2) per name in ``tables``, each behind an Identity layer
  (not fed straight from its input) -> Dense(3, "output"). A table name that is no
  feature of ``spec`` gets an int64 input of its own."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import models  # pylint: disable=g-import-not-at-top
  inputs = dict(models.inputs(spec))
  inputs.update({n: tf_keras.Input(shape=(1,), name=n, dtype="int64")
                 for n in tables if n not in inputs})
  e = [tf_keras.layers.Embedding(3, 2, name=f"{n}_embedding")(
      tf_keras.layers.Identity(name=f"{n}_ids")(inputs[n])) for n in tables]
  h = tf_keras.layers.Concatenate()([inputs["x0"]] + [tf_keras.layers.Reshape((2,))(x)
                                                      for x in e])
  return tf_keras.Model(inputs, tf_keras.layers.Dense(3, name="output")(h))


def test_a_table_not_fed_straight_from_its_input_is_a_mismatch_when_ids_changed(tmp_path):
  """The trainer re-indexes only an Embedding on the feature's input itself: behind
  another layer, a variable whose first dimension is a vocabulary's size is named."""
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "Format-Serving")
  _tables_behind_a_layer(_spec()).save(path, save_format="tf")
  warm_start.write_inputs_record(path, _spec().to_dict(), None)
  spec = _spec(colors=("blue", "red"))
  found = warm_start.match(_tables_behind_a_layer(spec), path, spec_dict=spec.to_dict())
  assert [m.split(" (")[0] for m in found.mismatched] == ["color_embedding/embeddings"]
  assert "its table could not be told" in found.mismatched[0]


def test_a_changed_label_vocabulary_names_the_output_layer(recorded_base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = recorded_base
  spec = _spec(classes=("a", "b", "d"))  # Same size: the shapes alone would match.
  found = warm_start.match(_mlp(spec), path, spec_dict=spec.to_dict())
  with pytest.raises(config_util.ConfigError) as e:
    warm_start.check(found, partial=False)
  text = str(e.value)
  assert e.value.key == "trainer.warm_start_partial"
  assert ("output/kernel (path layer_with_weights-2/kernel): label 'y' classes differ "
          "from the base model's (['a', 'b', 'd'] here, ['a', 'b', 'c'] there)") in text
  assert "output/bias" in text and len(found.mismatched) == 2


def test_hashed_ids_against_a_vocabulary_are_a_mismatch(recorded_base):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = recorded_base
  spec = _spec(hashed=2)  # 3 ids, as the base's vocabulary of 2 has.
  found = warm_start.match(_mlp(spec), path, spec_dict=spec.to_dict())
  assert [m.split(" (")[0] for m in found.mismatched] == ["color_embedding/embeddings"]
  assert "feature 'color' ids differ from the base model's (2 hash buckets here, " \
      "vocabulary ['red', 'blue'] there)" in found.mismatched[0]


def test_a_base_without_an_inputs_record_loads_by_position_and_says_so(base):
  """A stock Trainer's SavedModel records no vocabularies."""
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = base
  found = warm_start.match(_network(4), path, spec_dict=_spec().to_dict())
  assert found.record(False)["vocabularies"] == warm_start.NOT_RECORDED
  assert "load by position" in warm_start.describe_notes(found.notes)[0]


def test_record_field_is_a_property():
  assert "warm_start" in run_history.property_names()
  assert run_history.conditional_fields()["warm_start"] == run_history.WHEN_WARM


@pytest.mark.slow
def test_mesh_of_another_shape_starts_from_single_runs_final_loss(tmp_path):
  import trainer_util as tu  # pylint: disable=g-import-not-at-top
  feats, _, rows = tu.write_examples(str(tmp_path / "ex"), rows=256, eval_rows=64)
  model = dict(model="mlp", hidden_units=[8], batch_size=32, log_every=5,
               checkpoint_every=0)
  first = tu.job_dict(str(tmp_path / "single"), str(tmp_path / "ex"), feats, rows,
                      layout="single", steps=80, **model)
  warm = dict(tu.job_dict(str(tmp_path / "mesh"), str(tmp_path / "ex"), feats, rows,
                          layout="mesh", mesh=[1, 2], steps=2, **model),
              base_model_dir=first["model_dir"])
  base = tu.run_job(first, str(tmp_path / "single"))  # A process per layout: its devices.
  started = tu.run_job(warm, str(tmp_path / "mesh"))
  assert started["warm_start"] == {"source": first["model_dir"], "loaded": 4, "skipped": 0,
                                   "skipped_names": [], "partial": False}
  assert started["mesh_shape"] == [1, 2]
  final = base["epochs"][-1]["eval_loss"] if base["epochs"] else base["records"][-1]["loss"]
  scratch = base["initial_eval_loss"]  # The same model, freshly initialised.
  assert final < 0.2 * scratch, (final, scratch)
  # The warm-started mesh's untrained eval loss is the base model's, not a fresh one's.
  assert started["initial_eval_loss"] == pytest.approx(final, rel=0.1, abs=1e-3), (
      started["initial_eval_loss"], final, scratch)


def test_a_resumed_run_keeps_its_checkpoint_over_the_base_model(tmp_path):
  """A checkpoint of the same run wins: nothing is read from the base (here a directory
  that holds none: reading it would fail), and the record says so."""
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.job import Job  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.run import train  # pylint: disable=g-import-not-at-top
  job = Job(config={}, examples_uri="", feature_keys=[], label_key="y", train_rows=0,
            model_dir="", model_run_dir="", history_dir="", checkpoint_dir="",
            base_model_dir=str(tmp_path))
  record = train.warm_start_from_base(job, TrainerConfig(), engine=None, start_step=7)
  assert record["resumed_instead"] is True and record["loaded"] == 0
  with pytest.raises(config_util.ConfigError, match="no SavedModel variables"):
    train.warm_start_from_base(job, TrainerConfig(), types.SimpleNamespace(model=None), 0)
  assert train.warm_start_from_base(
      Job(**dict(vars(job), base_model_dir=None)), TrainerConfig(), None, 0) is None


def test_executor_checks_the_base_before_training(base):
  """The executor builds the user's model from the job's spec and matches it: a base of
  another width fails there, naming the variable and the setting."""
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer.job import Job  # pylint: disable=g-import-not-at-top
  module_file = os.path.join(os.path.dirname(__file__), "..", "examples", "tuned_model.py")
  path, _ = base

  def job(units):
    spec = ms.ModelSpec(features=(ms.FeatureSpec("x0", "float32"),
                                  ms.FeatureSpec("x1", "float32")),
                        label_key="y", hparams={"units": units})
    return Job(config={}, examples_uri="", feature_keys=["x0", "x1"], label_key="y",
               train_rows=0, model_dir="", model_run_dir="", history_dir="",
               checkpoint_dir="", model_spec=spec.to_dict(), base_model_dir=path)
  config = TrainerConfig(module_file=module_file)
  executor.check_warm_start(job(4), config)  # Same widths: every variable matches.
  with pytest.raises(config_util.ConfigError, match=r"hidden/kernel .*shape \[2, 8\] here"):
    executor.check_warm_start(job(8), config)
  executor.check_warm_start(job(8), TrainerConfig(module_file=module_file,
                                                  warm_start_partial=True))


def _color_examples(uri, share_red, rng, rows=160):
  """color (red | blue) decides y (+10 | -10); ``share_red`` orders the vocabulary."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import evaluator_fixtures as testing  # pylint: disable=g-import-not-at-top
  records = []
  for _ in range(rows):
    color = "red" if rng.random() < share_red else "blue"
    feature = {"color": tf.train.Feature(bytes_list=tf.train.BytesList(value=[color.encode()])),
               "x0": tf.train.Feature(float_list=tf.train.FloatList(value=[rng.normal()])),
               "y": tf.train.Feature(float_list=tf.train.FloatList(
                   value=[10.0 if color == "red" else -10.0]))}
    records.append(tf.train.Example(features=tf.train.Features(feature=feature))
                   .SerializeToString())
  examples = testing.write_examples(uri, {"train": records[:120], "eval": records[120:]},
                                    ["color", "x0"], "y")
  testing.example_properties.record_output(
      examples, split_names=["eval", "train"], num_shards=1, source="testing",
      feature_keys=["color", "x0"], label_key="y", string_feature_keys=["color"],
      summary=testing.IngestSummary({"train": 120, "eval": rows - 120}))
  return examples


def _train_through_executor(root, examples, config, base=None):
  """One executor Do (the warm start's check and the training process); (Model artifact,
  history.json)."""
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.common import artifacts, keys  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import executor  # pylint: disable=g-import-not-at-top
  outputs = {}
  for key, kind in ((keys.MODEL_KEY, standard_artifacts.Model),
                    (keys.MODEL_RUN_KEY, standard_artifacts.ModelRun),
                    (keys.HISTORY_KEY, artifacts.TrainingHistory)):
    outputs[key] = [kind()]
    outputs[key][0].uri = os.path.join(root, key)
    os.makedirs(outputs[key][0].uri)
  inputs = {keys.EXAMPLES_KEY: [examples]}
  if base is not None:
    inputs[keys.BASE_MODEL_KEY] = [base]
  executor.Executor().Do(inputs, outputs, {keys.CONFIG_KEY: config_util.to_json(config)})
  with open(os.path.join(outputs[keys.HISTORY_KEY][0].uri, keys.HISTORY_FILE)) as f:
    return outputs[keys.MODEL_KEY][0], json.load(f)


@pytest.mark.slow
def test_a_vocabulary_in_another_order_warm_starts_rows_by_string(tmp_path):
  """The base learns red -> +10, blue -> -10 with red most frequent (id 1); the next
  data has blue most frequent (id 1): same embedding shape, rows swapped. Loaded by
  position the warm run starts with the colours swapped (eval loss ~400 measured before
  the fix, against ~100 from scratch); by string it starts where the base ended."""
  from tfx_parallel.components.distributed_trainer.config import TrainerConfig  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  common = dict(batch_size=16, layout="single", model="mlp", hidden_units=(4,),
                optimizer="adam")
  base, trained = _train_through_executor(
      str(tmp_path / "base"), _color_examples(str(tmp_path / "d1"), 0.8, rng),
      TrainerConfig(steps=300, log_every=100, learning_rate=0.05, **common))
  assert trained["epochs"][-1]["eval_loss"] < 1.0
  _, warm = _train_through_executor(
      str(tmp_path / "warm"), _color_examples(str(tmp_path / "d2"), 0.2, rng),
      TrainerConfig(steps=1, log_every=1, learning_rate=1e-9, **common), base)
  assert warm["warm_start"]["skipped"] == 0
  assert warm["warm_start"]["reindexed"] == {
      "color": {"variables": ["color_embedding/embeddings"], "kept": 2, "new": [],
                "dropped": []}}
  assert warm["initial_eval_loss"] < 1.0


# --- Review fixes: Transform vocabularies, weightless output layers, guessed tables,
# --- NaN in the normalisation, fresh rows drawn only where new. ------------------------

def _id_model(embedding=True):
  """x0 and an int64 color_id (as tft.compute_and_apply_vocabulary makes it)."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs = {"x0": tf_keras.Input(shape=(1,), name="x0"),
            "color_id": tf_keras.Input(shape=(1,), name="color_id", dtype="int64")}
  if embedding:
    e = tf_keras.layers.Embedding(3, 2, name="color_embedding")(inputs["color_id"])
    h = tf_keras.layers.Concatenate()([inputs["x0"], tf_keras.layers.Reshape((2,))(e)])
  else:
    h = tf_keras.layers.Concatenate()([inputs["x0"], tf_keras.layers.CategoryEncoding(
        3, output_mode="one_hot")(inputs["color_id"])])
  return tf_keras.Model(inputs, tf_keras.layers.Dense(1, name="output")(h))


def _id_spec():
  from tfx_parallel.components.distributed_trainer import model_spec as ms  # pylint: disable=g-import-not-at-top
  return ms.ModelSpec(features=(ms.FeatureSpec("x0", "float32"),
                                ms.FeatureSpec("color_id", "int64")), label_key="y")


def _transform_graph(root, vocabulary):
  """A Transform output's layout (tft 1.16: <graph>/transform_fn/assets/<vocab file>)."""
  assets = os.path.join(root, "transform_fn", "assets")
  os.makedirs(assets)
  with open(os.path.join(assets, "vocab_color"), "w") as f:
    f.write("\n".join(vocabulary) + "\n")
  return root


@pytest.fixture(scope="module")
def transform_bases(tmp_path_factory):
  """SavedModels of _id_model (with and without an Embedding) that carry the Transform
  vocabulary (red, blue) as an asset, as our export's tft_layer does."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("transform")
  graph = _transform_graph(str(root / "graph"), ["red", "blue"])
  paths = {}
  for embedding in (True, False):
    model = _id_model(embedding)
    model.vocabulary = tf.saved_model.Asset(
        os.path.join(graph, "transform_fn", "assets", "vocab_color"))
    paths[embedding] = str(root / f"base_{embedding}" / "Format-Serving")
    model.save(paths[embedding], save_format="tf")
    assert os.path.exists(os.path.join(paths[embedding], "assets", "vocab_color"))
  return paths, graph


def test_a_changed_transform_vocabulary_names_the_embedding(transform_bases, tmp_path):
  """compute_and_apply_vocabulary gives int64 ids (no string feature to compare): the
  Transform vocabulary file itself is compared with the base's copy."""
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  paths, same = transform_bases
  spec = _id_spec().to_dict()
  found = warm_start.match(_id_model(), paths[True], spec_dict=spec, transform_graph_uri=same)
  assert not found.mismatched and "transform_vocabularies" not in found.notes
  warm_start.check(found, partial=False)
  other = _transform_graph(str(tmp_path / "graph"), ["blue", "red"])  # Other frequencies.
  found = warm_start.match(_id_model(), paths[True], spec_dict=spec, transform_graph_uri=other)
  assert [m.split(" (")[0] for m in found.mismatched] == ["color_embedding/embeddings"]
  assert "Transform vocabulary vocab_color differs from the base model's" in \
      found.mismatched[0] and "only guessed" in found.mismatched[0]
  with pytest.raises(config_util.ConfigError, match="warm_start_partial=true"):
    warm_start.check(found, partial=False)
  assert found.record(True)["transform_vocabularies_changed"] == ["vocab_color"]
  # No Embedding to name: still a mismatch, not a silent load by position.
  found = warm_start.match(_id_model(embedding=False), paths[False], spec_dict=spec,
                           transform_graph_uri=other)
  assert len(found.mismatched) == 1 and "could not be told" in found.mismatched[0]
  with pytest.raises(config_util.ConfigError, match="vocab_color"):
    warm_start.check(found, partial=False)


def test_a_base_without_the_transform_vocabulary_says_ids_are_not_compared(base, tmp_path):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path, _ = base
  graph = _transform_graph(str(tmp_path / "graph"), ["red", "blue"])
  found = warm_start.match(_network(4), path, transform_graph_uri=graph)
  assert warm_start.TRANSFORM_NOT_COMPARED in found.record(False)["transform_vocabularies"]
  assert any(line.startswith(warm_start.TRANSFORM_NOT_COMPARED)
             for line in warm_start.describe_notes(found.notes))


def _softmax_model(units=3, head=None):
  """Classes from a Dense named logits, then a weightless Softmax as the output."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs = {n: tf_keras.Input(shape=(1,), name=n) for n in ("x0", "x1")}
  h = tf_keras.layers.Concatenate()(list(inputs.values()))
  h = tf_keras.layers.Dense(units, name="logits")(h)
  if head:
    h = tf_keras.layers.Dense(head, name="head")(h)
  return tf_keras.Model(inputs, tf_keras.layers.Softmax(name="probabilities")(h))


def test_a_changed_label_vocabulary_behind_a_softmax_names_the_last_weights(tmp_path):
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "Format-Serving")
  _softmax_model().save(path, save_format="tf")
  spec = lambda classes: dict(_spec(classes=classes).to_dict(), features=[])
  warm_start.write_inputs_record(path, spec(("a", "b", "c")), None)
  found = warm_start.match(_softmax_model(), path, spec_dict=spec(("a", "b", "d")))
  assert sorted(m.split(" (")[0] for m in found.mismatched) == ["logits/bias",
                                                                 "logits/kernel"]
  assert "classes differ" in found.mismatched[0]
  # The last weights have no dimension of 3 classes: not told, still a mismatch.
  path = str(tmp_path / "head" / "Format-Serving")
  _softmax_model(head=5).save(path, save_format="tf")
  warm_start.write_inputs_record(path, spec(("a", "b", "c")), None)
  found = warm_start.match(_softmax_model(head=5), path, spec_dict=spec(("a", "b", "d")))
  assert len(found.mismatched) == 1
  assert "the output table could not be told (the last layer with weights (head" in \
      found.mismatched[0]
  with pytest.raises(config_util.ConfigError, match="classes differ"):
    warm_start.check(found, partial=False)


def test_tables_only_guessed_by_row_count_are_named_so(tmp_path):
  """Two 3-row Embeddings behind another layer: the color one and an unrelated one;
  both are refused, each said to be guessed, naming the other."""
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  two = lambda spec: _tables_behind_a_layer(spec, ("color", "size"))
  path = str(tmp_path / "Format-Serving")
  two(_spec()).save(path, save_format="tf")
  warm_start.write_inputs_record(path, _spec().to_dict(), None)
  spec = _spec(colors=("blue", "red"))
  found = warm_start.match(two(spec), path, spec_dict=spec.to_dict())
  names = {m.split(" (")[0]: m for m in found.mismatched}
  assert set(names) == {"color_embedding/embeddings", "size_embedding/embeddings"}
  assert "feature 'color' ids differ" in names["size_embedding/embeddings"]
  assert "only guessed by its row count [3], as are color_embedding/embeddings" in \
      names["size_embedding/embeddings"]


def test_nan_in_the_normalisation_is_not_a_change():
  """Through json both NaNs are json.decoder's one NaN object (CPython 3.10
  json/decoder.py:15,49) and container equality checks identity first, so the record
  read back already compares equal; a NaN made elsewhere (float("nan") here, a numpy
  value) is another object, which plain == calls a change."""
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  spec = _id_spec().to_dict()
  recorded = {"model_spec": spec, "normalization": {"x0": {"mean": 1.0, "std": float("nan")}}}
  norm = {"x0": {"mean": 1.0, "std": float("nan")}}
  *_, notes = warm_start.compare_inputs(_id_model(), spec, norm, recorded)
  assert "normalization_changed" not in notes
  *_, notes = warm_start.compare_inputs(
      _id_model(), spec, {"x0": {"mean": 2.0, "std": float("nan")}}, recorded)
  assert notes["normalization_changed"] is True


def test_reindex_draws_fresh_rows_only_for_new_ids():
  import tf_keras  # pylint: disable=g-import-not-at-top
  from tfx_parallel.components.distributed_trainer import warm_start  # pylint: disable=g-import-not-at-top
  drawn = []

  class Recording(tf_keras.initializers.RandomUniform):
    def __call__(self, shape, dtype=None, **kwargs):
      drawn.append(tuple(shape))
      return super().__call__(shape, dtype=dtype, **kwargs)
  base_value = np.arange(8, dtype=np.float32).reshape(4, 2)
  plan = warm_start.Reindex(0, (0, 2, -1, 1, -1), Recording(seed=1), seed=3)
  got = plan.apply(base_value, (5, 2), "float32")
  assert drawn == [(2, 2)]  # Not a (5, 2) table beside the base's.
  np.testing.assert_array_equal(got[[0, 1, 3]], base_value[[0, 2, 1]])
  np.testing.assert_array_equal(got, plan.apply(base_value, (5, 2), "float32"))  # Seeded.
  # A fan-scaled initializer keeps the full table's spread: glorot_uniform of (1000, 8)
  # draws within sqrt(6 / 1008), not the wider bound of a (k, 8) table.
  plan = warm_start.Reindex(0, (0,) + (-1,) * 999, tf_keras.initializers.GlorotUniform(), 5)
  fresh = plan.apply(np.zeros((1, 8), np.float32), (1000, 8), "float32")[1:]
  limit = np.sqrt(6 / 1008) * (1 + 1e-6)  # float32 rounding of the bound.
  assert np.abs(fresh).max() <= limit and np.abs(fresh).max() > 0.9 * limit
  plan = warm_start.Reindex(0, tuple(range(990)) + (-1,) * 10,
                            tf_keras.initializers.GlorotUniform(), 5)
  fresh = plan.apply(np.zeros((990, 8), np.float32), (1000, 8), "float32")[990:]
  assert np.abs(fresh).max() <= limit
