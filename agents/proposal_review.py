"""Proposal reviews and steering, as the roles see them: what a paused step shows its reviewer (LangGraph's
human-in-the-loop schema: action requests with allowed decisions), how a decision changes the step, and
which moves steering leaves the strategist. Pure functions over plain data; the pause itself (LangGraph's
`interrupt`) is in graphs/nodes.py and the files people write are in tools/review_desk.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from kernelwright.tools.review_desk import ACTION, DECISIONS, Decision, PendingReview, ReviewError, Steering, now

from .schemas import Proposal

REVIEW_MODES = ("none", "proposals")
"""none: unattended (the default); proposals: each branch pauses after its strategist for a decision"""

KIND = "kernelwright.proposal_review"


class ReviewRecord(BaseModel):
    """A person's decision on a step, as the trace keeps it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    decision: str
    """approve, edit, reject or respond"""
    by: str
    """who decided: channel and person (chat:alice@host, mcp:..., langgraph)"""
    at: str
    """when (local time)"""
    message: str | None = None
    """the reviewer's reason (reject) or note"""
    original_proposal: dict[str, Any] | None = None
    """the strategist's proposal, when the reviewer replaced it (edit, respond)"""
    kernel_given: bool = False
    """the reviewer gave the child kernel itself (respond): no coder ran"""


