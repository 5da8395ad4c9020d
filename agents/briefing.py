"""What the language-model roles are shown beside the parent, each piece bounded: the device's facts, the
parent's evidence (rendered profile), inspirations from the archive (the best and a few diverse kernels,
as diffs against the parent with their measured numbers), how the strategist's predictions held on this
lineage, the history of the lineage, and the playbook.

Pure text assembly over plain data; the roles fetch the data (`roles/`) and the prompts place the text.
The bounds are characters (about four per token): the strategist's prompt, beyond the problem's and the
parent's sources, stays under `STRATEGIST_EXTRA_CHARS`; the coder's under `CODER_EXTRA_CHARS`.
"""

from __future__ import annotations

import difflib
from typing import Any, Callable

FACTS_CHARS = 900
EVIDENCE_CHARS = 2500
INSPIRATIONS_CHARS = 6000
"""all inspirations together, for the strategist"""
CODER_INSPIRATIONS_CHARS = 3000
ONE_INSPIRATION_CHARS = 2200
HISTORY_CHARS = 2500
PREDICTIONS_CHARS = 800
PLAYBOOK_CHARS = 5000
STRATEGIST_EXTRA_CHARS = 24_000
"""about 6,000 tokens: everything the strategist is shown beyond the problem's and the parent's sources"""
CODER_EXTRA_CHARS = 10_000
"""about 2,500 tokens: everything the coder is shown beyond the problem's and the parent's sources"""


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 16] + "\n… [truncated]"


def inspiration_items(pairs: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """The archive's (why shown, entry) pairs as small plain dicts for the branch state."""
    return [{"id": e.id, "shown_as": why, "median_ms": e.median_ms, "speedup_vs_eager": e.speedup_vs_eager,
             "speedup_vs_compile": e.speedup_vs_compile, "fraction_of_floor": e.fraction_of_floor,
             "change": e.proposal_key} for why, e in pairs]


def _numbers(item: dict[str, Any]) -> str:
    if item.get("median_ms") is None:
        return "verified correct, not timed"
    bits = [f"{item['median_ms']:.4g} ms"]
    for key, label in (("speedup_vs_eager", "× eager"), ("speedup_vs_compile", "× torch.compile")):
        if item.get(key):
            bits.append(f"{item[key]:.2f}{label}")
    if item.get("fraction_of_floor"):
        bits.append(f"{item['fraction_of_floor']:.0%} of the floor")
    return ", ".join(bits)


def render_inspirations(items: list[dict[str, Any]], parent_id: str, parent_src: str,
                        source_of: Callable[[str], str], limit: int = INSPIRATIONS_CHARS) -> str:
    """Each inspiration as a header (why shown, its numbers, the change that made it) and its unified diff
    against the parent, each diff clipped, the whole clipped to `limit`."""
    if not items:
        return "(none yet: the archive holds only this lineage)"
    blocks = []
    for it in items:
        try:
            src = source_of(it["id"])
        except (KeyError, FileNotFoundError, OSError):
            continue
        diff = "".join(difflib.unified_diff(parent_src.splitlines(keepends=True), src.splitlines(keepends=True),
                                            f"parent {parent_id[:12]}", f"{it['id'][:12]}", n=2))
        head = (f"### {it['id'][:12]} — {it['shown_as']}: {_numbers(it)}"
                + (f"; made by the change {it['change']}" if it.get("change") else ""))
        blocks.append(head + "\n```diff\n" + clip(diff or "(identical to the parent)\n", ONE_INSPIRATION_CHARS)
                      + "```")
    return clip("\n".join(blocks), limit) if blocks else "(none)"


def render_history(history: list[dict[str, Any]], limit: int = HISTORY_CHARS) -> str:
    """The lineage's steps, newest last, one line each (the oldest dropped first when over `limit`)."""
    if not history:
        return "(none yet)"
    lines = []
    for h in history:
        bits = [f"{h.get('proposal')}: {h.get('decision')}"]
        if h.get("decision") == "unmeasured":
            bits.append(f"verified, not timed (child {h.get('child')}, available to build on)")
        elif h.get("why"):
            bits.append(h["why"])
        elif h.get("verdict") != "pass":
            bits.append(f"{h.get('verdict')} ({h.get('reason')})")
        if h.get("measured_speedup") is not None:
            bits.append(f"measured {h['measured_speedup']:.3f}×")
        if h.get("predicted_speedup") is not None:
            bits.append(f"predicted {h['predicted_speedup']:.2f}×")
        if h.get("launched"):
            bits.append(f"child launched {h['launched']}")
        lines.append("- " + "; ".join(bits))
    while len("\n".join(lines)) > limit and len(lines) > 1:
        lines.pop(0)
    return "\n".join(lines)


