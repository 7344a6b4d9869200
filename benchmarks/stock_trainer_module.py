"""run_fn for the stock TFX Trainer in bench_e2e's stock pipeline: plain tf_keras.

The same linear model, optimizer and global batch as DistributedTrainer's ``single``
layout, and the same serving signature (serialized tf.Example -> ``predictions``), so
the stock Evaluator (TFMA) scores both pipelines' models identically. Passed to the
Trainer as ``run_fn="stock_trainer_module.run_fn"`` (a path, so TFX does not package
the benchmarks folder into a wheel).
"""
import tensorflow as tf
import tf_keras

SERVING_SIGNATURE = "serving_default"


def _dataset(file_patterns, keys, label, batch, seed=0):
  files = sorted(f for p in file_patterns for f in tf.io.gfile.glob(p))
  spec = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0) for k in keys}
  spec[label] = tf.io.FixedLenFeature([], tf.float32, default_value=0.0)

  def parse(serialized):
    p = tf.io.parse_example(serialized, spec)
    return tf.stack([p[k] for k in keys], axis=1), tf.expand_dims(p[label], 1)

  return (tf.data.TFRecordDataset(files, compression_type="GZIP",
                                  num_parallel_reads=tf.data.AUTOTUNE)
          .shuffle(10_000, seed=seed).repeat().batch(batch, drop_remainder=True)
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def run_fn(fn_args):
  """Trains Dense(1) with SGD on MSE for ``fn_args.train_steps`` steps and exports it."""
  cfg = fn_args.custom_config or {}
  keys, label = list(cfg["feature_keys"]), cfg["label_key"]
  model = tf_keras.Sequential([tf_keras.layers.Dense(1, kernel_initializer="zeros",
                                                     input_shape=(len(keys),))])
  model.compile(optimizer=tf_keras.optimizers.SGD(cfg["learning_rate"]), loss="mse")
  model.fit(_dataset(fn_args.train_files, keys, label, cfg["batch_size"]), epochs=1,
            steps_per_epoch=fn_args.train_steps, verbose=0)
  feature_spec = {k: tf.io.FixedLenFeature([], tf.float32, default_value=0.0) for k in keys}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
  def serve(examples):
    parsed = tf.io.parse_example(examples, feature_spec)
    return {"predictions": model(tf.stack([parsed[k] for k in keys], axis=1))}

  model.save(fn_args.serving_model_dir, save_format="tf",
             signatures={SERVING_SIGNATURE: serve})
