"""ConvergenceEvaluator: eval quality, convergence analysis and blessing (see component.py)."""
