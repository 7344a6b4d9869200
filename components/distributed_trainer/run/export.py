"""Exports the trained tf_keras model as a SavedModel whose serving signature takes raw
serialized tf.Examples.

``serving_default`` (keys.SERVING_SIGNATURE) takes a 1-D string tensor ``examples``,
parses the raw features (strings as strings), runs the trainer's lookups and
normalisation (preprocess.Preprocessor, whose tables are saved with the model), calls the
model and returns, by task (names in components/common/keys.py):

* regression: ``predictions`` float32 [N, 1];
* binary: ``probabilities`` float32 [N, 1] (P(class 1)), ``class_ids`` int64 [N, 1],
  ``logits`` [N, 1], ``classes`` string [N, 2] and ``scores`` float32 [N, 2];
* multiclass: ``probabilities`` [N, K], ``class_ids`` [N, 1], ``logits`` [N, K],
  ``classes`` [N, K] and ``scores`` [N, K].

``classes`` and ``scores`` are TF Serving's classification outputs
(tf.saved_model.CLASSIFY_OUTPUT_CLASSES / CLASSIFY_OUTPUT_SCORES): every class name in
class id order (the label vocabulary, else "0", "1", ...; components/common/
label_encoding.py) and its probability. With both in the output dict TFMA reads the
label vocabulary from ``classes`` (tensorflow_model_analysis/metrics/metric_util.py,
``prepare_labels_and_predictions``), so string labels work there too.

A classifier also gets the ``classification`` signature (keys.CLASSIFY_SIGNATURE) that TF
Serving's Classify API serves: one input ``inputs`` (serialized tf.Examples), the outputs
``classes`` and ``scores``, and method_name ``tensorflow/serving/classify``
(tensorflow_serving/servables/tensorflow/classifier.cc, PreProcessClassification). TF2's
``tf.saved_model.save`` writes every signature as ``tensorflow/serving/predict``
(tensorflow/python/saved_model/save.py, ``_generate_signatures``), so the exporter sets
that one method_name in saved_model.pb after saving, as tf.estimator's
``classification_signature_def`` would have written it.

The stock TFX Evaluator (TFMA), Pusher and TF Serving accept it unchanged.
"""
import os
from typing import Optional, Sequence

import tensorflow as tf
import tf_keras

from tfx_parallel.components.common import keys
from tfx_parallel.components.common import label_encoding
from tfx_parallel.components.distributed_trainer import model_spec as ms
from tfx_parallel.components.distributed_trainer.inputs.preprocess import Preprocessor


def outputs(logits: tf.Tensor, task: str, class_names: Optional[Sequence[str]] = None):
  """The serving outputs of the model's raw output for ``task``; ``class_names`` (one per
  class id; default "0", "1", ...) fill the ``classes`` output of a classifier."""
  if task == ms.REGRESSION:
    return {keys.PREDICTIONS_OUTPUT: logits}
  if task == ms.BINARY:
    probabilities = tf.sigmoid(logits)
    class_ids = tf.cast(logits > 0.0, tf.int64)
    scores = tf.concat([1.0 - probabilities, probabilities], axis=-1)
  else:
    probabilities = tf.nn.softmax(logits, axis=-1)
    class_ids = tf.argmax(logits, axis=-1, output_type=tf.int64)[:, None]
    scores = probabilities
  names = tf.constant(list(class_names) if class_names is not None else
                      list(label_encoding.class_names(int(scores.shape[-1]))), tf.string)
  classes = tf.tile(names[None, :], [tf.shape(scores)[0], 1])
  return {keys.PROBABILITIES_OUTPUT: probabilities, keys.CLASS_IDS_OUTPUT: class_ids,
          keys.LOGITS_OUTPUT: logits, keys.CLASSES_OUTPUT: classes,
          keys.SCORES_OUTPUT: scores}


def class_names(spec: ms.ModelSpec) -> Sequence[str]:
  """The name of each class id of a classifier's spec (label_encoding.class_names)."""
  k = 2 if spec.task == ms.BINARY else spec.num_classes
  return label_encoding.class_names(k, spec.label_vocabulary)


def export(path: str, model: tf_keras.Model, pre: Preprocessor,
           transform_graph_uri: Optional[str] = None) -> None:
  """Saves ``model`` (plain variables: build it outside any strategy) with the signature.

  With ``transform_graph_uri`` (TFX Transform) the signature parses the graph's RAW
  feature spec (the label left out), runs ``transform_features_layer()`` and feeds the
  transformed features to the trainer's preprocessing, as TFX's Keras examples do.
  """
  task = pre.spec.task
  names = None if task == ms.REGRESSION else class_names(pre.spec)
  # Track the lookup tables with the model so the SavedModel owns them.
  model._tfx_parallel_tables = list(pre.tables.values())  # pylint: disable=protected-access
  if transform_graph_uri is None:

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve(examples):
      return outputs(model(pre.serving_inputs(examples), training=False), task, names)
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
      return outputs(model(pre.inputs(parsed), training=False), task, names)

  signatures = {keys.SERVING_SIGNATURE: serve}
  if names is not None:

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string,
                                                name=tf.saved_model.CLASSIFY_INPUTS)])
    def classify(inputs):
      out = serve(inputs)
      return {keys.CLASSES_OUTPUT: out[keys.CLASSES_OUTPUT],
              keys.SCORES_OUTPUT: out[keys.SCORES_OUTPUT]}

    signatures[keys.CLASSIFY_SIGNATURE] = classify
  model.save(path, save_format="tf", signatures=signatures)
  if names is not None:
    set_method_name(path, keys.CLASSIFY_SIGNATURE, tf.saved_model.CLASSIFY_METHOD_NAME)


def set_method_name(path: str, signature: str, method_name: str) -> None:
  """Sets one signature's method_name in ``path``/saved_model.pb (see the module doc)."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  pb = os.path.join(path, tf.saved_model.SAVED_MODEL_FILENAME_PB)
  saved = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(pb, "rb") as f:
    saved.ParseFromString(f.read())
  for meta_graph in saved.meta_graphs:
    meta_graph.signature_def[signature].method_name = method_name
  with tf.io.gfile.GFile(pb, "wb") as f:
    f.write(saved.SerializeToString())


def _column(value: tf.Tensor) -> tf.Tensor:
  """A transformed feature as [N, 1] (the graph may give [N] or [N, 1])."""
  return tf.reshape(value, [-1, 1])
