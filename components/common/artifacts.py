"""Custom artifact types of this project."""
from tfx import types
from tfx.types import standard_artifacts  # pylint: disable=unused-import
from tfx.types.system_artifacts import Metrics


class TrainingHistory(types.Artifact):
  """Per-step training history (history.json) and the layout that produced it."""
  TYPE_NAME = "TrainingHistory"
  TYPE_ANNOTATION = Metrics


class ConvergenceMetrics(types.Artifact):
  """Quality and convergence metrics as ML Metadata properties (docs/results.md)."""
  TYPE_NAME = "ConvergenceMetrics"
  TYPE_ANNOTATION = Metrics
