"""Issue #39 item 1: on a mesh no boundary of a run (build, eval, train, checkpoint,
restore, export) puts a whole copy of a split variable on any device.

tests/mesh_boundary_cases.py runs the boundaries of mesh_engine.MeshEngine on a 2x2 mesh
of logical CPU devices and records every tensor the DTensor API creates on the mesh
(layout, global shape, each device's block and device); here the rule is asserted on
the records, and a negative control (a replicated relayout of a split kernel, what the
former gather did) shows the check catches a whole copy.

A run's first checkpoint and every restore are TensorFlow's DTensor-aware save and
restore of the DVariables themselves, inside TensorFlow, where no recorder sees their
tensors; later saves stream the devices' blocks through host memory
(``MeshTrainer.host_blocks``, which reads blocks and creates no mesh tensor). So the
checkpoint is checked by what it saves (the mesh's own variables, each in the layout it
trains in, one block per device; the streamed file equal to DTensor's) and by what it
costs (``mesh_boundary_cases.py memory``: the peak RSS the saves and a restore add on a
mesh 1x4, against the largest split variable, with a whole-copy control measured the
same way)."""
import functools
import os

import pytest

import trainer_util as tu

BOUNDARIES = ("build", "eval", "train", "checkpoint", "restore", "export")


@functools.lru_cache(maxsize=None)
def _run() -> dict:
  return tu.run_cases("mesh_boundary_cases.py")


def whole_copies(records, split_shapes):
  """Records that hold a split variable's global shape whole on a device: a layout that
  splits none of its dimensions, or (eager) a device block of the global shape."""
  bad = []
  for r in records:
    if r["shape"] not in split_shapes:
      continue
    if all(s == "unsharded" for s in r["specs"]):
      bad.append(r)
    elif any(shape == r["shape"] for shape, _ in r.get("components", [])):
      bad.append(r)
  return bad


@pytest.mark.slow
def test_no_boundary_puts_a_whole_split_variable_on_a_device():
  r = _run()
  split_shapes = list(r["split"].values())
  assert len(split_shapes) >= 2, r["split"]  # Both hidden kernels (a Megatron pair) split.
  records = [x for x in r["records"] if x["boundary"] not in ("control", "garble")]
  seen = {x["boundary"] for x in records}
  # Build places every variable, eval and train pack their batches onto the mesh; the
  # checkpoint and restore are TensorFlow's (no mesh tensor of ours), export only reads
  # blocks.
  assert {"build", "eval", "train"} <= seen, seen
  assert seen <= set(BOUNDARIES) - {"checkpoint", "restore"}, seen
  assert whole_copies(records, split_shapes) == []
  # Every split variable was created in blocks, one per device.
  placed = [x for x in records if x["boundary"] == "build" and x["shape"] in split_shapes]
  assert len(placed) >= len(split_shapes), placed
  for x in placed:
    assert len(x["components"]) == 4
    assert len({c[1] for c in x["components"]}) == 4  # four distinct devices
    assert all(c[0] != x["shape"] for c in x["components"])


@pytest.mark.slow
def test_an_early_stops_snapshot_keeps_blocks_and_the_export_writes_them_back():
  """EarlyStop's best weights on a mesh (MeshEngine.snapshot) are the devices' distinct
  blocks on the host: no entry of a split variable has its whole shape; the export
  writes them into a plain model (MeshEngine.copy_weights_to), each block into its
  slice, releasing each variable's blocks as it goes."""
  r = _run()
  assert r["split_weights"], r["split"]
  for name in r["split_weights"]:
    whole = r["weight_shapes"][name]
    blocks = r["snapshot_shapes"][name]
    assert len(blocks) == 2 and whole not in blocks, (name, whole, blocks)  # 2x2: M = 2.
  assert r["snapshot_equal"] and r["snapshot_released"]
  assert r["export_equal"]


