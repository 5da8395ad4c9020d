"""kernelwright.prompts: the roles' prompts as plain text templates filled with `str.format`.

Owns nothing but text, and the playbook as data (`playbook.toml`); imports nothing of kernelwright. A template's
fields are named in its file.
"""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


@cache
def load(name: str) -> str:
    """The template `name` (analyst, strategist, coder, …) as text."""
    path = _HERE / f"{name}.txt"
    if not path.is_file():
        raise KeyError(f"no prompt named {name!r}")
    return path.read_text()


@cache
def playbook_data() -> dict[str, Any]:
    """The Triton-on-NVIDIA playbook as data (`playbook.toml`): `measured_on` (the GPU and versions its entries
    were measured with, unless an entry says otherwise) and `entry`, a list of tables (id, kinds, bottlenecks,
    keywords, category, symptom, move, effect, sources). `agents/playbook.py` validates and chooses from it."""
    with open(_HERE / "playbook.toml", "rb") as f:
        return tomllib.load(f)


def playbook() -> str:
    """The whole playbook as numbered text (symptom -> move (category) -> what it did [its BENCHMARKS.md rows]),
    for a reader who wants every entry; a strategist is shown only the entries chosen for its problem
    (`agents.playbook.playbook_for`)."""
    data = playbook_data()
    on = data.get("measured_on") or {}
    lines = [f"Each entry: what the measurements show -> the move (its category) -> what it did on the {on.get('gpu')} "
             f"(torch {on.get('torch')}, triton {on.get('triton')}). Sources are in BENCHMARKS.md, "
             f"\"{on.get('section')}\": [P] its playbook probes table, [L] its builtin-policy table."]
    for i, e in enumerate(data.get("entry") or [], 1):
        cites = " ".join(f"[{s}]" for s in e.get("sources") or [])
        lines.append(f"{i}. {e['symptom']} -> {e['move']} ({e['category']}): {e['effect']} {cites}")
    return "\n".join(lines) + "\n"


@cache
def contract() -> str:
    """The candidate contract (`contract.md`): what a candidate must and may do, one text for the first-kernel
    writer, the coder and docs/contract.md."""
    return (_HERE / "contract.md").read_text().strip()
