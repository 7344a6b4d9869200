"""Shared by tests/test_kubeflow*.py: the fixture config, compiling it, normalising it."""
import copy
import os

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FIXTURE_CONFIG = os.path.join(HERE, "golden", "kubeflow_config.yaml")
GOLDEN_PACKAGE = os.path.join(HERE, "golden", "kubeflow_pipeline.yaml")
# Fields that change with tool versions, not with our compiler: stripped before comparing.
VERSION_FIELDS = ("sdkVersion",)


def fixture_mapping():
  with open(FIXTURE_CONFIG) as f:
    return yaml.safe_load(f)


def compile_mapping(data):
  """Compiles a config mapping (as read from YAML) into a Package."""
  from tfx_parallel.kubeflow import compiler, config  # pylint: disable=g-import-not-at-top
  return compiler.compile_package(config.from_mapping(copy.deepcopy(data)))


def normalize(documents):
  """The package's documents without version fields."""
  documents = copy.deepcopy(list(documents))
  for field in VERSION_FIELDS:
    documents[0].pop(field, None)
  return documents


def executors(documents):
  return documents[0]["deploymentSpec"]["executors"]


def platform_executors(documents):
  if len(documents) < 2:
    return {}
  return documents[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
