"""The optimization graph.

    START -> seed -> select --Send x K--> branch[analyst -> strategist -> review -> coder -> verifier] -> archive
                       ^                                                                         |
                       +---------------------------- (continue?) --------------------------------+-> END

`builder()` returns the uncompiled builder; callers compile it with the checkpointer they need (the API:
SQLite in the run directory; tests: in memory). The graph runs with a `RunContext` as its context.
"""

from __future__ import annotations

from typing import Any, Literal

from langgraph.graph import END, START, StateGraph

from . import nodes
from .state import BranchOutput, BranchState, Context, OptimizeState


def branch_builder() -> StateGraph:
    """One branch: the parent's diagnosis, one proposal, the change, its verification."""
    b = StateGraph(BranchState, context_schema=Context, output_schema=BranchOutput)
    b.add_node("analyst", nodes.analyst)
    b.add_node("strategist", nodes.strategist)
    b.add_node("review", nodes.review)
    b.add_node("coder", nodes.coder)
    b.add_node("verifier", nodes.verifier)
    b.add_edge(START, "analyst")
    b.add_edge("analyst", "strategist")
    b.add_edge("strategist", "review")
    b.add_edge("review", "coder")
    b.add_edge("coder", "verifier")
    b.add_edge("verifier", END)
    return b


def go_on(state: OptimizeState) -> Literal["select", "__end__"]:
    """After the seed and after each generation: another generation unless the run has stopped."""
    return END if state.get("stop") else "select"


def builder() -> StateGraph:
    g = StateGraph(OptimizeState, context_schema=Context)
    g.add_node("seed", nodes.seed)
    g.add_node("select", nodes.select)
    g.add_node("branch", branch_builder().compile())
    g.add_node("archive", nodes.archive)
    g.add_edge(START, "seed")
    g.add_conditional_edges("seed", go_on)
    g.add_conditional_edges("select", nodes.fan_out, ["branch"])
    g.add_edge("branch", "archive")
    g.add_conditional_edges("archive", go_on)
    return g


def initial_state() -> dict[str, Any]:
    return {"archive": {}, "generation": 0, "results": None, "stop": None}
