"""The quiet console of `tfx-parallel run`: known noise to the log file, everything
else (errors above all) to the console; TF_USE_LEGACY_KERAS; no matplotlib.use."""
import io
import logging
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tfx_parallel.pipeline import console

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lines seen in `make run` before the quiet console (issue 16), shortened.
CUFFT = ("2026-12-03 07:13:12.273906: E external/local_xla/xla/stream_executor/cuda/"
         "cuda_fft.cc:479] Unable to register cuFFT factory: Attempting to register factory "
         "for plugin cuFFT when one has already been registered")
FUTURE = ("/x/.venv/lib/python3.10/site-packages/google/api_core/_python_version_support.py:"
          "246: FutureWarning: You are using a non-supported Python version (3.10.13).")
FUTURE_ECHO = "  warnings.warn(message, FutureWarning)"
PREDICATE = "WARNING:absl:ArtifactQuery.property_predicate is not supported."
COMPILED = ("WARNING:tensorflow:Compiled the loaded model, but the compiled metrics have yet "
            "to be built. `model.compile_metrics` will be empty until you train or evaluate "
            "the model.")
NODE_NAME = ("WARNING:tensorflow:`trip miles` is not a valid node name. Accepted names "
             "conform to Regex /re.compile('^[A-Za-z0-9.][A-Za-z0-9_.\\\\/>-]*$')/")
EXECUTION_FAILED = "ERROR:absl:Execution 2 failed."
# multi_worker's C++ lines (issue 38), as a local 2-worker run printed them.
COORDINATION = ("I0000 00:00:1796422408.758708   12052 coordination_service_agent.cc:303] "
                "Coordination agent has successfully connected.")
REFCOUNT = ("2026-12-04 22:13:46.104794: E tensorflow/core/framework/tensor.cc:911] Tensor "
            "RefCount not reliable if buf_ points to a SubBuffer.")
NOISE_LINES = [CUFFT, FUTURE, FUTURE_ECHO, PREDICATE, COMPILED, NODE_NAME, EXECUTION_FAILED,
               COORDINATION, REFCOUNT]
# Lines that must always reach the console.
REAL_LINES = [
    "Traceback (most recent call last):",
    '  File "/x/train.py", line 12, in <module>',
    "ValueError: label 'y' is missing in data.csv:301",
    "2026-12-03 07:13:12.1: E tensorflow/core/framework/op_kernel.cc:1816] OP_REQUIRES "
    "failed at strided_slice_op.cc:117 : INVALID_ARGUMENT: slice index 3 out of bounds",
    "/work/pipeline/cli.py:10: UserWarning: something the project should look at",
    "  an indented line after a kept line",
    "/x/site-packages/lib.py:3: RuntimeWarning: overflow encountered in exp",
    "Fatal Python error: Segmentation fault",
    "tfx-parallel: PartitionedExampleGen failed: BadInputError: ./bad.csv:7: column 'b': "
    "expected float, got 'oops' [while running 'ParseCsv/Parse']",
    "ERROR:absl:Execution 2 failed with an unexpected state",
]


def test_line_filter_drops_known_noise_and_keeps_everything_else():
  keep = console.LineFilter().keep
  lines = [NOISE_LINES[0], REAL_LINES[0], REAL_LINES[1], FUTURE, FUTURE_ECHO, REAL_LINES[2],
           PREDICATE, REAL_LINES[3], REAL_LINES[4], REAL_LINES[5], COMPILED, REAL_LINES[6],
           REAL_LINES[7], NODE_NAME, REAL_LINES[8], EXECUTION_FAILED, REAL_LINES[9]]
  kept = [line for line in lines if keep(line)]
  assert kept == REAL_LINES


def test_only_the_echo_line_right_after_a_dropped_warning_is_dropped():
  keep = console.LineFilter().keep
  assert not keep(FUTURE)
  assert keep("ValueError: not indented, so not the echo")
  assert keep("  indented, but the warning was two lines ago")


def test_filter_lines_copies_everything_to_the_log():
  text = "\n".join(NOISE_LINES + REAL_LINES) + "\n"
  source, out, log = io.BytesIO(text.encode() + b"\xff bytes that are not utf-8\n"), \
      io.BytesIO(), io.BytesIO()
  console.filter_lines(source, out, log)
  assert log.getvalue() == source.getvalue()
  assert out.getvalue().decode("utf-8", "replace").splitlines() == \
      REAL_LINES + ["\ufffd bytes that are not utf-8"]


