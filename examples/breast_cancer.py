"""One module for the README's whole TFX loop (scikit-learn's breast cancer data: 30
numeric columns, a 0/1 ``target``): the stock ``Transform``'s ``preprocessing_fn``, the
stock ``Tuner``'s ``tuner_fn`` and DistributedTrainer's ``build_model`` / ``optimizer``.

    transform = tfx.components.Transform(..., module_file="examples/breast_cancer.py")
    tuner = tfx.components.Tuner(examples=transform.outputs["transformed_examples"],
                                 transform_graph=transform.outputs["transform_graph"],
                                 module_file="examples/breast_cancer.py", ...)
    trainer = DistributedTrainer(..., module_file="examples/breast_cancer.py",
                                 hyperparameters=tuner.outputs["best_hyperparameters"])

The Tuner searches the learning rate only: the network's shape stays the same from run to
run, so a trainer warm-started from the previous run's model (``base_model``) always
matches it. KerasTuner 1.4 trains Keras 3 models, the trainer tf_keras ones: the network
is written once (:func:`network`) against either module.
"""
LABEL = "target"
UNITS = 16
LEARNING_RATE = (1e-3, 1e-1)  # The Tuner's log-uniform range.


def transformed_name(name: str) -> str:
  """``mean radius`` -> ``mean_radius``: scikit-learn's column names hold spaces."""
  return name.replace(" ", "_")


def preprocessing_fn(inputs):
  """Stock Transform's hook: every feature standardised with the train split's mean and
  standard deviation, the label passed through. One ``elementwise`` analyzer over the
  stacked [B, 30] columns rather than 30 (on a 2-core box Transform took 3 min with one
  analyzer per column)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_transform as tft  # pylint: disable=g-import-not-at-top
  names = sorted(k for k in inputs if k != LABEL)
  columns = tf.concat([tf.reshape(tf.cast(inputs[k], tf.float32), [-1, 1]) for k in names],
                      axis=1)
  z = tft.scale_to_z_score(columns, elementwise=True)
  outputs = {transformed_name(k): z[:, i:i + 1] for i, k in enumerate(names)}
  outputs[LABEL] = inputs[LABEL]
  return outputs


def network(keras, feature_names, outputs: int = 1):
  """{name: (1,) float input} -> Dense(UNITS, relu) -> Dense(outputs) (a logit)."""
  inputs = {n: keras.Input(shape=(1,), name=n, dtype="float32") for n in feature_names}
  h = keras.layers.Concatenate(name="features")([inputs[n] for n in sorted(feature_names)])
  h = keras.layers.Dense(UNITS, activation="relu", name="hidden")(h)
  return keras.Model(inputs, keras.layers.Dense(outputs, name="output")(h))


def build_model(spec):
  """DistributedTrainer's hook: the features are Transform's outputs."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  return network(tf_keras, spec.feature_names, spec.output_units)


def optimizer(spec):
  """DistributedTrainer's hook: Adam at the tuned ``learning_rate`` (``spec.hparams``)."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  return tf_keras.optimizers.Adam(spec.hparams.get("learning_rate", 0.01))


def _dataset(file_patterns, feature_spec, batch_size: int):
  """Transformed tf.Examples -> ({name: [B, 1] float32}, [B, 1] label), repeated."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  files = tf.io.gfile.glob(file_patterns if isinstance(file_patterns, str)
                           else list(file_patterns))

  def split(records):
    parsed = tf.io.parse_example(records, feature_spec)
    columns = {k: tf.reshape(tf.cast(v, tf.float32), [-1, 1]) for k, v in parsed.items()}
    return columns, columns.pop(LABEL)
  return (tf.data.TFRecordDataset(files, compression_type="GZIP").batch(batch_size)
          .map(split).repeat())


def tuner_fn(fn_args):
  """Stock Tuner's hook (tfx 1.16.0 tfx/components/tuner/component.py): a KerasTuner
  RandomSearch of ``custom_config["max_trials"]`` trials (default 2) over the learning
  rate, ``fn_args.train_steps`` steps each, on Transform's outputs."""
  import keras  # pylint: disable=g-import-not-at-top
  import keras_tuner  # pylint: disable=g-import-not-at-top
  import tensorflow_transform as tft  # pylint: disable=g-import-not-at-top
  from tfx.components.tuner.component import TunerFnResult  # pylint: disable=g-import-not-at-top
  feature_spec = tft.TFTransformOutput(fn_args.transform_graph_path).transformed_feature_spec()
  features = sorted(k for k in feature_spec if k != LABEL)

  def hypermodel(hp):
    model = network(keras, features)
    model.compile(optimizer=keras.optimizers.Adam(hp.Float(
        "learning_rate", *LEARNING_RATE, sampling="log")),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=[keras.metrics.BinaryAccuracy(threshold=0.0)])
    return model

  custom = fn_args.custom_config or {}
  tuner = keras_tuner.RandomSearch(
      hypermodel, objective="val_loss", max_trials=int(custom.get("max_trials", 2)),
      seed=0, directory=fn_args.working_dir, project_name="breast_cancer")
  return TunerFnResult(tuner=tuner, fit_kwargs={
      "x": _dataset(fn_args.train_files, feature_spec, 32),
      "validation_data": _dataset(fn_args.eval_files, feature_spec, 32),
      "steps_per_epoch": fn_args.train_steps, "validation_steps": fn_args.eval_steps})
