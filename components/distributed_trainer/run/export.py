"""Exports the trained tf_keras model as a SavedModel whose serving signature takes raw
serialized tf.Examples.

``serving_default`` (keys.SERVING_SIGNATURE) takes a 1-D string tensor ``examples``,
parses the raw features (strings as strings), runs the trainer's lookups and
normalisation (preprocess.Preprocessor, whose tables are saved with the model), calls the
model and returns, by task (names in components/common/keys.py):

* regression: ``predictions`` float32 [N, 1];
* binary: ``probabilities`` float32 [N, 1] (P(class 1)), ``class_ids`` int64 [N, 1],
  ``logits`` [N, 1];
* multiclass: ``probabilities`` [N, K], ``class_ids`` [N, 1], ``logits`` [N, K].

The stock TFX Evaluator (TFMA), Pusher and TF Serving accept it unchanged.
"""
from typing import Optional

import tensorflow as tf
import tf_keras

from tfx_parallel.components.common import keys
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor


def outputs(logits: tf.Tensor, task: str):
  """The serving outputs of the model's raw output for ``task``."""
  if task == ms.REGRESSION:
    return {keys.PREDICTIONS_OUTPUT: logits}
  if task == ms.BINARY:
    probabilities = tf.sigmoid(logits)
    class_ids = tf.cast(logits > 0.0, tf.int64)
  else:
    probabilities = tf.nn.softmax(logits, axis=-1)
    class_ids = tf.argmax(logits, axis=-1, output_type=tf.int64)[:, None]
  return {keys.PROBABILITIES_OUTPUT: probabilities, keys.CLASS_IDS_OUTPUT: class_ids,
          keys.LOGITS_OUTPUT: logits}


def export(path: str, model: tf_keras.Model, pre: Preprocessor,
           transform_graph_uri: Optional[str] = None) -> None:
  """Saves ``model`` (plain variables: build it outside any strategy) with the signature.

  With ``transform_graph_uri`` (TFX Transform) the signature parses the graph's RAW
  feature spec (the label left out), runs ``transform_features_layer()`` and feeds the
  transformed features to the trainer's preprocessing, as TFX's Keras examples do.
  """
  task = pre.spec.task
  # Track the lookup tables with the model so the SavedModel owns them.
  model._tfx_parallel_tables = list(pre.tables.values())  # pylint: disable=protected-access
  if transform_graph_uri is None:

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
      return outputs(model(pre.serving_inputs(examples), training=False), task)
  else:
    import tensorflow_transform as tft  # pylint: disable=g-import-not-at-top
    tft_output = tft.TFTransformOutput(transform_graph_uri)
    model.tft_layer = tft_output.transform_features_layer()  # Tracked: saved with the model.
    raw_spec = dict(tft_output.raw_feature_spec())
    raw_spec.pop(pre.spec.label_key, None)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
      transformed = model.tft_layer(tf.io.parse_example(examples, raw_spec))
      parsed = {f.example_key: _column(transformed[f.example_key]) for f in pre.spec.features}
      return outputs(model(pre.inputs(parsed), training=False), task)

  model.save(path, save_format="tf", signatures={keys.SERVING_SIGNATURE: serve})


def _column(value: tf.Tensor) -> tf.Tensor:
  """A transformed feature as [N, 1] (the graph may give [N] or [N, 1])."""
  return tf.reshape(value, [-1, 1])
