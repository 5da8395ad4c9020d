"""The review between the strategist and the coder, as the roles see it: what a paused step shows its reviewer and
how the reviewer's answer changes the step. The request's schema, the answers' parsing and steering are
`agents.proposal_review`'s; the pause itself is the graph's (`graphs/nodes.py`).
"""

from __future__ import annotations

from typing import Any

from .. import proposal_review as reviews
from ..context import RunContext
from .common import State


def review_request(state: State, ctx: RunContext) -> dict[str, Any] | None:
    """What a paused step shows its reviewer (None: the run is unattended, `review` "none")."""
    if ctx.config.review == "none":
        return None
    return reviews.request(state, ctx.run.id)


def apply_review(state: State, answer: Any) -> State:
    """The reviewer's decision applied to the step. An answer that cannot be applied (a malformed proposal
    from LangGraph's UIs, where nothing checked it before) ends the step without a child, recorded."""
    try:
        return reviews.apply(state, reviews.parse(answer))
    except reviews.ReviewError as e:
        return {"review": reviews.ReviewRecord(decision="invalid", by="unknown", at=reviews.now(),
                                               message=str(e)).model_dump()}
