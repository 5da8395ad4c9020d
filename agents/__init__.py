"""The roles' decisions and what they share: the seed writer, selection, analyst, strategist, coder, verifier and
archive steps (`roles/`, a module each), with builtin (`builtin.py`, `moves.py`, `tuning.py`) and language-model
(`llm.py`, `briefing.py`, `playbook.py`) policies; the archive (`archive.py`), the stop rules (`stopping.py`),
the decision schemas (`schemas.py`), the trace's step record (`records.py`), reviews and steering (`proposal_review.py`),
the chat agent (`chat_agent.py`) and what a run is and holds (`context.py`). Knows tools, evaluators and
prompts; never the graphs or the CLI."""
