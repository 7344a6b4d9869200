"""The ingest Beam pipeline: source -> partition and shard -> encode -> write, then commit.

Independent of TFX: ``run`` takes any ``beam.Pipeline`` (the executor's, with the user's
Beam args, or a test's) and an output directory.
"""
import dataclasses
import re
from typing import Optional

import apache_beam as beam
from absl import logging
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.runner import PipelineState

from tfx_parallel.components.partitioned_example_gen import partition
from tfx_parallel.components.partitioned_example_gen import sources
from tfx_parallel.components.partitioned_example_gen import split_stats
from tfx_parallel.components.partitioned_example_gen import verify
from tfx_parallel.components.partitioned_example_gen import write
from tfx_parallel.components.partitioned_example_gen.config import ExampleGenConfig
from tfx_parallel.components.partitioned_example_gen.rows import ExampleEncoder


def build(pipeline: beam.Pipeline, config: ExampleGenConfig, plan: sources.SourcePlan,
          root: str, splits: partition.OutputSplits) -> None:
  """Adds the whole ingest to ``pipeline``, writing Split-*, summary.json and
  split_stats.json under root."""
  rows, skipped = sources.read_rows(pipeline, plan, config.bad_row_policy)
  encoder = ExampleEncoder(plan.numeric_keys, plan.string_keys, plan.int_keys)
  written = (rows
             | "EncodeAndPartition" >> write.EncodeAndPartition(encoder, splits.pairs,
                                                                config.num_shards)
             | "WriteShards" >> write.WriteShards(
                 root, splits.names, config.num_shards,
                 part_buffer_bytes=0 if drops_finish_bundle_outputs(pipeline) else None,
                 options=pipeline.options))
  summary = written | "Summary" >> write.WriteSummary(skipped, root, pipeline.options)
  stats = rows | "SplitStats" >> split_stats.WriteSplitStats(
      root, splits.pairs, config.num_shards, plan.numeric_keys, plan.string_keys,
      plan.label_key, pipeline.options)
  # One sink: Beam's DaskRunner computes only the last transform it visits and what it
  # depends on (apache_beam/runners/dask/dask_runner.py, run_pipeline, Beam 2.74.0:
  # "we can get away with computing just the last value"). With two sinks the shards
  # and summary.json were never written there (MissingOutputError).
  _ = (summary, stats) | "AllWritten" >> beam.Flatten()


def drops_finish_bundle_outputs(pipeline: beam.Pipeline) -> bool:
  """True on Beam's DaskRunner, which collects a bundle's outputs before it calls
  finish_bundle (apache_beam/runners/dask/transform_evaluator.py, apply_dofn_to_bundle):
  there, every staged chunk is flushed as it comes instead of once per bundle."""
  return any(type(pipeline.runner).__name__ == "DaskRunner" or
             c.__name__ == "DaskRunner" for c in type(pipeline.runner).__mro__)


def run(pipeline: beam.Pipeline, config: ExampleGenConfig, plan: sources.SourcePlan,
        uri: str, splits: Optional[partition.OutputSplits] = None) -> write.IngestSummary:
  """Runs the ingest into ``uri`` (all splits or nothing) and returns what was written.

  ``splits`` defaults to the config's ratio shorthand (partition.shorthand_splits).

  Raises:
    sources.BadInputError: the source has bad rows (policy "fail") or no rows at all.
    verify.CorruptRecordError: ``config.verify_output`` is on and a record read back
      fails a check.
    write.MissingOutputError: the runner succeeded but its files are not at ``uri``
      (workers on other machines wrote to their own disks).
    Exception: whatever the runner raised; ``uri`` then has no Split-* directories.
  """
  if splits is None:
    splits = partition.shorthand_splits(config.split_ratios, config.split_key)
  with write.staged_output(uri) as staging:
    build(pipeline, config, plan, staging, splits)
    result = None
    try:
      result = pipeline.run()
      state = result.wait_until_finish()
    except Exception as e:  # pylint: disable=broad-except
      message = bad_input_message(e)
      if message is None:
        raise
      raise sources.BadInputError(message) from e
    finally:
      _close_client(result)
    if state is not None and state != PipelineState.DONE:
      raise RuntimeError(f"PartitionedExampleGen's Beam pipeline ended in state {state}; "
                         f"nothing was written to {uri}")
    log_metrics(result)
    write.check_staged(staging, splits.names, config.num_shards)
    summary = write.read_summary(staging, splits.names)
    summary = dataclasses.replace(summary, split_stats=split_stats.read(staging))
    if summary.total_rows == 0:
      raise sources.BadInputError(
          f"source {plan.source!r} has no data rows ({summary.skipped_rows} bad rows "
          f"skipped); nothing was written to {uri}")
    if config.verify_output:
      verify.verify_output(staging, summary.row_counts, splits.names)
      logging.info("PartitionedExampleGen: verified every record of %d rows",
                   summary.total_rows)
  return summary


def _close_client(result) -> None:
  """Closes the Dask client DaskRunner opened for this run (it leaves it open)."""
  client = getattr(result, "client", None)
  if client is not None:
    client.close()


_BAD_INPUT = re.compile(r"BadInputError: (.+)")


def bad_input_message(error: Exception) -> Optional[str]:
  """The BadInputError message inside a runner's error, if any.

  The in-memory DirectRunner re-raises a DoFn's BadInputError as is; the multi-process
  and portable runners wrap it in a RuntimeError carrying the worker's traceback text.
  """
  if isinstance(error, sources.BadInputError):
    return None  # Already clear; re-raised as is.
  match = _BAD_INPUT.search(str(error))
  return match.group(1).strip() if match else None


def log_metrics(result) -> Optional[dict]:
  """Logs the ingest's Beam counters (rows read, parsed, skipped, written per split)."""
  try:
    counters = result.metrics().query(
        MetricsFilter().with_namespace(sources.METRICS_NAMESPACE))["counters"]
  except Exception as e:  # pylint: disable=broad-except
    logging.info("PartitionedExampleGen: Beam metrics unavailable on this runner (%s)", e)
    return None
  values = {}
  for counter in counters:
    value = counter.committed if counter.committed is not None else counter.attempted
    name = counter.key.metric.name
    values[name] = values.get(name, 0) + (value or 0)
  logging.info("PartitionedExampleGen stage counts: %s",
               ", ".join(f"{k}={v}" for k, v in sorted(values.items())))
  return values
