"""A step that needs one split gets an artifact holding only that split (KFP only).

The open-source KFP launcher downloads every input artifact in full, object by object,
before the step's command starts (kubeflow/pipelines ``backend/src/v2/component/
launcher_v2.go`` master:927-1004 ``downloadArtifacts``, with the upstream comment "TODO:
Selectively copy artifacts for which .path was actually specified on the command line";
only a URI of an unknown scheme is skipped). So what a step downloads is decided by what
is wired to it as an input artifact. The ConvergenceEvaluator reads one split (its
config's ``split``, "eval" by default), yet with the Examples wired to it, it downloaded
every split: 1 GB of Examples for 0.21 GB of eval split (benchmarks/RESULTS.md).

Compiled for KFP, the ExampleGen task therefore has a second output, ``<split>_examples``
(type Examples, ``split_names`` ``["<split>"]``, the other custom properties of
``examples``: label key, true weights...), and the evaluator's ``examples`` input is that
output. The step's entry point makes it after TFX's executor has written ``examples``
(:func:`make`): it copies ``Split-<split>`` and records the metadata. ML Metadata then
shows both artifacts as outputs of the one ExampleGen execution, and the evaluator's
execution with the split artifact as its input, so lineage still says which data the
evaluator read. Cost: the split is stored (and uploaded) twice. The local pipeline
(LocalDagRunner) is not changed: stock components on either side see TFX's own wiring.

The flag ``--split_output KEY=SOURCE:SPLIT`` on the producer's args names the output to
make; the entry point keeps KEY out of what TFX sees (TFX's executor does not declare it).

**A trainer whose replicas read the Examples themselves** (the trainer's container runs
with remote artifact paths (``TFX_PARALLEL_TFJOB_IMAGE`` set): a TFJob or TrainJob whose pods read the
remote URIs) needs none of the files in its own pod, yet the launcher would download them
all (every input artifact of a known scheme: ``launcher_v2.go`` 2.17.0:942-1000; the one
skip, 2.17's ``_kfp_workspace`` flag, is a metadata field the driver sets only for
workspace artifacts, 2.17.0:950-955). No wiring the real driver resolves avoids that:
an input artifact is downloaded, a parameter cannot carry another task's artifact. So its
``examples`` input is ``examples_ref`` (flag ``--ref_output KEY=SOURCE``), an artifact of
its own type :data:`REF_TYPE` (``tfx_parallel.ExamplesRef``: not ``tfx.Examples``, so no
stock consumer takes it for data and a run has one Examples artifact per set of files),
output by the same ExampleGen execution. It holds one small file ``FILES_AT`` and
records the Examples' URI (:data:`REF_URI`), the Examples' type (:data:`REF_TARGET_TYPE`)
and their custom properties. The consumer's input is declared with the same type
(KFP's driver checks no types, ``driver/resolve.go`` 2.17.0:543-566, but a package whose
wiring and declarations disagree is refused by kubeflow/validate_package.py).

The Examples' ML Metadata id cannot be known in the ExampleGen pod: the launcher records
output artifacts only after the command ends (``launcher_v2.go`` 2.17.0:178-260
``Execute``). The consumer's entry point resolves it (:func:`link_target`): it reads
the reference's producing execution from ML Metadata (``METADATA_GRPC_SERVICE_HOST`` /
``_PORT``, which executor containers take from ``metadata-grpc-configmap``, an optional
``envFrom``: ``argocompiler/container.go`` 2.5.0:437, 2.17.0:566), takes the output of that execution
at the recorded URI, records its id on the reference (:data:`REF_TARGET_ID`), and adds an
INPUT event from its own execution to the Examples (found by ``KFP_POD_NAME``, which the
launcher writes on it as ``pod_name`` before the command runs: ``launcher_v2.go``
2.5.0:300-316, 2.17.0:355-371). The trainer's lineage then reaches the Examples
themselves, and TFX's executor gets the Examples' id, URI and type (:func:`dereference`).
"""
import json
import logging
import os
import shutil
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

FLAG = "--split_output"
REF_FLAG = "--ref_output"
REF_URI = "tfx_parallel_files_at"  # The referenced artifact's URI (custom property).
REF_FILE = "FILES_AT"  # The one file of a reference artifact: the same URI.
REF_TARGET_TYPE = "tfx_parallel_target_type"  # The referenced artifact's type (JSON).
REF_TARGET_ID = "tfx_parallel_target_id"  # Its ML Metadata id, once a consumer resolved it.
REF_TITLE = "tfx_parallel.ExamplesRef"
# As TFX writes its types (an instanceSchema with a title): KFP's launcher names the ML
# Metadata type by that title (metadata/client.go 2.17.0:1199-1211 SchemaToArtifactType).
REF_TYPE = {"instanceSchema": f"title: {REF_TITLE}\ntype: object\n"}
SPLIT_NAMES = "split_names"  # tfx/types/standard_artifacts.py Examples.PROPERTIES.


