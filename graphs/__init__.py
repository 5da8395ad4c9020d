"""The state schema and the LangGraph graphs (`optimize.py`). Knows agents; never the CLI."""
