"""Issue #39 item 1: on a mesh no boundary of a run (build, eval, train, checkpoint,
restore, export) puts a whole copy of a split variable on any device.

tests/mesh_boundary_cases.py runs the boundaries of engines.MeshEngine on a 2x2 mesh
of logical CPU devices and records every tensor the DTensor API creates on the mesh
(layout, global shape, each device's block and device); here the rule is asserted on
the records, and a negative control (a replicated relayout of a split kernel, what the
former gather did) shows the check catches a whole copy."""
import functools

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
  records = [x for x in r["records"] if x["boundary"] != "control"]
  seen = {x["boundary"] for x in records}
  # Build places every variable, eval and train pack their batches onto the mesh, restore
  # writes every variable back (checkpoint and export only read blocks: no mesh tensor).
  assert {"build", "eval", "train", "restore"} <= seen, seen
  assert seen <= set(BOUNDARIES), seen
  assert whole_copies(records, split_shapes) == []
  # Every split variable was created and restored in blocks, one per device.
  for boundary in ("build", "restore"):
    placed = [x for x in records if x["boundary"] == boundary and x["shape"] in split_shapes]
    assert len(placed) >= len(split_shapes), (boundary, placed)
    for x in placed:
      assert len(x["components"]) == 4
      assert len({c[1] for c in x["components"]}) == 4  # four distinct devices
      assert all(c[0] != x["shape"] for c in x["components"])


@pytest.mark.slow
def test_the_rule_catches_a_replicated_gather():
  """The negative control: the former ``_full`` (relayout to replicated) is flagged."""
  r = _run()
  control = [x for x in r["records"] if x["boundary"] == "control"]
  assert len(control) == 1
  assert whole_copies(control, list(r["split"].values())) == control


@pytest.mark.slow
def test_host_copies_live_on_the_cpu_and_round_trip_exactly():
  r = _run()
  assert r["checkpoint_host_devices"] == ["/job:localhost/replica:0/task:0/device:CPU:0"]
  assert r["export_devices"] == ["/job:localhost/replica:0/task:0/device:CPU:0"]
  assert r["restored_equal"] and r["export_equal"]


@pytest.mark.slow
def test_eval_on_the_mesh_equals_the_exported_models_loss():
  """Eval runs on the sharded mesh model, a remainder batch padded to the batch axis and
  masked: the same mean loss as the plain exported model on the same 11 rows."""
  r = _run()
  assert r["mesh_eval"] == pytest.approx(r["plain_eval"], rel=1e-5)
