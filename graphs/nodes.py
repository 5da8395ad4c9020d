"""The graph's nodes: each adapts one role (`agents.roles`) to LangGraph, handing it the state and the
run's context from the runtime. The roles themselves know nothing of LangGraph."""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime
from langgraph.types import Send, interrupt

from kernelwright.agents import roles

from .state import BranchState, Context, OptimizeState

Update = dict[str, Any]


def seed(state: OptimizeState, runtime: Runtime[Context]) -> Update:
    return roles.seed(dict(state), runtime.context)


def select(state: OptimizeState, runtime: Runtime[Context]) -> Update:
    return roles.select(dict(state), runtime.context)


def fan_out(state: OptimizeState, runtime: Runtime[Context]) -> list[Send]:
    """One branch per parent of the generation."""
    chat = {"messages": state["messages"]} if state.get("messages") else {}
    return [Send("branch", {**b, **chat}) for b in roles.branch_inputs(dict(state), runtime.context)]


def analyst(state: BranchState, runtime: Runtime[Context]) -> Update:
    return roles.analyst(dict(state), runtime.context)


def strategist(state: BranchState, runtime: Runtime[Context]) -> Update:
    return roles.strategist(dict(state), runtime.context)


def review(state: BranchState, runtime: Runtime[Context]) -> Update:
    """With `review: proposals`, the branch pauses here (checkpointed) until a person decides; the value
    shown is LangGraph's human-in-the-loop request, so Agent Chat UI and Studio can answer it too. Its own
    node, so resuming runs only this: the strategist's work is never redone."""
    request = roles.review_request(dict(state), runtime.context)
    if request is None:
        return {}
    return roles.apply_review(dict(state), interrupt(request))


def coder(state: BranchState, runtime: Runtime[Context]) -> Update:
    return roles.coder(dict(state), runtime.context)


def verifier(state: BranchState, runtime: Runtime[Context]) -> Update:
    return roles.verifier(dict(state), runtime.context)


def archive(state: OptimizeState, runtime: Runtime[Context]) -> Update:
    return roles.archive_step(dict(state), runtime.context)
