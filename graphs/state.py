"""The optimization graph's state and run-time context.

State holds ids and small summaries only (kernel hashes, the archive's numbers, one result summary per
branch); sources, evaluations and transcripts live in the run directory (`kernelwright.runstore`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict


def merge_results(left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Branch results of the current generation: branches append; the archive node clears with None."""
    if right is None:
        return []
    return (left or []) + right


class OptimizeState(TypedDict, total=False):
    run_dir: str
    """the run directory; everything large lives there"""
    archive: dict[str, Any]
    """A reference to the archive in the run directory: {"version": generation, "steps", "entries", "best"}
    (replaced whole by the seed and archive nodes; {} before the seed is judged)."""
    generation: int
    """generations started so far"""
    parents: list[str]
    """kernel hashes chosen as parents of the current generation"""
    results: Annotated[list[dict[str, Any]], merge_results]
    """one summary per branch of the current generation (see `merge_results`)"""
    stop: str | None
    """why the run stopped, once it has"""


class BranchState(TypedDict, total=False):
    run_dir: str
    step_id: str
    """g<generation>b<branch>: stable across a resume, so a replayed step is recognised"""
    generation: int
    branch: int
    parent: str
    lineage_gains: dict[str, list[float]]
    failed: list[str]
    history: list[dict[str, Any]]
    """earlier steps on this parent's lineage: proposal key, verdict, measured delta, decision"""
    diagnosis: dict[str, Any] | None
    proposal: dict[str, Any] | None
    child: str | None
    coder: dict[str, Any]
    llm: dict[str, Any]
    """per role that used a model: its usage (tokens, cost, retries, reasoning), transcript file, error"""
    results: Annotated[list[dict[str, Any]], merge_results]


class BranchOutput(TypedDict):
    results: Annotated[list[dict[str, Any]], merge_results]


@dataclass(kw_only=True)
class Context:
    """How a run is configured (`kernelwright optimize` flags); not checkpointed, given again on resume."""

    device: str = "cpu"
    precision: str | None = None
    branches: int = 2
    iterations: int = 8
    """candidate children to evaluate in all"""
    time_budget_s: float | None = None
    token_budget: int | None = None
    """stop once the run's model calls have used this many tokens (checked after each generation)"""
    cost_budget_usd: float | None = None
    """stop once the run's model calls have cost this much, at `prices` (checked after each generation)"""
    prices: dict[str, list[float]] = field(default_factory=dict)
    """model spec -> [USD per million input tokens, per million output tokens]"""
    plateau_steps: int = 20
    roofline_target: float | None = 0.9
    trials: int = 5
    model: str = "builtin"
    """builtin (no model) or provider:model, the default for every role"""
    base_url: str | None = None
    """an OpenAI-compatible server (vLLM, SGLang, Ollama) serving the models"""
    role_models: dict[str, str] = field(default_factory=dict)
    """per-role models (analyst, strategist, coder) overriding `model`"""
    seed: int = 0
    explore: float = 0.25
