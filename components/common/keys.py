"""Names shared across components: channel keys, artifact property names, file names.

Every name a user may query in ML Metadata is defined here once (documented in README).
"""
# Channel keys.
EXAMPLES_KEY = "examples"
MODEL_KEY = "model"
MODEL_RUN_KEY = "model_run"
HISTORY_KEY = "history"
METRICS_KEY = "metrics"
BLESSING_KEY = "blessing"
SCHEMA_KEY = "schema"
CONFIG_KEY = "config"  # JSON execution property holding the component's typed config.

# Custom properties on the Examples artifact (written by PartitionedExampleGen).
NUM_SHARDS = "num_shards"            # int: files per split, a multiple of num_workers.
ROW_COUNTS = "row_counts"            # JSON {split: rows}.
ROW_COUNT_PREFIX = "row_count_"      # int per split, e.g. row_count_train.
SKIPPED_ROWS = "skipped_rows"        # int: bad rows skipped under bad_row_policy=skip.
FEATURE_KEYS = "feature_keys"        # JSON list of numeric feature names, in order.
LABEL_KEY = "label_key"              # str.
SOURCE = "source"                    # "synthetic" | "taxi" | the CSV glob.
TRUE_WEIGHTS = "true_weights"        # JSON list (synthetic only).
TRUE_BIAS = "true_bias"              # float (synthetic only).

# Files.
TFRECORD_PREFIX = "data_tfrecord"    # Split-<name>/data_tfrecord-00000-of-00004.gz
HISTORY_FILE = "history.json"        # in the TrainingHistory artifact's URI.
SERVING_SIGNATURE = "serving_default"  # takes serialized tf.Example under "examples".

# The task contract between DistributedTrainer and ConvergenceEvaluator. Custom properties
# on the Model and TrainingHistory artifacts (written by DistributedTrainer):
TASK = "task"                          # "regression" | "binary" | "multiclass".
TASKS = ("regression", "binary", "multiclass")
NUM_CLASSES = "num_classes"            # int: 1 for regression and binary, K for multiclass.
LABEL_VOCABULARY = "label_vocabulary"  # JSON list, class id -> label string (string labels).
# Outputs of the serving signature, by task:
PREDICTIONS_OUTPUT = "predictions"     # regression: float32 [N, 1].
PROBABILITIES_OUTPUT = "probabilities" # binary: float32 [N, 1], P(class 1); multiclass [N, K].
CLASS_IDS_OUTPUT = "class_ids"         # classification: int64 [N, 1].
LOGITS_OUTPUT = "logits"               # classification: float32 [N, 1] or [N, K].
