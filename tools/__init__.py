"""The functions the roles call: evaluation with a per-run verdict cache (`evaluation.py`). Knows evaluators and the run store."""
