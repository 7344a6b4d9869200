"""Property encoding: ML Metadata round trip (incl. non-finite floats), stock constants."""
import math

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx.components.evaluator import constants as stock

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.convergence_evaluator import properties as P


def test_blessing_constants_match_the_stock_evaluator():
  assert P.BLESSING_BLESSED_KEY == stock.ARTIFACT_PROPERTY_BLESSED_KEY
  assert P.BLESSING_CURRENT_MODEL_KEY == stock.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY
  assert P.BLESSING_CURRENT_MODEL_ID_KEY == stock.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY
  assert P.BLESSING_BASELINE_MODEL_KEY == stock.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY
  assert P.BLESSING_BASELINE_MODEL_ID_KEY == stock.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY
  assert (P.BLESSED_VALUE, P.NOT_BLESSED_VALUE) == (stock.BLESSED_VALUE,
                                                    stock.NOT_BLESSED_VALUE)
  assert (P.BLESSED_FILE_NAME, P.NOT_BLESSED_FILE_NAME) == (stock.BLESSED_FILE_NAME,
                                                            stock.NOT_BLESSED_FILE_NAME)


def test_every_documented_name_is_a_constant_and_vice_versa():
  constants = {v for k, v in vars(P).items() if k.isupper() and isinstance(v, str)
               and not k.endswith(("_FILE_NAME", "_KEY")) and v not in P.STATES}
  documented = {line.split("`")[1] for line in P.__doc__.splitlines()
                if line.startswith("| `")}
  prefix_names = {P.EPOCH_LOSS_PREFIX, P.EPOCH_EVAL_LOSS_PREFIX,
                  P.EVAL_CLASS_ACCURACY_PREFIX, P.EVAL_CLASS_EXAMPLES_PREFIX}
  assert documented == (constants - prefix_names) | {p + "<k>" for p in prefix_names}


VALUES = {"i": 3, "f": 0.25, "small": 3e-8, "digits": 0.0123456789, "s": "2x2", "b": True,
          "nan": math.nan, "inf": math.inf, "ninf": -math.inf,
          P.FINAL_LOSS: 3.2e-9, P.EVAL_LOG_LOSS: 1.0369e-4, "big": 123456.789012345678,
          "negative": -2.5e-300, P.STEPS_TO_TARGET: 2 ** 53 + 1}


def _stored(tmp_path, artifact):
  """The artifact written to a fresh SQLite ML Metadata store and read back (a proto)."""
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = str(tmp_path / "metadata.sqlite")
  config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
  store = metadata_store.MetadataStore(config)
  type_id = store.put_artifact_type(artifact.artifact_type)
  proto = artifact.mlmd_artifact
  proto.type_id = type_id
  [artifact_id] = store.put_artifacts([proto])  # Raw NaN/inf doubles would fail here.
  del store
  # A new connection, as `tfx-parallel metrics` opens it: nothing is served from a cache.
  [stored] = metadata_store.MetadataStore(config).get_artifacts_by_id([artifact_id])
  return stored


def test_values_survive_a_sqlite_metadata_store(tmp_path):
  artifact = artifacts.ConvergenceMetrics()
  artifact.uri = str(tmp_path)
  for name, value in VALUES.items():
    P.set_property(artifact, name, value)
  stored = _stored(tmp_path, artifact)
  decoded = {k: P.decode(v) for k, v in stored.custom_properties.items()}
  assert decoded["i"] == 3 and decoded["f"] == 0.25 and decoded["s"] == "2x2"
  assert decoded["b"] == 1
  # ML Metadata's SQL text keeps 6 decimals (why metrics.json exists); if this starts
  # failing, ML Metadata got exact and the docstring of properties.py should say so.
  assert decoded["small"] == 0.0 and decoded["digits"] == 0.012346
  assert math.isnan(decoded["nan"]) and decoded["inf"] == math.inf
  assert decoded["ninf"] == -math.inf


def test_precise_values_read_back_exactly_from_sqlite(tmp_path):
  artifact = artifacts.ConvergenceMetrics()
  artifact.uri = str(tmp_path)
  P.set_properties(artifact, VALUES)
  stored = _stored(tmp_path, artifact)
  rounded = {k: P.decode(v) for k, v in stored.custom_properties.items()}
  # The double properties stay (queries and UIs use them), rounded by the store ...
  assert stored.custom_properties[P.FINAL_LOSS].WhichOneof("value") == "double_value"
  assert rounded[P.FINAL_LOSS] == 0.0 and rounded[P.EVAL_LOG_LOSS] == 0.000104
  # ... and the struct property holds them exactly.
  assert stored.custom_properties[P.PRECISE_VALUES].WhichOneof("value") == "struct_value"
  exact = P.read_properties(stored.custom_properties)
  assert exact[P.FINAL_LOSS] == 3.2e-9
  assert exact[P.EVAL_LOG_LOSS] == 1.0369e-4
  assert exact["digits"] == 0.0123456789 and exact["small"] == 3e-8
  assert exact["big"] == 123456.789012345678 and exact["negative"] == -2.5e-300
  assert math.isnan(exact["nan"]) and exact["inf"] == math.inf and exact["ninf"] == -math.inf
  assert exact[P.STEPS_TO_TARGET] == 2 ** 53 + 1 and isinstance(exact["i"], int)
  assert exact["s"] == "2x2" and exact["b"] == 1
  assert P.PRECISE_VALUES not in exact
  assert set(exact) == set(VALUES)


def test_read_properties_of_an_artifact_without_precise_values():
  artifact = artifacts.ConvergenceMetrics()
  P.set_property(artifact, P.FINAL_LOSS, 0.5)
  assert P.read_properties(artifact.mlmd_artifact.custom_properties) == {P.FINAL_LOSS: 0.5}
