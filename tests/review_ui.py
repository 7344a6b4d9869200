"""Review of issue #50 claim 4 (KFP UI outputs): failing tests, each a finding.

A diverged binary model whose probabilities are NaN: eval_auc (system.Metrics) is 0.5,
a random classifier, not undefined; the ROC curve (system.ClassificationMetrics
confidenceMetrics) puts every NaN score above every threshold (recall 1 at threshold
1.0), while the confusion matrix (score >= 0.5) counts them as predicted negative.

Run: nice -n 5 .venv/bin/python -m pytest -q tests/review_ui.py"""
import math

import numpy as np

from tfx_parallel.components.convergence_evaluator import quality, report

LABELS = np.array([0, 1, 0, 1, 1, 0, 1, 0])


def test_auc_of_nan_scores_is_not_a_number():
  assert math.isnan(quality.auc(LABELS, np.full(8, np.nan, np.float32)))


def test_roc_of_nan_scores_does_not_claim_full_recall_at_threshold_one():
  roc = report.roc_points(LABELS, np.full(8, np.nan))
  assert not roc or roc["recall"][-1] == 0.0
