"""One module for the stock TFX ``Tuner`` and ``DistributedTrainer``: ``tuner_fn`` runs a
tiny KerasTuner search over ``units`` and ``learning_rate``; ``build_model(spec)`` builds
the same network with the values the trainer hands it as ``spec.hparams``.

    tuner = tfx.components.Tuner(module_file="examples/tuned_model.py",
                                 examples=example_gen.outputs["examples"], ...)
    trainer = DistributedTrainer(examples=example_gen.outputs["examples"],
                                 module_file="examples/tuned_model.py",
                                 hyperparameters=tuner.outputs["best_hyperparameters"])

The network is written once (:func:`network`) against a Keras module: KerasTuner 1.4
trains Keras 3 models (keras_tuner/src/backend/config.py imports ``keras``), the
trainer tf_keras ones, and both have the same layers. Numeric features only (the
synthetic data ``x0..x{F-1}`` -> ``y``): enough to show the wiring.
"""
from typing import Sequence

# Searched by tuner_fn; the trainer's spec.hparams carries the best of them.
UNITS = (2, 16)
LEARNING_RATES = (0.01, 0.1)
LABEL = "y"


def network(keras, feature_names: Sequence[str], units: int, outputs: int = 1):
  """x0..xn (dict of (1,) inputs) -> Dense(units, relu) -> Dense(outputs)."""
  inputs = {name: keras.Input(shape=(1,), name=name, dtype="float32")
            for name in feature_names}
  h = keras.layers.Concatenate(name="features")([inputs[n] for n in feature_names])
  h = keras.layers.Dense(int(units), activation="relu", name="hidden")(h)
  out = keras.layers.Dense(outputs, name="output")(h)
  return keras.Model(inputs, out)


def build_model(spec):
  """DistributedTrainer's hook: ``spec.hparams["units"]`` (the Tuner's best, through the
  ``hyperparameters`` input; default the smallest choice)."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  return network(tf_keras, spec.feature_names, spec.hparams.get("units", UNITS[0]),
                 spec.output_units)


def _dataset(file_patterns, feature_names, batch_size: int):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  files = tf.io.gfile.glob(list(file_patterns)) if not isinstance(file_patterns, str) \
      else tf.io.gfile.glob(file_patterns)
  spec = {name: tf.io.FixedLenFeature([1], tf.float32) for name in feature_names}
  spec[LABEL] = tf.io.FixedLenFeature([1], tf.float32)

  def split(record):
    parsed = tf.io.parse_single_example(record, spec)
    label = parsed.pop(LABEL)
    return parsed, label
  return (tf.data.TFRecordDataset(files, compression_type="GZIP").map(split)
          .batch(batch_size).repeat())


def tuner_fn(fn_args):
  """The stock Tuner's hook (tfx 1.16.0 tfx/components/tuner/component.py l.95): a
  RandomSearch of ``max_trials`` (custom_config, default 2) over :data:`UNITS` and
  :data:`LEARNING_RATES`, ``fn_args.train_steps`` steps per trial."""
  import keras  # pylint: disable=g-import-not-at-top
  import keras_tuner  # pylint: disable=g-import-not-at-top
  from tfx.components.tuner.component import TunerFnResult  # pylint: disable=g-import-not-at-top
  custom = fn_args.custom_config or {}
  features = list(custom.get("features", ["x0", "x1"]))

  def hypermodel(hp):
    model = network(keras, features, hp.Choice("units", list(UNITS)))
    model.compile(optimizer=keras.optimizers.Adam(
        hp.Choice("learning_rate", list(LEARNING_RATES))), loss="mse")
    return model

  tuner = keras_tuner.RandomSearch(
      hypermodel, objective="val_loss", max_trials=int(custom.get("max_trials", 2)),
      seed=int(custom.get("seed", 0)), directory=fn_args.working_dir,
      project_name="tuned_model")
  return TunerFnResult(tuner=tuner, fit_kwargs={
      "x": _dataset(fn_args.train_files, features, 32),
      "validation_data": _dataset(fn_args.eval_files, features, 32),
      "steps_per_epoch": fn_args.train_steps, "validation_steps": fn_args.eval_steps})
