"""PartitionedExampleGen: synthetic, CSV or taxi rows -> split, sharded gzip TFRecords.

Modules: config (typed config), component / executor / driver (TFX wiring; the driver
resolves spans and fingerprints the input), sources (planning, synthetic generation, CSV
reading and parsing), inference (column types), column_choice (the row index and ID-like
columns left out, ``columns`` / ``keep_columns``), output_splits (stock output_config),
stock_key (stock ExampleGen's partition keys), partition (hash split and shard), rows
(columnar batches, fast tf.Example encoding), write (shard files, staged commit), ingest
(the Beam pipeline), split_stats (duplicate share, distinct rows, the eval split's
warnings), runners (Beam args for Dask), properties (the Examples artifact's
properties), verify (read-back checks).
"""
