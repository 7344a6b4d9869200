"""First contact (issue 31): the console of `tfx-parallel run` as a user sees it, for the
mistakes and data a new user brings. Per case: the line that must appear, and the lines
that must not. Two runs of the CLI cover cases 1-5 and 8 (shared fixtures):

* ``mistakes``: a CSV with real-world headers and a string column, a user module whose
  layout rule matches nothing, ``--mesh 4x4`` on this machine's cores. It must stop at
  the trainer's pre-flight check.
* ``auto``: the same CSV, ``--layout auto`` and no memory flag. It must train.

Case 6 (a bad row) is test_pipeline_console.py's example_gen case; case 7 and the README
are tests/test_readme.py. The literal ``tfx-parallel run --layout auto`` is the last test.
"""
import os
import random
import re
import textwrap

import pytest

from tfx_parallel.components.distributed_trainer.plan import layout_choice
from test_pipeline_console import _cli, _command, _on_a_terminal

HEADER = ["trip miles", "fare ($)", "Température", "payment_type", "tips"]

BAD_RULES_MODULE = textwrap.dedent('''
    import tensorflow as tf
    import tf_keras

    def build_model(spec):
      inputs = {f.name: tf_keras.Input((1,), name=f.name,
                                       dtype="float32" if f.dtype == "float32" else "int64")
                for f in spec.features}
      parts = [tf_keras.layers.Flatten()(tf_keras.layers.Embedding(f.num_ids, 4)(inputs[f.name]))
               if f.is_string else tf.cast(inputs[f.name], "float32") for f in spec.features]
      h = tf_keras.layers.Dense(8, activation="relu", name="hidden_1")(
          tf_keras.layers.Concatenate()(parts))
      return tf_keras.Model(inputs, tf_keras.layers.Dense(spec.output_units)(h))

    def layout_rules(spec):
      return {".*_deep_embedding/embeddings": (None, "model")}
''')


def write_odd_csv(path, rows=300):
  """Headers with a space, '$' and parentheses, a non-ASCII letter; a string column."""
  rng = random.Random(0)
  lines = [",".join(HEADER)]
  for _ in range(rows):
    miles, temp = rng.random() * 10, rng.random() * 30
    fare = 3 + 2 * miles + rng.random()
    pay = rng.choice(["Cash", "Credit Card", "No Charge"])
    lines.append(f"{miles:.3f},{fare:.3f},{temp:.2f},{pay},"
                 f"{(fare * 0.2 if pay != 'Cash' else 0):.3f}")
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("first_contact")
  module = root / "bad_rules.py"
  module.write_text(BAD_RULES_MODULE)
  return root, write_odd_csv(root / "odd headers.csv"), str(module)


@pytest.fixture(scope="module")
def mistakes(data):
  root, csv, module = data
  return _cli(root / "home_mistakes", "--data", csv, "--label", "tips", "--module-file", module,
              "--mesh", "4x4", "--epochs", "1")


@pytest.fixture(scope="module")
def auto(data):
  root, csv, _ = data
  return _cli(root / "home_auto", "--data", csv, "--label", "tips", "--layout", "auto",
              "--epochs", "1")


def _lines(proc):
  return (proc.stdout + proc.stderr).splitlines()


@pytest.mark.slow
def test_case1_a_rule_that_matches_nothing_fails_before_training_in_one_line(mistakes):
  assert mistakes.returncode == 2, mistakes.stdout[-3000:] + mistakes.stderr[-3000:]
  errors = [l for l in mistakes.stderr.splitlines() if l.startswith("tfx-parallel: ")]
  assert len(errors) == 1 and re.fullmatch(
      r"tfx-parallel: invalid config: trainer\.module_file: module '.*bad_rules\.py': layout "
      r"rule '\.\*_deep_embedding/embeddings': matches no variable \(rules are searched in "
      r"the path, re\.search\)\. Variables: \['embedding/embeddings', 'hidden_1/kernel', .*\]",
      errors[0]), errors
  console = mistakes.stdout + mistakes.stderr
  for absent in ("Rerun to resume", "rerun to resume", "Traceback", "Execution 2 failed",
                 "[trainer] model "):  # No training process was started (it prints its model first).
    assert absent not in console, absent


@pytest.mark.slow
def test_case2_string_columns_are_told_as_categorical_features(mistakes):
  # One line for all string columns, and no absl WARNING per column (issue 47).
  line = [l for l in _lines(mistakes) if "'payment_type'" in l and "categorical" in l]
  assert line == ["[example_gen] string columns, used as categorical features (ids from "
                  "their vocabulary): 'payment_type'"], line
  assert "WARNING:absl:PartitionedExampleGen: column 'payment_type'" not in mistakes.stderr
  assert "NOT a numeric feature" not in mistakes.stderr
  assert "not in feature_keys" not in mistakes.stderr


@pytest.mark.slow
def test_case4_more_logical_devices_than_cores_is_one_warning_line(mistakes):
  cores = layout_choice.cpu_cores()
  if cores >= 16:
    pytest.skip(f"{cores} cores run a 4x4 mesh without oversubscription")
  warnings = [l for l in mistakes.stdout.splitlines() if "logical CPU devices on" in l]
  assert warnings == [
      f"[trainer] WARNING: mesh 4x4 runs 16 logical CPU devices on {cores} CPU core(s): they "
      f"take turns on the cores, so training is slower, not faster; at most {cores} fit "
      f"this machine"]


@pytest.mark.slow
def test_case3_auto_plans_with_the_host_memory_and_says_so(auto):
  assert auto.returncode == 0, auto.stdout[-3000:] + auto.stderr[-3000:]
  line, = [l for l in auto.stdout.splitlines() if l.startswith("[trainer] layout auto")]
  assert re.fullmatch(
      r"\[trainer\] layout auto on 2 logical CPU device\(s\) of [\d.]+ [KMGT]iB: .* \(.*; "
      r"planned with [\d.]+ [KMGT]iB per device: the [\d.]+ [KMGT]iB of available host "
      r"memory shared by 2 logical CPU device\(s\)\)", line), line
  assert "device_memory" not in auto.stdout + auto.stderr


@pytest.mark.slow
def test_case5_odd_headers_train_without_node_name_warnings(auto):
  console = auto.stdout + auto.stderr
  assert "is not a valid node name" not in console
  model_line, = [l for l in auto.stdout.splitlines() if l.startswith("[trainer] model ")]
  assert ("features trip miles:float32, fare ($):float32, Température:float32, "
          "payment_type:string(vocab 3)") in model_line
  # Case 8: the built-in model by its config name, not its module path.
  assert model_line.startswith("[trainer] model mlp (built-in): task regression")
  assert "tfx_parallel.components.distributed_trainer.models" not in console
  log = re.search(r"^log +(\S+)", auto.stdout, re.M).group(1)
  with open(log if os.path.isabs(log) else os.path.join(os.getcwd(), log),
            encoding="utf-8") as f:
    assert "is not a valid node name" in f.read()  # Off the console, not lost.


@pytest.mark.slow
def test_layout_auto_needs_no_other_flag(tmp_path):
  """`tfx-parallel run --layout auto`, literally (the defaults: synthetic data, 5 epochs)."""
  code, lines = _on_a_terminal(_command() + ["run", "--layout", "auto"], cwd=str(tmp_path))
  assert code == 0, "\n".join(lines)
  assert any(l.startswith("[trainer] layout auto on 2 logical CPU device(s) of ") and
             "of available host memory shared by 2" in l for l in lines), "\n".join(lines)
  assert [l for l in lines if l.startswith("blessed ")]
