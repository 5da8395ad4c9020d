"""The structured decisions the roles exchange: a diagnosis of the parent, a proposal for one change.

Both are pydantic models with a stable JSON form: traces, reports and LLM structured output read them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Bottleneck = Literal["memory", "compute", "latency", "occupancy", "spills", "waiting", "unknown"]
"""waiting: programs spend their time spinning on flags other programs set (ticket waits: the contract allows a
program to wait on smaller tickets; a relay model had no word for a GroupNorm whose programs spun on their group's
statistics, 2026-11-26, and called it latency)"""
Category = Literal["tiling", "warps", "pipelining", "grouping", "reduction", "fusion", "online", "persistent",
                   "memory_access", "decomposition", "algorithm", "precision", "other"]
"""Knob kinds (tiling: block sizes; warps; pipelining: stages; grouping: program-id swizzles) and structural
kinds (reduction: split or multi-stage reductions; fusion: fewer kernels or passes over memory; online:
one-pass algorithms such as online softmax or Welford; persistent: a grid of about one program per SM that
loops over tiles; memory_access: vectorised, block-pointer or coalesced loads and stores, layouts;
decomposition: a different split of the work over programs; algorithm: a different method altogether;
precision: the arithmetic's types)."""
STRUCTURAL: tuple[str, ...] = ("reduction", "fusion", "online", "persistent", "memory_access", "decomposition",
                               "algorithm", "precision")


class Diagnosis(BaseModel):
    """The analyst's reading of the parent's profile."""

    bottleneck: Bottleneck = Field(description="what limits the kernel now")
    evidence: list[str] = Field(description="the metrics this rests on, quoted with their values")
    headroom: float | None = Field(default=None, description="fraction of time left above the roofline floor (0..1)")
    summary: str = Field(description="one or two sentences")


class Proposal(BaseModel):
    """Exactly one targeted change, with the effect it is predicted to have."""

    category: Category = Field(description="the kind of change")
    what: str = Field(description="the change, concretely (e.g. 'BLOCK_N 1024 -> 2048', or 'split each row over "
                                  "8 programs: partial max/sum per chunk, then a merge kernel')")
    why: str = Field(description="how it addresses the diagnosis")
    predicted_speedup: float = Field(description="predicted parent time / child time, e.g. 1.15 (above 1: faster)")
    risk: Literal["low", "medium", "high"] = Field(default="low", description="how likely the change breaks correctness")
    key: str = Field(description="a stable identifier of the change, used to never repeat a failed one")
