"""Reviews as the roles see them: the request in LangGraph's human-in-the-loop schema, answers in that
schema or ours, a decision applied to a step, proposals checked, bans."""

from __future__ import annotations

import pytest

from kernelwright.agents import proposal_review as reviews
from kernelwright.tools.review_desk import Decision, ReviewError, Steering

PROPOSAL = {"category": "tiling", "what": "BLOCK 256 -> 512", "why": "more bytes in flight", "predicted_speedup": 1.1,
            "risk": "low", "key": "BLOCK=512"}
STATE = {"step_id": "g2b1", "generation": 2, "branch": 1, "parent": "abc" * 5, "parent_label": "the seed",
         "diagnosis": {"bottleneck": "memory", "summary": "bandwidth-bound"}, "proposal": PROPOSAL}


def test_the_request_is_langgraphs_hitl_schema() -> None:
    r = reviews.request(STATE, "run1")
    (action,) = r["action_requests"]
    assert action["name"] == "propose_change" and action["args"] == PROPOSAL and "BLOCK 256 -> 512" in action["description"]
    assert r["review_configs"] == [{"action_name": "propose_change",
                                    "allowed_decisions": ["approve", "edit", "reject", "respond"]}]
    p = reviews.pending_of(r, "iid")
    assert p.step_id == "g2b1" and p.interrupt_id == "iid" and p.proposal == PROPOSAL
    empty = reviews.request({**STATE, "proposal": None, "no_moves": "every move was tried"}, "run1")
    assert empty["review_configs"][0]["allowed_decisions"] == ["reject", "respond"]
    assert "every move was tried" in empty["action_requests"][0]["description"]


def test_answers_in_the_hitl_schema_and_ours() -> None:
    assert reviews.parse({"decisions": [{"type": "approve"}]}).type == "approve"
    e = reviews.parse({"decisions": [{"type": "edit", "edited_action": {"name": "propose_change",
                                                                        "args": {"what": "BLOCK 256 -> 1024"}}}]})
    assert e.type == "edit" and e.proposal == {"what": "BLOCK 256 -> 1024"}
    r = reviews.parse({"decisions": [{"type": "reject", "message": "no"}]})
    assert r.type == "reject" and r.message == "no"
    said = reviews.parse({"decisions": [{"type": "respond", "message": "split each row over 4 programs"}]})
    assert said.proposal and said.proposal["what"] == "split each row over 4 programs"
    kernel = reviews.parse({"type": "respond", "message": "@triton.jit\ndef k(): pass\nclass ModelNew: ..."})
    assert kernel.kernel and kernel.proposal is None
    assert reviews.parse("approve").type == "approve"
    with pytest.raises(ReviewError, match="exactly one"):
        reviews.parse({"decisions": []})
    with pytest.raises(ReviewError, match="not a review decision"):
        reviews.parse({"type": "maybe"})


def test_a_decision_applied_to_the_step() -> None:
    assert reviews.apply(STATE, Decision(type="approve", by="me"))["review"]["by"] == "me"
    edited = reviews.apply(STATE, Decision(type="edit", proposal={"what": "BLOCK 256 -> 1024"}))
    assert edited["proposal"]["what"] == "BLOCK 256 -> 1024" and edited["proposal"]["category"] == "tiling"
    assert edited["proposal"]["key"].startswith("reviewer:"), "a changed change must not reuse the old key"
    assert edited["review"]["original_proposal"] == PROPOSAL
    same = reviews.apply(STATE, Decision(type="edit", proposal={"why": "better reason"}))
    assert same["proposal"]["key"] == "BLOCK=512" and same["proposal"]["why"] == "better reason"
    given = reviews.apply(STATE, Decision(type="respond", kernel="src", message="mine"))
    assert given["given_kernel"] == "src" and given["review"]["kernel_given"]
    rejected = reviews.apply(STATE, Decision(type="reject", message="too risky"))
    assert rejected == {"review": rejected["review"]} and rejected["review"]["message"] == "too risky"
    with pytest.raises(ReviewError, match="nothing|no proposal to approve"):
        reviews.apply({**STATE, "proposal": None}, Decision(type="approve"))
    with pytest.raises(ReviewError, match="predicted_speedup"):
        reviews.proposal_of({"what": "x", "predicted_speedup": "fast"})
    with pytest.raises(ReviewError, match="'what'"):
        reviews.proposal_of({"why": "x"})


def test_bans_by_category_or_key_prefix() -> None:
    s = Steering(banned=["warps", "BLOCK"])
    assert reviews.banned({**PROPOSAL, "category": "warps"}, s) == "warps"
    assert reviews.banned(PROPOSAL, s) == "BLOCK"
    assert reviews.banned({**PROPOSAL, "key": "STAGES=3", "category": "pipelining"}, s) is None
    assert reviews.banned(None, s) is None


def test_an_edit_sent_back_with_every_field_gets_a_key_of_its_own() -> None:
    """A form that sends every field back (Agent Chat UI) returns the original key beside a new `what`: the key
    must not stay, or the builtin coder applies the original move under the edited words."""
    original = {"category": "warps", "what": "NUM_WARPS 8 -> 4", "why": "fewer warps", "predicted_speedup": 1.05,
                "key": "NUM_WARPS=4"}
    edited = reviews.proposal_of({**original, "what": "NUM_STAGES 2 -> 3"}, original)
    assert edited["what"] == "NUM_STAGES 2 -> 3" and edited["key"] == "reviewer:NUM_STAGES 2 -> 3"
    # a key the reviewer changed is theirs; an unchanged `what` keeps the original key
    assert reviews.proposal_of({**original, "what": "NUM_STAGES 2 -> 3", "key": "NUM_STAGES=3"},
                               original)["key"] == "NUM_STAGES=3"
    assert reviews.proposal_of({**original, "why": "reworded"}, original)["key"] == "NUM_WARPS=4"