class SplitOutputError(ValueError):
  """A split output cannot be made; the message names the output and the split."""


def output_key(split: str) -> str:
  """The producer's output key for the artifact holding only `split`."""
  return f"{split}_examples"


def _add_flag(container: Dict[str, Any], flag: str, value: str) -> None:
  """Adds ``flag value`` to the container's args before ``--placement`` and the Beam args
  (which stay last)."""
  args = list(container.get("args", []))
  at = args.index("--placement") if "--placement" in args else len(args)
  container["args"] = args[:at] + [flag, value] + args[at:]


def _wire_to_new_output(spec: Dict[str, Any], consumer: str, input_key: str, key_of,
                        flag: str, value_of, artifact_type: Optional[Mapping[str, Any]] = None
                        ) -> Tuple[str, str, str]:
  """Gives the producer of `consumer`'s input `input_key` an output ``key_of(source
  key)`` of the same type or `artifact_type` (once, with ``flag value_of(key, source
  key)`` on its args) and wires the input to it, declared with that type. Returns
  (producer, source key, new key)."""
  tasks = spec["root"]["dag"]["tasks"]
  if consumer not in tasks:
    raise SplitOutputError(f"the pipeline has no task {consumer!r}")
  source = tasks[consumer].get("inputs", {}).get("artifacts", {}).get(input_key, {})
  upstream = source.get("taskOutputArtifact")
  if upstream is None:
    raise SplitOutputError(f"task {consumer!r} input {input_key!r} is not another "
                           f"task's output: {sorted(source)}")
  producer, source_key = upstream["producerTask"], upstream["outputArtifactKey"]
  component = spec["components"][tasks[producer]["componentRef"]["name"]]
  outputs = component["outputDefinitions"]["artifacts"]
  key = key_of(source_key)
  if key not in outputs:
    outputs[key] = json.loads(json.dumps(outputs[source_key]))
    if artifact_type is not None:
      outputs[key]["artifactType"] = dict(artifact_type)
    container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    _add_flag(container, flag, value_of(key, source_key))
  upstream["outputArtifactKey"] = key
  declared = spec["components"][tasks[consumer]["componentRef"]["name"]].get(
      "inputDefinitions", {}).get("artifacts", {}).get(input_key)
  if declared is not None:
    declared["artifactType"] = json.loads(json.dumps(outputs[key]["artifactType"]))
  return producer, source_key, key


def rewire(spec: Dict[str, Any], consumers: Mapping[str, Tuple[str, str]]) -> List[str]:
  """Wires each consumer task's Examples input to a one-split output of its producer.

  Args:
    spec: PipelineSpec (JSON dict), changed in place: the producer component gets the
      output definition, its executor the ``--split_output`` flag, the consumer task its
      input from the new output.
    consumers: {consumer task: (input key, split)}.

  Returns:
    One note per rewired input, for the person compiling.
  """
  notes = []
  for consumer, (input_key, split) in sorted(consumers.items()):
    producer, source_key, key = _wire_to_new_output(
        spec, consumer, input_key, lambda _, s=split: output_key(s), FLAG,
        lambda k, src, s=split: f"{k}={src}:{s}")
    notes.append(f"{consumer}.{input_key} reads {producer}.{key} (only Split-{split}), "
                 f"so its launcher downloads one split, not all of {producer}.{source_key}")
  return notes


def rewire_refs(spec: Dict[str, Any], consumers: Mapping[str, str]) -> List[str]:
  """Wires each consumer task's input (`consumers`: {task: input key}) to a reference
  output ``<source key>_ref`` of its producer (see the module docstring). Returns notes."""
  notes = []
  for consumer, input_key in sorted(consumers.items()):
    producer, _, key = _wire_to_new_output(
        spec, consumer, input_key, lambda src: f"{src}_ref", REF_FLAG,
        lambda k, src: f"{k}={src}", REF_TYPE)
    notes.append(f"{consumer}.{input_key} reads {producer}.{key}, a reference: its "
                 f"replicas read the files at their remote URI, the pod downloads none")
  return notes


def parse_refs(values: Sequence[str]) -> Dict[str, str]:
  """{output key: source output key} from ``KEY=SOURCE`` values."""
  result = {}
  for value in values:
    key, _, source = value.partition("=")
    if not (key and source):
      raise SplitOutputError(f"{REF_FLAG} must be KEY=SOURCE. Received: {value!r}")
    result[key] = source
  return result