def test_noise_log_filter_and_file_only():
  def record(msg, **extra):
    r = logging.LogRecord("absl", logging.WARNING, "x.py", 1, msg, None, None)
    r.__dict__.update(extra)
    return r
  assert not console.NoiseLogFilter().filter(record(PREDICATE.split(":", 2)[2]))
  assert not console.NoiseLogFilter().filter(record("Execution 3 failed."))
  assert console.NoiseLogFilter().filter(record("Execution 3 failed with an unexpected state"))
  assert not console.NoiseLogFilter().filter(record(NODE_NAME.split(":", 2)[2]))
  # Beam's logged copy of a DoFn's error (raised next, printed by the CLI as one line).
  beam = logging.LogRecord("apache_beam.runners.common", logging.ERROR, "common.py", 1609,
                           "data.csv:7: column 'b' [while running 'Parse']", None,
                           (ValueError, ValueError("x"), None))
  assert not console.NoiseLogFilter().filter(beam)
  beam.exc_info = None  # Not a copy of an exception: kept.
  assert console.NoiseLogFilter().filter(beam)
  assert not console.FileOnly().filter(record("traceback", file_only=True))
  assert console.FileOnly().filter(record("traceback"))


# A process that sets up the quiet console, writes noise and real lines to stderr from
# Python, from a logger, from a child process, then dies without cleaning up.
_CHILD = textwrap.dedent("""
    import logging, os, subprocess, sys, warnings
    from tfx_parallel.pipeline import console
    c = console.Console(sys.argv[1], "p", verbose=sys.argv[2] == "verbose")
    print("LOG", c.log_path, flush=True)
    sys.stderr.write({cufft!r} + "\\n")
    warnings.warn_explicit("You are using a non-supported Python version", FutureWarning,
                           "/x/site-packages/google/api_core/v.py", 246)
    logging.getLogger("absl").info("Component Trainer is running.")
    logging.getLogger("absl").warning("ArtifactQuery.property_predicate is not supported.")
    logging.getLogger("absl").error("Trainer ran out of disk.")
    logging.getLogger("absl").error("Execution 3 failed.")  # The CLI says it in its words.
    subprocess.run([sys.executable, "-c",
                    "import sys; sys.stderr.write({cufft!r} + '\\\\n' + 'child: real error\\\\n')"])
    sys.stderr.write("parent: last words before a hard exit\\n")
    sys.stderr.flush()
    os._exit(3)  # No close(), no atexit: the filter process must still flush.
    """).format(cufft=CUFFT)


def _run_child(tmp_path, mode):
  proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "home"), mode],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 3, proc.stderr
  log_path = proc.stdout.split("LOG ", 1)[1].split()[0]
  with open(log_path) as f:
    return proc.stderr, f.read(), log_path


def test_quiet_console_survives_a_hard_exit_and_logs_everything(tmp_path):
  err, log, log_path = _run_child(tmp_path, "quiet")
  assert re.fullmatch(re.escape(str(tmp_path / "home" / "logs")) + r"/p-\d{8}-\d{6}\.log",
                      log_path)
  assert err.splitlines() == ["ERROR:absl:Trainer ran out of disk.", "child: real error",
                              "parent: last words before a hard exit"]
  assert log.count("Unable to register cuFFT factory") == 2  # parent and child
  for text in ("FutureWarning: You are using a non-supported Python version",
               "INFO absl", "Component Trainer is running.", "property_predicate",
               "Execution 3 failed.", "child: real error", "parent: last words"):
    assert text in log, text


def test_verbose_console_filters_nothing(tmp_path):
  err, log, _ = _run_child(tmp_path, "verbose")
  for text in ("Unable to register cuFFT factory", "FutureWarning",
               "INFO:absl:Component Trainer is running.", "property_predicate",
               "Execution 3 failed.", "child: real error", "parent: last words"):
    assert text in err, text
  assert "Component Trainer is running." in log


# --- Global state: TF_USE_LEGACY_KERAS, matplotlib. --------------------------------------

# An entry point prepares the environment (importing a package no longer does), then
# starts a process that is an entry point too (the trainer's training process).
_PREPARE = "from tfx_parallel.components.common import tfenv; tfenv.prepare()"
_IMPORT = (f"import os, subprocess, sys; {_PREPARE}; "
           "print(os.environ['TF_USE_LEGACY_KERAS']); "
           f"subprocess.run([sys.executable, '-c', {_PREPARE!r}])")


@pytest.mark.parametrize("value,stdout,warns", [
    (None, "1", False), ("1", "1", False), ("true", "true", False), ("0", "0", True)])