def request(state: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The interrupt's value for one paused step: LangGraph's HITLRequest (`action_requests`,
    `review_configs` with `allowed_decisions`), which Agent Chat UI and Studio show, plus the step's ids."""
    proposal = state.get("proposal")
    allowed = list(DECISIONS) if proposal else ["reject", "respond"]
    diagnosis = state.get("diagnosis") or {}
    lines = [f"Step {state['step_id']} of run {run_id}, parent {state.get('parent_label') or state['parent'][:12]}.",
             f"Diagnosis: {diagnosis.get('bottleneck', '?')}: {diagnosis.get('summary', '')}".rstrip(": ")]
    if proposal:
        lines.append(f"Proposal ({proposal.get('category')}, predicted {proposal.get('predicted_speedup')}x): "
                     f"{proposal.get('what')}\n\nWhy: {proposal.get('why')}")
    else:
        lines.append(f"No proposal: {state.get('no_moves') or 'the strategist proposed nothing'}. "
                     "Respond with a proposal or a kernel of your own, or reject to skip the step.")
    return {  # the description's parts as paragraphs: a page renders it as markdown
        "action_requests": [{"name": ACTION, "args": dict(proposal or {}), "description": "\n\n".join(lines)}],

        "review_configs": [{"action_name": ACTION, "allowed_decisions": allowed}],
        "kind": KIND, "run_id": run_id, "step_id": state["step_id"], "generation": state.get("generation", 0),
        "branch": state.get("branch", 0), "parent": state["parent"], "parent_label": state.get("parent_label", ""),
        "diagnosis": diagnosis or None, "no_proposal": None if proposal else (state.get("no_moves") or
                                                                           "the strategist proposed nothing"),
    }


def pending_of(value: dict[str, Any], interrupt_id: str | None) -> PendingReview:
    """A paused step's interrupt value as the review desk lists it."""
    return PendingReview(step_id=value["step_id"], interrupt_id=interrupt_id, generation=value.get("generation", 0),
                         branch=value.get("branch", 0), parent=value.get("parent", ""),
                         parent_label=value.get("parent_label", ""), diagnosis=value.get("diagnosis"),
                         proposal=(value["action_requests"][0]["args"] or None),
                         no_proposal=value.get("no_proposal"),
                         allowed_decisions=value["review_configs"][0]["allowed_decisions"])


def parse(answer: Any) -> Decision:
    """A resume value as a Decision. Accepts ours (`Decision`'s fields), LangGraph's HITLResponse
    (`{"decisions": [...]}` with approve / edit `edited_action` / reject `message` / respond `message`), or a
    bare decision. A `respond` message is the person's proposal in words (or a kernel, if it defines one)."""
    if isinstance(answer, Decision):
        return answer
    if isinstance(answer, str):
        answer = {"type": answer}
    if not isinstance(answer, dict):
        raise ReviewError(f"a review decision must be an object, not {type(answer).__name__}")
    if "decisions" in answer:
        ds = answer["decisions"]
        if not isinstance(ds, list) or len(ds) != 1:
            raise ReviewError("a review answers one proposal: give exactly one decision")
        answer = {**ds[0], "by": answer.get("by", ds[0].get("by", "langgraph"))}
    answer = dict(answer)
    if answer.get("type") == "edit" and "edited_action" in answer:
        answer["proposal"] = (answer.pop("edited_action") or {}).get("args")
    if answer.get("type") == "respond" and not (answer.get("proposal") or answer.get("kernel")):
        text = str(answer.get("message") or answer.pop("args", {}) or "")
        if "@triton.jit" in text or "class ModelNew" in text:
            answer["kernel"], answer["message"] = text, None
        elif text:
            answer["proposal"] = {"category": "other", "what": text, "why": "the reviewer's own proposal",
                                  "predicted_speedup": 1.0, "key": "reviewer:" + text[:60]}
    answer.setdefault("by", "langgraph")
    try:
        return Decision.model_validate(answer)
    except ValidationError as e:
        raise ReviewError(f"not a review decision: {e.errors()[0]['msg']}") from None


def proposal_of(data: dict[str, Any], original: dict[str, Any] | None = None) -> dict[str, Any]:
    """A reviewer's proposal, checked against the strategist's schema; fields left out are taken from the
    original proposal (an edit may change only `what`), and a missing key is made from the text."""
    merged = {**(original or {}), **{k: v for k, v in data.items() if v is not None}}
    merged.setdefault("category", "other")
    merged.setdefault("why", "the reviewer's change")
    merged.setdefault("predicted_speedup", 1.0)
    if "what" not in merged:
        raise ReviewError("a proposal needs 'what': the change, concretely")
    if not original or merged.get("what") != original.get("what"):
        key = data.get("key")
        if original and key == original.get("key"):  # a form that sends every field back (Agent Chat UI) kept it
            key = None
        merged["key"] = key or "reviewer:" + " ".join(str(merged["what"]).split())[:60]
    try:
        return Proposal.model_validate(merged).model_dump()
    except ValidationError as e:
        err = e.errors()[0]
        raise ReviewError(f"proposal field {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None


def for_coder(proposal: dict[str, Any], parent_src: str, coder: str) -> dict[str, Any]:
    """A person's proposal as the run's coder will take it. The builtin coder applies knob changes only: the
    proposal must name a knob of the parent and its new value, and its key becomes that move's (so the move
    counts as tried on the parent); ReviewError, saying what it can apply, otherwise. A model coder takes
    any proposal."""
    if coder != "builtin":
        return proposal
    from .builtin import cannot_apply, move_for, named_move

    p = Proposal.model_validate(proposal)
    try:
        move = move_for(parent_src, p)
    except KeyError:
        move = named_move(parent_src, p)
    if move is None:
        raise ReviewError(cannot_apply(parent_src))
    category = proposal.get("category")
    if category in (None, "other"):  # the kind of move, so bans and the lineage's statistics see it
        category = getattr(move, "category", None) or move.moves[0].category  # type: ignore[union-attr]
    return {**proposal, "key": move.key, "category": category}


def apply(state: dict[str, Any], decision: Decision) -> dict[str, Any]:
    """The branch update a decision makes: the proposal the coder gets (or none), the kernel the reviewer gave,
    and the review record for the trace."""
    original = state.get("proposal")
    record = ReviewRecord(decision=decision.type, by=decision.by, at=decision.at or now(), message=decision.message)
    if decision.type == "approve":
        if not original:
            raise ReviewError("there is no proposal to approve: respond with one, or reject to skip the step")
        return {"review": record.model_dump()}
    if decision.type == "reject":
        return {"review": record.model_dump()}
    if decision.type == "edit":
        if not decision.proposal:
            raise ReviewError("edit needs the edited proposal")
        record.original_proposal = original
        return {"proposal": proposal_of(decision.proposal, original), "review": record.model_dump()}
    # respond: the person plays the strategist (a proposal) or the coder (the child kernel)
    record.original_proposal = original
    if decision.kernel:
        record.kernel_given = True
        given = {"category": "other", "what": decision.message or "a kernel written by the reviewer",
                 "why": "given by the reviewer", "predicted_speedup": 1.0, "key": "reviewer:kernel"}
        return {"proposal": proposal_of(given), "review": record.model_dump(), "given_kernel": decision.kernel}
    if not decision.proposal:
        raise ReviewError("respond needs a proposal of your own or the child kernel's source")
    return {"proposal": proposal_of(decision.proposal), "review": record.model_dump()}


def banned(proposal: dict[str, Any] | None, steering: Steering) -> str | None:
    """The ban a proposal breaks, if any: its category, or a prefix of its key."""
    if not proposal:
        return None
    for b in steering.banned:
        if proposal.get("category") == b or str(proposal.get("key", "")).startswith(b):
            return b
    return None