def make_refs(refs: Mapping[str, str], executor_output: Dict[str, Any],
              step_paths: Mapping[str, str], uris: Mapping[str, str],
              types: Mapping[str, Any]) -> None:
  """Adds every reference output to `executor_output` (in place): the source's
  metadata plus :data:`REF_URI` and :data:`REF_TARGET_TYPE`, and the file
  :data:`REF_FILE` at its step path.

  `uris`: {output key: the recorded (remote) URI}, the source's included; `types`:
  {output key: its ArtifactTypeSchema in the ExecutorInput}.
  """
  for key, source in sorted(refs.items()):
    if key not in uris or source not in uris:
      raise SplitOutputError(f"{REF_FLAG} {key}={source}: the ExecutorInput has no output "
                             f"{key if key not in uris else source!r}; recompile the "
                             "package with `tfx-parallel compile`")
    produced = executor_output.get("artifacts", {}).get(source, {}).get("artifacts", [])
    if not produced:
      raise SplitOutputError(f"{REF_FLAG} {key}: the executor wrote no output {source!r}")
    metadata = json.loads(json.dumps(produced[0].get("metadata") or {}))
    metadata[REF_URI] = uris[source]
    if not types.get(source):
      raise SplitOutputError(f"{REF_FLAG} {key}: output {source!r} has no type in the "
                             "ExecutorInput")
    metadata[REF_TARGET_TYPE] = json.dumps(types[source], sort_keys=True)
    path = step_paths[key]
    if "://" in path:
      from apache_beam.io.filesystems import FileSystems  # pylint: disable=g-import-not-at-top
      with FileSystems.create(path.rstrip("/") + "/" + REF_FILE) as f:
        f.write(uris[source].encode())
    else:
      os.makedirs(path, exist_ok=True)
      with open(os.path.join(path, REF_FILE), "w") as f:
        f.write(uris[source])
    executor_output.setdefault("artifacts", {})[key] = {
        "artifacts": [{"uri": uris[key], "metadata": metadata}]}


def dereference(artifact: Dict[str, Any], key: str, remote_paths: bool,
                target_id: Optional[int] = None) -> None:
  """Points an input artifact that is a reference at the files it names, with their
  type and (where a consumer resolved it, `target_id`) their ML Metadata id, in place;
  `remote_paths`: the step reads remote URIs (else it has only what was downloaded)."""
  metadata = artifact.get("metadata") or {}
  target = metadata.get(REF_URI)
  if not target:
    return
  if not remote_paths:
    raise SplitOutputError(
        f"input artifact {key!r} is a reference to {target}: only a step with remote "
        f"artifact paths (TFX_PARALLEL_TFJOB_IMAGE set) reads it; recompile the "
        f"package with `tfx-parallel compile`")
  logging.info("Input %s: the files at %s (the pod downloaded only the reference)", key,
               target)
  artifact["uri"] = target
  if metadata.get(REF_TARGET_TYPE):  # Packages before the type have none: kept as declared.
    artifact["type"] = json.loads(metadata[REF_TARGET_TYPE])
  if target_id is not None:
    artifact["name"] = str(target_id)
  for name in (REF_URI, REF_TARGET_TYPE, REF_TARGET_ID):
    metadata.pop(name, None)


def _events(store, artifact_id: int, kind) -> List[Any]:
  return [e for e in store.get_events_by_artifact_ids([artifact_id]) if e.type == kind]


def link_target(store, ref_id: int, input_key: str, pod_name: str) -> Optional[int]:
  """Resolves reference artifact `ref_id` to the ML Metadata id of the artifact it names
  and records that: :data:`REF_TARGET_ID` on the reference, and an INPUT event (path
  `input_key`, as KFP names input events) from the execution that runs in `pod_name` to
  the target. Returns the target's id; None where the reference names no URI or its
  producer has no output at that URI (both logged).

  `store`: an ``ml_metadata`` MetadataStore (KFP's metadata-grpc-service in a pod).
  """
  from ml_metadata.proto import metadata_store_pb2 as mlmd  # pylint: disable=g-import-not-at-top
  [ref] = store.get_artifacts_by_id([ref_id])
  target_uri = ref.custom_properties[REF_URI].string_value if (
      REF_URI in ref.custom_properties) else ""
  made = _events(store, ref_id, mlmd.Event.OUTPUT)
  if not target_uri or not made:
    logging.warning("Artifact %d names no referenced URI or has no producer in ML Metadata; "
                    "its consumer's lineage stops at the reference", ref_id)
    return None
  outputs = [e.artifact_id for e in store.get_events_by_execution_ids([made[0].execution_id])
             if e.type == mlmd.Event.OUTPUT and e.artifact_id != ref_id]
  targets = [a for a in store.get_artifacts_by_id(outputs) if a.uri == target_uri]
  if not targets:
    logging.warning("Execution %d has no output at %s (artifact %d's reference); its "
                    "consumer's lineage stops at the reference", made[0].execution_id,
                    target_uri, ref_id)
    return None
  target_id = targets[0].id
  recorded = ref.custom_properties.get(REF_TARGET_ID)
  if recorded is None or recorded.int_value != target_id:
    ref.custom_properties[REF_TARGET_ID].int_value = target_id
    store.put_artifacts([ref])
  consumers = [e.execution_id for e in _events(store, ref_id, mlmd.Event.INPUT)]
  mine = [x for x in store.get_executions_by_id(consumers)
          if x.custom_properties["pod_name"].string_value == pod_name] if pod_name else []
  if not mine:
    logging.warning("No execution reading artifact %d runs in pod %r; the reference "
                    "records Examples %d, the lineage edge is not added", ref_id, pod_name,
                    target_id)
    return target_id
  event = mlmd.Event(artifact_id=target_id, execution_id=mine[0].id, type=mlmd.Event.INPUT)
  event.path.steps.add().key = input_key
  if not any(e.execution_id == mine[0].id
             for e in _events(store, target_id, mlmd.Event.INPUT)):  # A retry adds none.
    store.put_events([event])
  logging.info("Input %s: reference %d resolves to Examples %d (ML Metadata); lineage "
               "from execution %d", input_key, ref_id, target_id, mine[0].id)
  return target_id


