"""RESULTS.md's Targets table holds like-for-like rows only (issue 30).

bench_train's `single` row times the trainer on its in-memory input cache against tf_keras
fit streaming from files (63.61x in the 2026-12-03 run): the ratio is the cache's. It must
not be a Targets row; the single-layout target takes bench_user_model's same-input figure.
"""
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import run_all  # noqa: E402


def _train_row(input_cache, ratio_runs=(3.3e6, 3.1e6, 3.4e6)):
  return {"bench": "bench_train", "case": "single", "command": "c", "data": "d",
          "baseline": "tf_keras model.fit", "unit": "examples/s", "ours": list(ratio_runs),
          "base": [52e3, 50e3, 54e3], "higher_is_better": True,
          "notes": f"trainer input cache: {input_cache}",
          "extra": {"input_cache": [input_cache]}}


def _results(row):
  return {"bench_train": {"rows": [row], "seconds": 1.0, "error": None}}


def _targets(results, bench_dir):
  compared = run_all.compared_rows(results)
  lines = run_all.target_lines(compared, results, bench_dir)
  return [line for line in lines if line.startswith("| ") and "speed-up >=" in line]


def _write_json(directory, user_ratio=1.11):
  with open(os.path.join(directory, "user_model.json"), "w") as f:
    json.dump({"ratio": {"auto": user_ratio, "plain_cache": 1.0}}, f)
  with open(os.path.join(directory, "ingest_mixed.json"), "w") as f:
    json.dump([{"data": "mixed", "side": "ours", "rows": 10, "rows_per_s": 120.0},
               {"data": "mixed", "side": "stock CsvExampleGen", "rows": 10,
                "rows_per_s": 10.0}], f)


def test_cached_trainer_against_streamed_keras_is_not_a_targets_row(tmp_path):
  _write_json(str(tmp_path))
  rows = _targets(_results(_train_row("memory")), str(tmp_path))
  single = [r for r in rows if "single layout" in r]
  assert len(single) == 1, rows
  assert "same cached input" in single[0] and "| 1.11x | yes |" in single[0]
  assert not any("| single |" in r for r in rows), rows
  assert any("mixed-type ingest" in r and "| 12.00x | yes |" in r for r in rows), rows


def test_streamed_trainer_row_is_like_for_like_and_stays(tmp_path):
  _write_json(str(tmp_path))
  rows = _targets(_results(_train_row("none", (55e3, 50e3, 53e3))), str(tmp_path))
  assert any("| single |" in r and "| 1.02x |" in r for r in rows), rows


def test_the_saved_results_render_without_the_cached_single_row(tmp_path):
  """The committed RESULTS.json (the run that showed 63.61x) renders no such row."""
  out = tmp_path / "RESULTS.md"
  assert run_all.main(["--render", os.path.join(REPO, "benchmarks", "RESULTS.json"),
                       "--output", str(out)]) == 0
  text = out.read_text()
  targets = text.split("## Targets", 1)[1].split("\n## ", 1)[0]
  assert "| single |" not in targets and "63.61x" not in targets
  assert "same cached input" in targets


def test_mixed_over_numeric_ingest_is_the_median_of_the_paired_runs(tmp_path):
  """Issue 30: mixed-type rows/s >= 0.7x numeric-only, ours on both at the same rows."""
  _write_json(str(tmp_path))
  with open(os.path.join(str(tmp_path), "ingest_mixed.json")) as f:
    data = json.load(f)
  data.append({"data": "numeric", "side": "ours", "rows": 10, "rows_per_s": 100.0,
               "pair_ratios": [0.6, 0.9, 0.8]})
  with open(os.path.join(str(tmp_path), "ingest_mixed.json"), "w") as f:
    json.dump(data, f)
  rows = _targets(_results(_train_row("none")), str(tmp_path))
  assert any("0.7x numeric-only" in r and "| 0.80x | yes |" in r for r in rows), rows
  data[-1].pop("pair_ratios")  # Without pairs: the two rows' rows/s, 120 / 100.
  with open(os.path.join(str(tmp_path), "ingest_mixed.json"), "w") as f:
    json.dump(data, f)
  rows = _targets(_results(_train_row("none")), str(tmp_path))
  assert any("0.7x numeric-only" in r and "| 1.20x | yes |" in r for r in rows), rows
