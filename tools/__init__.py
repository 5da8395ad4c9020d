"""What the roles call, and what the front doors read a run through: the run directory (`runstore.py`), evaluation
with a per-run verdict cache and the quick check's shape variants (`evaluation.py`), the coder's editing tools
(`coding.py`), the review desk (`review_desk.py`) and the knowledge store kept across runs (`knowledge.py`). Knows
evaluators; never agents, graphs or the CLI."""
