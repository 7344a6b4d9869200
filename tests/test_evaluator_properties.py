"""Property encoding: ML Metadata round trip (incl. non-finite floats), stock constants."""
import math

import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx.components.evaluator import constants as stock

from tfx_parallel.components.common import artifacts
from tfx_parallel.components.convergence_evaluator import properties as P


def test_blessing_constants_match_the_stock_evaluator():
  assert P.BLESSING_BLESSED_KEY == stock.ARTIFACT_PROPERTY_BLESSED_KEY
  assert P.BLESSING_CURRENT_MODEL_KEY == stock.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY
  assert P.BLESSING_CURRENT_MODEL_ID_KEY == stock.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY
  assert (P.BLESSED_VALUE, P.NOT_BLESSED_VALUE) == (stock.BLESSED_VALUE,
                                                    stock.NOT_BLESSED_VALUE)
  assert (P.BLESSED_FILE_NAME, P.NOT_BLESSED_FILE_NAME) == (stock.BLESSED_FILE_NAME,
                                                            stock.NOT_BLESSED_FILE_NAME)


def test_every_documented_name_is_a_constant_and_vice_versa():
  constants = {v for k, v in vars(P).items() if k.isupper() and isinstance(v, str)
               and not k.endswith(("_FILE_NAME", "_KEY")) and v not in P.STATES}
  documented = {line.split("`")[1] for line in P.__doc__.splitlines()
                if line.startswith("| `")}
  prefixes = {P.EPOCH_LOSS_PREFIX + "<k>", P.EPOCH_EVAL_LOSS_PREFIX + "<k>"}
  assert documented == (constants - {P.EPOCH_LOSS_PREFIX, P.EPOCH_EVAL_LOSS_PREFIX}) | prefixes


def test_values_survive_a_sqlite_metadata_store(tmp_path):
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = str(tmp_path / "metadata.sqlite")
  config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
  store = metadata_store.MetadataStore(config)
  artifact = artifacts.ConvergenceMetrics()
  artifact.uri = str(tmp_path)
  values = {"i": 3, "f": 0.25, "small": 3e-8, "digits": 0.0123456789, "s": "2x2", "b": True, "nan": math.nan, "inf": math.inf,
            "ninf": -math.inf}
  for name, value in values.items():
    P.set_property(artifact, name, value)
  type_id = store.put_artifact_type(artifact.artifact_type)
  proto = artifact.mlmd_artifact
  proto.type_id = type_id
  [artifact_id] = store.put_artifacts([proto])  # Raw NaN/inf doubles would fail here.
  [stored] = store.get_artifacts_by_id([artifact_id])
  decoded = {k: P.decode(v) for k, v in stored.custom_properties.items()}
  assert decoded["i"] == 3 and decoded["f"] == 0.25 and decoded["s"] == "2x2"
  assert decoded["b"] == 1
  # ML Metadata's SQL text keeps 6 decimals (why metrics.json exists); if this starts
  # failing, ML Metadata got exact and the docstring of properties.py should say so.
  assert decoded["small"] == 0.0 and decoded["digits"] == 0.012346
  assert math.isnan(decoded["nan"]) and decoded["inf"] == math.inf
  assert decoded["ninf"] == -math.inf