def parse_flags(values: Sequence[str]) -> Dict[str, Tuple[str, str]]:
  """{output key: (source output key, split)} from ``KEY=SOURCE:SPLIT`` values."""
  result = {}
  for value in values:
    key, _, rest = value.partition("=")
    source, _, split = rest.partition(":")
    if not (key and source and split):
      raise SplitOutputError(f"{FLAG} must be KEY=SOURCE:SPLIT. Received: {value!r}")
    result[key] = (source, split)
  return result


def _copy_tree(source: str, target: str) -> None:
  """Copies the files of directory `source` to `target` (local paths or, for an
  out-of-pod runner or remote paths, URIs Beam's filesystems write)."""
  if "://" not in source and "://" not in target:
    shutil.copytree(source, target)
    return
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=g-import-not-at-top
  matched = FileSystems.match([source.rstrip("/") + "/**"])[0].metadata_list
  if not matched:
    raise SplitOutputError(f"{source} has no files")
  prefix = source.rstrip("/") + "/"
  sources = [m.path for m in matched]
  targets = [target.rstrip("/") + "/" + p[len(prefix):] for p in sources]
  FileSystems.copy(sources, targets)


def make(key: str, source: str, split: str, output: Mapping[str, Any],
         source_path: str, target_path: str, target_uri: str) -> Dict[str, Any]:
  """Writes output `key` (only ``Split-<split>`` of output `source`) and returns its
  ExecutorOutput entry.

  Args:
    key, source, split: from the ``--split_output`` flag.
    output: the ExecutorOutput TFX's entry point wrote (step paths).
    source_path: the step's path of `source`'s files.
    target_path: the step's path for `key`'s files.
    target_uri: the URI `key` is recorded with (the ExecutorInput's).
  """
  produced = output.get("artifacts", {}).get(source, {}).get("artifacts", [])
  if not produced:
    raise SplitOutputError(f"{FLAG} {key}: the executor wrote no output {source!r}")
  metadata = json.loads(json.dumps(produced[0].get("metadata") or {}))
  names = json.loads(metadata.get(SPLIT_NAMES) or "[]")
  if split not in names:
    raise SplitOutputError(f"{FLAG} {key}: output {source!r} has no split {split!r} "
                           f"(its splits: {names}); set the evaluator's split "
                           f"(pipeline.evaluator.split) to one of them")
  split_dir = f"Split-{split}"
  _copy_tree(os.path.join(source_path, split_dir) if "://" not in source_path
             else source_path.rstrip("/") + "/" + split_dir,
             os.path.join(target_path, split_dir) if "://" not in target_path
             else target_path.rstrip("/") + "/" + split_dir)
  metadata[SPLIT_NAMES] = json.dumps([split])
  logging.info("Output %s: %s of %s", key, split_dir, source)
  entry = {"uri": target_uri, "metadata": metadata}
  return {"artifacts": [entry]}


def make_all(flags: Mapping[str, Tuple[str, str]], executor_output: Dict[str, Any],
             step_paths: Mapping[str, str], uris: Mapping[str, str]) -> None:
  """Adds every flagged output to `executor_output` (in place).

  `step_paths` and `uris`: {output key: the step's path / the recorded URI}.
  """
  for key, (source, split) in sorted(flags.items()):
    if key not in uris:
      raise SplitOutputError(f"{FLAG} {key}: the ExecutorInput has no output {key!r}; "
                             "recompile the package with `tfx-parallel compile`")
    executor_output.setdefault("artifacts", {})[key] = make(
        key, source, split, executor_output, step_paths[source], step_paths[key],
        uris[key])

