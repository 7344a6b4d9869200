"""mesh_axes.py: one VariableInfo, one MODEL_AXIS, and the one divisibility check of a
layout (issue #39 item 10), used by the layout rules, the built-in models' check and the
planner."""
import ast
import pathlib

import pytest

from tfx_parallel.components.distributed_trainer import mesh_axes
from tfx_parallel.components.distributed_trainer import sharding
from tfx_parallel.components.distributed_trainer.plan import layout_search

COMPONENTS = pathlib.Path(__file__).resolve().parent.parent / "components"


def test_undivided_names_the_first_split_dimension_the_axis_does_not_divide():
  assert mesh_axes.undivided((6, 4), (None, "model"), 2) is None
  assert mesh_axes.undivided((6, 3), (None, "model"), 2) == 1
  assert mesh_axes.undivided((5, 3), ("model", None), 5) is None
  assert mesh_axes.undivided((5, 3), (None, None), 4) is None  # Nothing split.
  assert mesh_axes.undivided_message("hidden/kernel", (6, 3), 1, 2) == (
      "dimension 1 of hidden/kernel [6, 3] has size 3, which the mesh's 'model' axis of 2 "
      "devices does not divide")


def test_the_rules_and_the_planner_share_one_variable_info_and_axis():
  assert sharding.VariableInfo is layout_search.VariableInfo is mesh_axes.VariableInfo
  assert sharding.MODEL_AXIS is layout_search.MODEL_AXIS is mesh_axes.MODEL_AXIS
  info = mesh_axes.VariableInfo("k", (6, 3), dtype_bytes=4, sharding=(None, "model"))
  assert (info.divisible_by(3), info.divisible_by(2)) == (True, False)
  assert info.bytes_per_device(3) == 6 * 3 * 4 // 3


def test_a_user_rule_and_the_planner_refuse_the_same_undivided_dimension():
  info = mesh_axes.VariableInfo("hidden/kernel", (6, 3))
  with pytest.raises(sharding.ShardingError,
                     match=r"^module 'm\.py': layout rule 'hidden/kernel' variable "
                           r"'hidden/kernel': dimension 1 of hidden/kernel \[6, 3\] has size 3, "
                           r"which the mesh's 'model' axis of 2 devices does not divide"):
    sharding.resolve({"hidden/kernel": (None, "model")}, [info], 2, "m.py")
  planned = mesh_axes.VariableInfo("hidden/kernel", (6, 3), sharding=(None, "model"))
  assert [m for _, m in layout_search._candidates([planned], 4, 8)] == [1, 1, 1]  # pylint: disable=protected-access


def test_nothing_else_defines_them_or_computes_a_split_remainder():
  """Only mesh_axes.py defines VariableInfo and MODEL_AXIS or takes a dimension modulo
  the model axis."""
  found = []
  for path in sorted(COMPONENTS.rglob("*.py")):
    if path.name == "mesh_axes.py":
      continue
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
      if isinstance(node, ast.ClassDef) and node.name == "VariableInfo":
        found.append(f"{path.name}: class VariableInfo")
      if isinstance(node, ast.Assign) and any(
          isinstance(t, ast.Name) and t.id == "MODEL_AXIS" for t in node.targets):
        found.append(f"{path.name}: MODEL_AXIS =")
      if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
          and isinstance(node.right, ast.Name) and node.right.id == "model_axis"):
        found.append(f"{path.name}:{node.lineno}: % model_axis")
  assert found == []
