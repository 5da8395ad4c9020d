"""kernelwright.prompts: the roles' prompts as plain text templates filled with `str.format`.

Owns nothing but text; imports nothing of kernelwright. A template's fields are named in its file.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_HERE = Path(__file__).resolve().parent


@cache
def load(name: str) -> str:
    """The template `name` (analyst, strategist, coder, …) as text."""
    path = _HERE / f"{name}.txt"
    if not path.is_file():
        raise KeyError(f"no prompt named {name!r}")
    return path.read_text()


@cache
def playbook() -> str:
    """The Triton-on-NVIDIA playbook (`playbook.md`): symptom -> move -> what it did, each entry citing its
    measurement in BENCHMARKS.md."""
    return (_HERE / "playbook.md").read_text()
