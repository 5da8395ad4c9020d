"""The five roles as graph nodes, with LLM and builtin policies. So far: the archive (`archive.py`),
the decision schemas (`schemas.py`), the builtin policy (`builtin.py`, `moves.py`). Knows tools, prompts,
state; never graphs or the CLI."""
