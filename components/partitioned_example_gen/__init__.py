"""PartitionedExampleGen: synthetic, CSV or taxi rows -> split, sharded gzip TFRecords.

Modules: config (typed config), component / executor (TFX wiring), sources (planning,
synthetic generation, CSV reading and parsing), partition (hash split and shard),
rows (columnar batches, fast tf.Example encoding), write (shard files, staged commit),
ingest (the Beam pipeline), properties (the Examples artifact's properties).
"""
