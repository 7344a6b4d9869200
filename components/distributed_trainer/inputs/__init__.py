"""What the trainer reads: the Examples artifact's splits, files, features and label
(description.py), one scan of them (stats.py), the missing-value policy (missing.py),
serialized tf.Examples -> model inputs (preprocess.py), the tf.data input (tf_data.py) and
the in-memory cache of the training split (memory_cache.py)."""
