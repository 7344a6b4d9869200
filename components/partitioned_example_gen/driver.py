"""The driver: resolve span and version, and fingerprint the input files, before the cache.

TFX runs a component's driver before its cache lookup, and the cache key includes the
execution properties the driver returns. Stock FileBasedExampleGen's driver puts the
fingerprint of the matched files there (their names, sizes and modification times), so
changed input means a new execution, never a stale cache hit. This driver is that
driver (``tfx.components.example_gen.driver.FileBasedDriver`` with TFX's
``FileBasedInputProcessor``): the same span and version resolution (``{SPAN}``,
``{VERSION}``, ``{YYYY}``/``{MM}``/``{DD}`` in the pattern, ``RangeConfig``), the same
fingerprint, the same ``span`` / ``version`` / ``input_fingerprint`` on the artifact.

What is special here is only where the input comes from. ``config.source`` is either a
glob (``/data/span-{SPAN}/*.csv``), split here into ``input_base`` (the directories
before the first wildcard or spec) and a relative pattern, or "taxi" (the CSV in the tfx
wheel, located at run time), or, with ``input_config``, the ``input_base`` directory
itself as stock ExampleGen takes it. The synthetic source has no files: its rows are a
function of the config, which is already part of the cache key.

The executor calls ``resolve`` itself when no driver ran (a direct ``Executor.Do``, or an
orchestrator that does not run custom drivers: Kubeflow Pipelines v2, see docs/kubeflow.md, "Caching").
"""
import dataclasses
import os
from typing import Any, Dict, Optional, Tuple

from tfx.components.example_gen import driver as example_gen_driver
from tfx.components.example_gen import input_processor
from tfx.components.example_gen import utils
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2
from tfx.types import standard_component_specs as specs
from tfx.utils import proto_utils

from tfx_parallel.components.common import config_util
from tfx_parallel.components.common import keys
from tfx_parallel.components.partitioned_example_gen import config as config_lib
from tfx_parallel.components.partitioned_example_gen import sources

SINGLE_SPLIT = "single_split"  # Stock ExampleGen's name for an unsplit input.
_WILDCARDS = ("*", "?", "[", "{")


@dataclasses.dataclass(frozen=True)
class ResolvedInput:
  """The files of one execution: span and version filled in, and their fingerprint."""
  input_base: str
  input_config: example_gen_pb2.Input
  span: int
  version: Optional[int]
  fingerprint: str

  @property
  def pattern(self) -> str:
    """The glob of the (single) input split, span and version filled in."""
    return os.path.join(self.input_base, self.input_config.splits[0].pattern)


def split_glob(pattern: str) -> Tuple[str, str]:
  """(input_base, relative pattern): input_base is the directories before the first
  path component with a wildcard or a {SPEC}; a plain file's is its directory."""
  parts = pattern.split("/")
  first = next((i for i, p in enumerate(parts) if any(w in p for w in _WILDCARDS)),
               len(parts) - 1)
  base = "/".join(parts[:first])
  if pattern.startswith("/") and not base:
    base = "/"
  if "://" in pattern and base.endswith(":/"):  # gs://bucket with the glob at the top.
    base += "/"
  return base or ".", "/".join(parts[first:])


def input_location(config: config_lib.ExampleGenConfig,
                   input_config_json: Optional[str]) -> Tuple[str, example_gen_pb2.Input]:
  """(input_base, unresolved Input) of a CSV source (see the module docstring)."""
  source = sources.taxi_csv_path() if config.source == config_lib.TAXI else config.source
  if input_config_json:
    input_config = proto_utils.json_to_proto(input_config_json, example_gen_pb2.Input())
    return source, input_config
  base, relative = split_glob(source)
  return base, example_gen_pb2.Input(
      splits=[example_gen_pb2.Input.Split(name=SINGLE_SPLIT, pattern=relative)])


def resolve(config: config_lib.ExampleGenConfig, input_config_json: Optional[str] = None,
            range_config_json: Optional[str] = None) -> ResolvedInput:
  """Resolves span and version and fingerprints the files, as stock ExampleGen does.

  Raises:
    sources.BadInputError: no span matches, or the pattern's specs are malformed; the
      message names the pattern.
  """
  base, input_config = input_location(config, input_config_json)
  range_config = None
  if range_config_json:
    range_config = proto_utils.json_to_proto(range_config_json,
                                             range_config_pb2.RangeConfig())
  patterns = [os.path.join(base, s.pattern) for s in input_config.splits]
  try:
    processor = input_processor.FileBasedInputProcessor(base, input_config.splits,
                                                        range_config)
    span, version = processor.resolve_span_and_version()
    fingerprint = processor.get_input_fingerprint(span, version)
  except ValueError as e:
    raise sources.BadInputError(f"source: cannot resolve {patterns}: {e}") from e
  resolved = example_gen_pb2.Input()
  resolved.CopyFrom(input_config)
  for split in resolved.splits:
    split.pattern = processor.get_pattern_for_span_version(split.pattern, span, version)
  return ResolvedInput(base, resolved, span, version, fingerprint)


def resolved_from_properties(exec_properties: Dict[str, Any]) -> Optional[ResolvedInput]:
  """The driver's ResolvedInput, read back from the execution properties; None if no
  driver ran."""
  fingerprint = exec_properties.get(utils.FINGERPRINT_PROPERTY_NAME)
  if not fingerprint:
    return None
  input_config = proto_utils.json_to_proto(exec_properties[specs.INPUT_CONFIG_KEY],
                                           example_gen_pb2.Input())
  return ResolvedInput(exec_properties[specs.INPUT_BASE_KEY], input_config,
                       int(exec_properties.get(utils.SPAN_PROPERTY_NAME) or 0),
                       exec_properties.get(utils.VERSION_PROPERTY_NAME), fingerprint)


def resolve_exec_properties(exec_properties: Dict[str, Any]) -> Dict[str, Any]:
  """The driver's work on the execution properties (a pure function of them and the
  files): adds input_base, the resolved input_config, span, version, input_fingerprint."""
  config = config_util.from_json(config_lib.ExampleGenConfig, exec_properties[keys.CONFIG_KEY])
  exec_properties = dict(exec_properties)
  if config.is_synthetic:
    exec_properties[utils.SPAN_PROPERTY_NAME] = 0
    exec_properties[utils.VERSION_PROPERTY_NAME] = None
    return exec_properties
  resolved = resolve(config, exec_properties.get(specs.INPUT_CONFIG_KEY),
                     exec_properties.get(specs.RANGE_CONFIG_KEY))
  exec_properties[specs.INPUT_BASE_KEY] = resolved.input_base
  exec_properties[specs.INPUT_CONFIG_KEY] = proto_utils.proto_to_json(resolved.input_config)
  exec_properties[utils.SPAN_PROPERTY_NAME] = resolved.span
  exec_properties[utils.VERSION_PROPERTY_NAME] = resolved.version
  exec_properties[utils.FINGERPRINT_PROPERTY_NAME] = resolved.fingerprint
  return exec_properties


class Driver(example_gen_driver.FileBasedDriver):
  """Stock FileBasedDriver, with the input located from PartitionedExampleGen's config."""

  def resolve_exec_properties(self, exec_properties, pipeline_info, component_info):
    del pipeline_info, component_info
    return resolve_exec_properties(exec_properties)