@pytest.mark.slow
def test_a_checkpoint_saves_and_restores_the_mesh_variables_in_their_blocks():
  """No host copy: the checkpoint holds the mesh's own model and optimizer variables,
  each on the mesh in the layout it trains in, and after the restore (of garbled
  values) every variable holds its blocks again, with the values saved."""
  r = _run()
  assert r["saved_are_the_mesh_variables"]
  saved = r["saved_layouts"]
  assert len(saved) > 2 * len(r["split"])  # model, Adam's m and v, the step counter
  assert all(x["mesh"] for x in saved.values())
  split = [x for x in saved.values() if any(s != "unsharded" for s in x["specs"])]
  # Each split kernel and its two Adam slots, on 4 devices, each a block.
  assert len(split) >= 3 * len(r["split"]), saved
  assert all(len(x["blocks"]) == 4 for x in split)
  whole = {tuple(v) for v in r["split"].values()}
  assert not [x for x in split if any(tuple(b) in whole for b in x["blocks"])], split
  assert r["restored_blocks"] == {k: x["blocks"] for k, x in saved.items()}
  assert r["restored_equal"]


@pytest.mark.slow
def test_a_later_save_streams_the_same_checkpoint_the_first_wrote():
  """The run's second save streams every variable through host memory into the keys
  and object graph of the first (DTensor's): every tensor equal, and the restore above
  read the streamed one. (The object graph also names the root's save counter, so one
  entry more than the model's and optimizer's variables.)"""
  r = _run()
  assert r["streamed_entries"] >= r["state_count"], r["streamed_entries"]
  assert r["streamed_equal"] and r["latest_is_streamed"]


@functools.lru_cache(maxsize=None)
def _memory() -> dict:
  # A fixed mmap threshold: freed tensors go back to the system (glibc's threshold
  # otherwise grows to 32 MB, mallopt(3)), so each phase's own growth shows.
  env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
  return tu.run_cases("mesh_boundary_cases.py", "memory", "3072", env=env)


@pytest.mark.slow
def test_a_checkpoint_costs_less_than_a_whole_copy_of_a_split_variable_per_device():
  """Peak RSS added by the saves and a restore on a mesh 1x4 (Adam; state 109 MB,
  largest split kernel 36 MB). A host copy of the state (what a save did before) adds
  the whole state (3x the kernel; measured +216 MB); a restore that read each whole
  tensor on every device would add >= 4 of them. Both the first save (DTensor's,
  sharded) and a streamed one (a block at a time through host memory) stay under one
  kernel. The control, one kernel relayouted to replicated, adds at least 3 kernels:
  the measurement sees a whole copy per device."""
  r = _memory()
  largest = r["largest_mb"]
  assert r["state_mb"] > 2.5 * largest
  assert r["control_mb"] > 3 * largest, r
  assert r["first_save_mb"] < largest, r
  assert r["save_mb"] < largest, r
  assert r["restore_mb"] < 2.5 * largest, r


@pytest.mark.slow
def test_the_rule_catches_a_replicated_gather():
  """The negative control: the former ``_full`` (relayout to replicated) is flagged."""
  r = _run()
  control = [x for x in r["records"] if x["boundary"] == "control"]
  assert len(control) == 1
  assert whole_copies(control, list(r["split"].values())) == control


@pytest.mark.slow
def test_the_export_copy_lives_on_the_cpu_and_round_trips_exactly():
  r = _run()
  assert r["export_devices"] == ["/job:localhost/replica:0/task:0/device:CPU:0"]
  assert r["restored_equal"] and r["export_equal"]


@pytest.mark.slow
def test_eval_on_the_mesh_equals_the_exported_models_loss():
  """Eval runs on the sharded mesh model, a remainder batch padded to the batch axis and
  masked: the same mean loss as the plain exported model on the same 11 rows."""
  r = _run()
  assert r["mesh_eval"] == pytest.approx(r["plain_eval"], rel=1e-5)
