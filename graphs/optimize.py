"""The optimization graph.

    START -> seed -> select --Send x K--> branch[analyst -> strategist -> coder -> verifier] -> archive
                       ^                                                                         |
                       +---------------------------- (continue?) --------------------------------+-> END

`builder()` returns the uncompiled builder; callers compile it with the checkpointer they need (the CLI:
SQLite in the run directory; tests: in-memory).
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from kernelwright.agents import roles

from .state import BranchOutput, BranchState, Context, OptimizeState


def branch_builder() -> StateGraph:
    """One branch: the parent's diagnosis, one proposal, the change, its verification."""
    b = StateGraph(BranchState, context_schema=Context, output_schema=BranchOutput)
    b.add_node("analyst", roles.analyst)
    b.add_node("strategist", roles.strategist)
    b.add_node("coder", roles.coder)
    b.add_node("verifier", roles.verifier)
    b.add_edge(START, "analyst")
    b.add_edge("analyst", "strategist")
    b.add_edge("strategist", "coder")
    b.add_edge("coder", "verifier")
    b.add_edge("verifier", END)
    return b


def fan_out(state: OptimizeState) -> list[Send]:
    """One branch per parent, each with what its strategist needs from the archive (small)."""
    run = roles._run(state)
    archive = roles.load_archive(state, run)
    sends = []
    for i, parent in enumerate(state["parents"]):
        sends.append(Send("branch", {
            "run_dir": state["run_dir"], "generation": state["generation"], "branch": i, "parent": parent,
            "step_id": f"g{state['generation']}b{i}",
            "lineage_gains": roles.lineage_gains(archive, parent, run),
            # every move already tried on this parent: a failed one must not be repeated, and a successful
            # one would only rebuild a kernel the archive already judged
            "failed": sorted(set(archive.failed.get(parent, []))
                             | {st.proposal_key for st in archive.steps if st.parent_id == parent}),
            "history": roles.lineage_history(archive, parent),
            "sibling_rank": state["parents"][:i].count(parent),
        }))
    return sends


def after_seed(state: OptimizeState) -> Literal["select", "__end__"]:
    return END if state.get("stop") else "select"


def after_archive(state: OptimizeState) -> Literal["select", "__end__"]:
    return END if state.get("stop") else "select"


def builder() -> StateGraph:
    g = StateGraph(OptimizeState, context_schema=Context)
    g.add_node("seed", roles.seed)
    g.add_node("select", roles.select)
    g.add_node("branch", branch_builder().compile())
    g.add_node("archive", roles.archive_node)
    g.add_edge(START, "seed")
    g.add_conditional_edges("seed", after_seed)
    g.add_conditional_edges("select", fan_out, ["branch"])
    g.add_edge("branch", "archive")
    g.add_conditional_edges("archive", after_archive)
    return g


def initial_state(run_dir: str) -> dict[str, Any]:
    return {"run_dir": run_dir, "archive": {}, "generation": 0, "results": None, "stop": None}