def test_prepare_keeps_the_users_tf_use_legacy_keras(value, stdout, warns):
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_USE_LEGACY_KERAS", "TFX_PARALLEL_LEGACY_KERAS_WARNED")}
  if value is not None:
    env["TF_USE_LEGACY_KERAS"] = value
  proc = subprocess.run([sys.executable, "-c", _IMPORT], capture_output=True, text=True,
                        env=env, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.strip() == stdout
  lines = proc.stderr.splitlines()
  if warns:
    assert len(lines) == 1, lines  # once, not again in the child process
    assert re.match(r"tfx-parallel: TF_USE_LEGACY_KERAS='0' selects Keras 3, but TFX 1\.16",
                    lines[0])
  else:
    assert lines == []


def test_library_code_never_calls_matplotlib_use():
  found, scanned = [], 0
  for top in ("pipeline", "components", "kubeflow"):
    for root, _, files in os.walk(os.path.join(REPO, top)):
      for name in files:
        if not name.endswith(".py"):
          continue
        path = os.path.join(root, name)
        scanned += 1
        with open(path, encoding="utf-8") as f:
          if re.search(r"\b(matplotlib|mpl)\.use\(", f.read()):
            found.append(os.path.relpath(path, REPO))
  assert scanned > 40
  assert not found, found


# --- `tfx-parallel run` end to end: the lines a user sees. -------------------------------

# The project's own console lines: the CLI's, the components' start / end lines, the
# summary, and the trainer's (its executor prints "[trainer] ...", e.g. the inferred
# task; its child process too: one prefix).
PROJECT_LINE = re.compile(
    r"(tfx-parallel run: |\[\d/\d\] \w+: |=== tfx-parallel summary |\[trainer\] |"
    r"\[example_gen\] |"
    r"(layout|training|eval|labels|learned|blessed|model|metrics|report|log) {2,})")
# Issue 16: "at most about 25 lines"; 26 since the summary names the run's report.html
# (issue #50 item 5), a line a user clicks rather than a line of noise.
MAX_LINES = 26
MAX_OWN_LINES = 17  # the CLI's and the summary's share of them


def _command():
  script = os.path.join(os.path.dirname(sys.executable), "tfx-parallel")
  return [script] if os.path.exists(script) else [sys.executable, "-m",
                                                  "tfx_parallel.pipeline.cli"]


def _cli(home, *args, timeout=900):
  return subprocess.run(_command() + ["run", "--home", str(home), *args],
                        capture_output=True, text=True, timeout=timeout)


def _on_a_terminal(argv, cwd, timeout=900):
  """Runs ``argv`` with stdout and stderr on a pseudo-terminal, as `make run` in a
  shell. Returns (exit code, the lines as a terminal shows them: "\r" rewrites a line)."""
  import pty  # pylint: disable=g-import-not-at-top
  primary, secondary = pty.openpty()
  proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=secondary,
                          stderr=secondary, cwd=cwd, close_fds=True)
  os.close(secondary)
  chunks = []
  try:
    while True:
      try:
        data = os.read(primary, 65536)
      except OSError:  # EIO: every writer closed the terminal.
        break
      if not data:
        break
      chunks.append(data)
    code = proc.wait(timeout=timeout)
  finally:
    os.close(primary)
    if proc.poll() is None:
      proc.kill()
  text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
  return code, [line.rsplit("\r", 1)[-1].rstrip() for line in text.split("\n")[:-1]]


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory):
  """`tfx-parallel run` with the defaults (what `make run` does) on a terminal."""
  home = tmp_path_factory.mktemp("seed")
  code, lines = _on_a_terminal(_command() + ["run", "--home", "runs"], cwd=str(home))
  return home, code, lines


@pytest.mark.slow
def test_seed_run_prints_only_project_lines_and_no_warning(seed_run):
  home, code, lines = seed_run
  assert code == 0, "\n".join(lines)
  strangers = [line for line in lines if not PROJECT_LINE.match(line)]
  assert not strangers, strangers  # no warning, no noise, no stray log line
  # The trainer's own lines ("[trainer] ", from its executor and its child process) are
  # counted with all lines, in test_seed_run_prints_at_most_about_25_lines.
  ours = [line for line in lines if not line.startswith("[trainer] ")]
  assert len(ours) <= MAX_OWN_LINES, "\n".join(ours)
  assert [line.split(":")[0] for line in ours if re.match(r"\[\d/3\]", line)] == [
      "[1/3] PartitionedExampleGen", "[1/3] PartitionedExampleGen",
      "[2/3] DistributedTrainer", "[2/3] DistributedTrainer",
      "[3/3] ConvergenceEvaluator", "[3/3] ConvergenceEvaluator"]
  summary = {line.split()[0]: line for line in ours if PROJECT_LINE.match(line)}
  assert "state converged" in summary["training"]
  assert summary["blessed"] == "blessed    True"
  assert summary["layout"] == "layout     mesh 2x2 (2 replicas x 2-way model, 4 devices)"
  assert summary["model"].startswith("model      runs/pipelines/tfx-parallel/")
  # Readable numbers: no raw doubles (at most 5 significant digits) anywhere we print.
  numbers = re.findall(r"(?<![\w.])\d+\.\d+(?:e[-+]\d+)?", "\n".join(ours))
  assert len(numbers) >= 8, numbers  # losses, MSE, parameters, errors, durations
  assert all(len(n.split("e")[0].replace(".", "").lstrip("0")) <= 5 for n in numbers), numbers
  log_path = os.path.join(home, summary["log"].split(None, 1)[1])
  assert re.fullmatch(r".*/runs/logs/tfx-parallel-\d{8}-\d{6}\.log", log_path), log_path
  with open(log_path) as f:
    log = f.read()
  assert "Unable to register cuFFT factory" in log  # The noise went to the file.
  assert "Component DistributedTrainer is running." in log  # And absl INFO.


