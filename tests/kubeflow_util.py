"""Shared by tests/test_kubeflow*.py: the fixture config, compiling it, normalising it."""
import copy
import os
import socket
import time

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


def free_port() -> int:
  """A TCP port on 127.0.0.1 that nothing listens on now (for a server a test starts)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def create_bucket_when_listening(client, bucket: str, tries: int = 100) -> None:
  """Creates `bucket` through boto3 `client` once the S3 server just started (moto's)
  answers: up to `tries` attempts 0.2 s apart."""
  for _ in range(tries):
    try:
      client.create_bucket(Bucket=bucket)
      return
    except Exception:  # pylint: disable=broad-except  # Not listening yet.
      time.sleep(0.2)
