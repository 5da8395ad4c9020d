"""The optimization graph's state and run-time context.

State holds ids and small summaries only (kernel hashes, the archive's numbers, one result summary per
branch); sources, evaluations and transcripts live in the run directory (`kernelwright.tools.runstore`).
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from kernelwright.agents.context import RunContext


def merge_results(left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Branch results of the current generation: branches append; the archive node clears with None."""
    if right is None:
        return []
    return (left or []) + right


class OptimizeState(TypedDict, total=False):
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
    messages: list[Any]
    """the served graph's chat (graphs/serve.py), carried unchanged so a chat client that streams subgraphs
    (Agent Chat UI) still finds it in every state it is sent"""


class BranchState(TypedDict, total=False):
    messages: list[Any]
    """as OptimizeState's"""
    step_id: str
    """g<generation>b<branch>: stable across a resume, so a replayed step is recognised"""
    generation: int
    branch: int
    parent: str
    lineage_gains: dict[str, list[float]]
    failed: list[str]
    history: list[dict[str, Any]]
    """earlier steps on this parent's lineage: proposal key, verdict, measured delta, decision, predicted and
    measured speedups"""
    sibling_rank: int
    """how many earlier branches of this generation share this parent"""
    plateaued: bool
    """the lineage's recent steps gained nothing: the builtin strategist adds pair moves"""
    inspirations: list[dict[str, Any]]
    """archive kernels to show beside the parent: id, why shown, measured numbers"""
    predictions: str
    """how the strategist's predictions held on this lineage, in a few lines"""
    parent_label: str
    """the parent in one line for the prompts: hash, where it came from, what is known of its speed"""
    swept: str
    """what the builtin's tuning sweeps measured around the parent (a structural child), a line per sweep"""
    no_moves: str | None
    """why the builtin strategist had nothing to propose, in one sentence"""
    steering: dict[str, Any] | None
    """what the reviewer's steering put in force when the step began (notes, pinned parent, banned kinds)"""
    diagnosis: dict[str, Any] | None
    proposal: dict[str, Any] | None
    review: dict[str, Any] | None
    """a person's decision on the proposal (`--review proposals`): the trace's `review`"""
    given_kernel: str | None
    """the child kernel's source when the reviewer wrote it (respond with a kernel): no coder runs"""
    child: str | None
    coder: dict[str, Any]
    llm: dict[str, Any]
    """per role that used a model: its usage (tokens, cost, retries, reasoning), transcript file, error"""
    results: Annotated[list[dict[str, Any]], merge_results]


class BranchOutput(TypedDict):
    results: Annotated[list[dict[str, Any]], merge_results]


Context = RunContext
"""The graph's run-time context (LangGraph's `context_schema`): the run's config and live resources.
Never checkpointed; a resumed run is given a new one built from the config in run.json."""
