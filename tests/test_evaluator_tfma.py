"""Parity with the stock TFMA Evaluator configured by tfma_stage (same model, same split)."""
import json
import os

import numpy as np
import pytest

import tfx_parallel.pipeline.tfenv  # pylint: disable=unused-import
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs as specs
from tfx.utils import path_utils
from tfx.utils import proto_utils

from tfx_parallel.components.convergence_evaluator import quality
from tfx_parallel.components.convergence_evaluator import testing
from tfx_parallel.components.convergence_evaluator import tfma_stage

FEATURES = ["x0", "x1", "x2", "x3"]


def _output(tmp_path, artifact_class, name):
  artifact = artifact_class()
  artifact.uri = str(tmp_path / name)
  os.makedirs(artifact.uri)
  return artifact


def test_stock_evaluator_is_wired_to_our_channels():
  from tfx import types  # pylint: disable=g-import-not-at-top
  evaluator = tfma_stage.stock_evaluator(types.Channel(type=standard_artifacts.Model),
                                         types.Channel(type=standard_artifacts.Examples),
                                         label_key="y")
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  config = proto_utils.json_to_proto(evaluator.exec_properties[specs.EVAL_CONFIG_KEY],
                                     tfma.EvalConfig())
  assert config.model_specs[0].signature_name == "serving_default"
  assert config.model_specs[0].label_key == "y"
  assert json.loads(evaluator.exec_properties[specs.EXAMPLE_SPLITS_KEY]) == ["eval"]


@pytest.mark.slow
def test_eval_mse_matches_tfma_within_1e_4_relative(tmp_path):
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  from tfx import types  # pylint: disable=g-import-not-at-top
  x, y = testing.synthetic_data(3000, [1.0, -2.0, 0.5, 3.0], 1.5, noise=0.7, seed=5)
  missing = np.zeros_like(x, bool)
  missing[::11, 2] = True  # Both evaluators must see the model's 0.0 default.
  records = testing.serialize_examples(x, y, FEATURES, "y", missing=missing)
  examples = testing.write_examples(str(tmp_path / "examples"),
                                    {"train": records[:1000], "eval": records[1000:]},
                                    FEATURES, "y", shards=2)
  model = testing.export_linear_model(str(tmp_path / "model"), [0.9, -2.1, 0.6, 2.8], 1.2,
                                      FEATURES)

  ours = quality.evaluate(path_utils.serving_model_path(model.uri), examples.uri, "eval",
                          "y", batch_size=256)

  component = tfma_stage.stock_evaluator(types.Channel(type=standard_artifacts.Model),
                                         types.Channel(type=standard_artifacts.Examples), "y")
  exec_properties = dict(component.exec_properties)  # The component's own JSON config.
  evaluation = _output(tmp_path, standard_artifacts.ModelEvaluation, "evaluation")
  blessing = _output(tmp_path, standard_artifacts.ModelBlessing, "blessing")
  component.executor_spec.executor_class().Do(
      {specs.EXAMPLES_KEY: [examples], specs.MODEL_KEY: [model]},
      {specs.EVALUATION_KEY: [evaluation], specs.BLESSING_KEY: [blessing]},
      exec_properties)

  [result] = tfma.load_metrics(evaluation.uri)
  theirs = {kv.key.name: kv.value.double_value.value
            for kv in result.metric_keys_and_values}
  assert theirs["example_count"] == ours.examples == 2000
  assert ours.mse == pytest.approx(theirs["mean_squared_error"], rel=1e-4)
  assert ours.mae == pytest.approx(theirs["mean_absolute_error"], rel=1e-4)
