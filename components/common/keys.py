"""Names shared across components: channel keys, artifact property names, file names.

Every name a user may query in ML Metadata is defined here once (documented in docs/results.md).
"""
# Channel keys.
EXAMPLES_KEY = "examples"
MODEL_KEY = "model"
MODEL_RUN_KEY = "model_run"
HISTORY_KEY = "history"
BASELINE_MODEL_KEY = "baseline_model"  # As the stock Evaluator's (standard_component_specs).
METADATA_CONNECTION_KEY = "metadata_connection"  # JSON ConnectionConfig (evaluator lookup).
METRICS_KEY = "metrics"
BLESSING_KEY = "blessing"
SCHEMA_KEY = "schema"
TRANSFORM_GRAPH_KEY = "transform_graph"
BASE_MODEL_KEY = "base_model"  # A Model whose variables initialise the run (warm start).
HYPERPARAMETERS_KEY = "hyperparameters"  # As the stock Trainer's (standard_component_specs).
CONFIG_KEY = "config"  # JSON execution property holding the component's typed config.
ENCODING_VERSION_KEY = "encoding_version"  # PartitionedExampleGen: rows.ENCODING_VERSION.

# Custom properties on the Examples artifact (written by PartitionedExampleGen).
NUM_SHARDS = "num_shards"            # int: files per split, a multiple of num_workers.
ROW_COUNTS = "row_counts"            # JSON {split: rows}.
ROW_COUNT_PREFIX = "row_count_"      # int per split, e.g. row_count_train.
SKIPPED_ROWS = "skipped_rows"        # int: bad rows skipped under bad_row_policy=skip.
FEATURE_KEYS = "feature_keys"        # JSON list of every feature name (numeric and string), in order.
STRING_FEATURE_KEYS = "string_feature_keys"  # JSON list of the string ones among them, in order.
LABEL_KEY = "label_key"              # str.
SOURCE = "source"                    # "synthetic" | "taxi" | the CSV glob.
TRUE_WEIGHTS = "true_weights"        # JSON list (synthetic only).
TRUE_BIAS = "true_bias"              # str: the float, exact (synthetic only).
# Column types of CSV sources (not set for synthetic, whose columns are all float). The
# trainer reads numeric features from FEATURE_KEYS; these say what else is there.
COLUMN_TYPES = "column_types"        # JSON {column: "float" | "int" | "string"}, header
                                     # order, label included; "string" columns are
                                     # bytes_list features, never in FEATURE_KEYS.
TYPE_INFERENCE = "type_inference"    # JSON {"sampled_rows", "numeric_share", "columns":
                                     # {column: {type, origin, sampled_cells, numeric_cells}}}.
INPUT_COLUMNS = "input_columns"      # JSON {"left_out": {column: why}, "not_selected": [...],
                                     # "kept": {column: setting}} (CSV: column_choice.py).
# What the splits hold (PartitionedExampleGen's split_stats.py), every source:
DUPLICATE_SHARE = "duplicate_share"  # float: share of rows that repeat an earlier row.
DISTINCT_ROWS = "distinct_rows"      # JSON {"all": n, split: n}: distinct rows.
EVAL_SPLIT_WARNINGS = "eval_split_warnings"  # JSON list of sentences, [] when the eval
                                     # split represents the data (ConvergenceEvaluator
                                     # then judges the model; otherwise it says so).
# Stock ExampleGen's names (tfx.components.example_gen.utils), set by the driver for file
# sources: the resolved span and version, and the matched files' fingerprint.
SPAN = "span"                        # int; 0 without {SPAN} in the pattern.
VERSION = "version"                  # int; only with {VERSION} in the pattern.
INPUT_FINGERPRINT = "input_fingerprint"  # str: names, sizes and mtimes of the files.

# Files.
TFRECORD_PREFIX = "data_tfrecord"    # Split-<name>/data_tfrecord-00000-of-00004.gz
HISTORY_FILE = "history.json"        # in the TrainingHistory artifact's URI.
SERVING_SIGNATURE = "serving_default"  # takes serialized tf.Example under "examples".

# The task contract between DistributedTrainer and ConvergenceEvaluator. Custom properties
# on the Model and TrainingHistory artifacts (written by DistributedTrainer):
TASK = "task"                          # "regression" | "binary" | "multiclass".
TASKS = ("regression", "binary", "multiclass")
NUM_CLASSES = "num_classes"            # int: 1 for regression, 2 for binary, K for multiclass.
LABEL_VOCABULARY = "label_vocabulary"  # JSON list, class id -> label string (string labels).
# On TrainingHistory (run_history.py), written by DistributedTrainer's executor:
MISSING_LABELS = "missing_labels"      # JSON {count, rows, share, splits, policy}.
LABEL_COUNTS = "label_counts"          # JSON {split: {class name: examples}} (classifiers).
LABEL_CLASSES_NOT_IN_TRAIN = "label_classes_not_in_train"  # JSON {class: {split: examples}}.
# Outputs of the serving signature, by task:
PREDICTIONS_OUTPUT = "predictions"     # regression: float32 [N, 1].
PROBABILITIES_OUTPUT = "probabilities" # binary: float32 [N, 1], P(class 1); multiclass [N, K].
CLASS_IDS_OUTPUT = "class_ids"         # classification: int64 [N, 1].
LOGITS_OUTPUT = "logits"               # classification: float32 [N, 1] or [N, K].
# TF Serving's classification outputs (tf.saved_model.CLASSIFY_OUTPUT_CLASSES / _SCORES),
# in serving_default and in the CLASSIFY_SIGNATURE of every classifier:
CLASSES_OUTPUT = "classes"             # string [N, K]: every class name, in class id order.
SCORES_OUTPUT = "scores"               # float32 [N, K]: P(class) (binary: [1 - p, p]).
# A signature TF Serving's Classify API serves (method_name tensorflow/serving/classify,
# input "inputs": serialized tf.Examples), as tf.estimator's canned classifiers export it.
CLASSIFY_SIGNATURE = "classification"

# Training-state bytes, measured from where the variables live (distributed_trainer/plan/memory.py):
# custom properties on TrainingHistory and ConvergenceMetrics, and keys of history.json.
PARAM_COUNT = "param_count"                        # int: trainable parameters.
PARAM_BYTES_TOTAL = "param_bytes_total"            # int: their bytes, counted once.
STATE_BYTES_PER_DEVICE = "state_bytes_per_device"  # int: step state + blocks in transit.
# layout: auto (distributed_trainer/plan/layout_choice.py): on TrainingHistory and in history.json.
LAYOUT_CHOSEN = "layout_chosen"    # str: "single", "mirrored 4", "mesh 2x2".
LAYOUT_REASON = "layout_reason"    # str: the planner's reason.
# The device plan (distributed_trainer/plan/devices.py): on TrainingHistory and in history.json.
DEVICE_TYPE = "device_type"        # str: "CPU" or "GPU".
COLLECTIVE = "collective"          # str: a key of devices.COLLECTIVES, e.g. "nccl_all_reduce".
