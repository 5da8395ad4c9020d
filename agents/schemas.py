"""The structured decisions the roles exchange: a diagnosis of the parent, a proposal for one change.

Both are pydantic models with a stable JSON form: traces, reports and LLM structured output read them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Bottleneck = Literal["memory", "compute", "latency", "occupancy", "spills", "unknown"]
Category = Literal["tiling", "warps", "pipelining", "grouping", "fusion", "algorithm", "precision", "other"]


class Diagnosis(BaseModel):
    """The analyst's reading of the parent's profile."""

    bottleneck: Bottleneck = Field(description="what limits the kernel now")
    evidence: list[str] = Field(description="the metrics this rests on, quoted with their values")
    headroom: float | None = Field(default=None, description="fraction of time left above the roofline floor (0..1)")
    summary: str = Field(description="one or two sentences")


class Proposal(BaseModel):
    """Exactly one targeted change, with the effect it is predicted to have."""

    category: Category = Field(description="the kind of change")
    what: str = Field(description="the change, concretely (e.g. 'BLOCK_N 1024 -> 2048')")
    why: str = Field(description="how it addresses the diagnosis")
    predicted_speedup: float = Field(description="predicted child time / parent time as a speedup, e.g. 1.15")
    risk: Literal["low", "medium", "high"] = Field(default="low", description="how likely the change breaks correctness")
    key: str = Field(description="a stable identifier of the change, used to never repeat a failed one")