@pytest.mark.slow
def test_seed_run_prints_at_most_about_25_lines(seed_run):
  _, _, lines = seed_run
  assert len(lines) <= MAX_LINES, "\n".join(lines)


def _csv(path, rows=400, bad_line=None, missing_label_every=None, labelled_share=0.75):
  """``rows`` rows of y = a + 2b + 3; line ``bad_line`` has a non-number in column b;
  every ``missing_label_every``-th row after the first ``labelled_share`` has no label."""
  n, rows = rows, ["a,b,y"]
  for i in range(n):
    a, b = (i % 17) / 17, (i % 11) / 11
    label = "" if (missing_label_every and i >= n * labelled_share
                   and i % missing_label_every == 0) else f"{a + 2 * b + 3:.4f}"
    rows.append(f"{a:.4f},{'oops' if len(rows) + 1 == bad_line else f'{b:.4f}'},{label}")
  path.write_text("\n".join(rows) + "\n")
  return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["example_gen", "trainer"])
def test_an_error_inside_a_component_reaches_the_console_with_its_message(tmp_path, case):
  if case == "example_gen":  # Past the 10,000 rows type inference reads before the run.
    data = _csv(tmp_path / "bad_row.csv", rows=10_500, bad_line=10_402)
    component, message = "PartitionedExampleGen", (
        r"BadInputError: .*bad_row\.csv:10402: column 'b': expected float, got 'oops'")
  else:  # ExampleGen writes the rows; the trainer's scan counts the missing labels: a
    # few are skipped (trainer.skip_missing_labels), but 3 of 4 fail the run.
    data = _csv(tmp_path / "missing_label.csv", missing_label_every=1, labelled_share=0.25)
    component, message = "DistributedTrainer", (
        r"MissingLabelError: 300 of 400 examples \(75\.0%: train \d+, eval \d+\) have no "
        r"value \(or more than one\) for the label 'y', more than "
        r"trainer\.max_missing_label_share=0\.5 allows")
  home = tmp_path / "home"
  proc = _cli(home, "--data", data, "--label", "y", "--layout", "single", "--epochs", "1")
  assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
  assert re.search(rf"tfx-parallel: {component} failed: {message}", proc.stderr), proc.stderr
  assert not [line for line in proc.stderr.splitlines() if console.is_noise(line)]
  # Issue 31, case 6: one line, no Beam traceback before it (the log file has it).
  assert "Traceback" not in proc.stderr and "apache_beam" not in proc.stderr, proc.stderr
  assert [line for line in proc.stderr.splitlines() if "column 'b'" in line or
          "MissingLabelError" in line] == [re.search(rf"tfx-parallel: {component} failed: .*",
                                                     proc.stderr).group(0)]
  log_path = re.search(r"every log line are in (\S+)", proc.stderr).group(1)
  with open(log_path if os.path.isabs(log_path) else os.path.join(os.getcwd(), log_path)) as f:
    assert "Traceback (most recent call last)" in f.read()


def test_console_log_lines_name_settings_in_the_commands_form(tmp_path, capsys):
  """A component's warning suggests `set column_types.x='float'`; `run`'s console says
  `add --set example_gen.column_types.x=float` (the log file keeps the original)."""
  from tfx_parallel.pipeline import cli  # pylint: disable=g-import-not-at-top
  with console.Console(str(tmp_path), "p", verbose=True) as c:
    c.rewrite = lambda text: cli.RUN_FORM.message(text, "example_gen")
    logging.getLogger("absl").warning("column 'x' is a string column: if it is numeric, "
                                      "set column_types.x='float'.")
  err = capsys.readouterr().err
  assert "WARNING:absl:column 'x' is a string column: if it is numeric, add --set " \
         "example_gen.column_types.x=float." in err
  with open(c.log_path) as f:
    assert "set column_types.x='float'." in f.read()
