"""Review points in the graph, in process with a scripted model: a step paused after its strategist is
resumed by a new driver (the first one gone) without the analyst or the strategist running again; the
person's steering reaches the strategist's prompt; a rejection's reason reaches the next strategist; an
unattended run (`review: none`) never pauses and records no review."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from kernelwright import api

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests" / "graphs" / "add_problem.py"
SEED = ROOT / "tests" / "graphs" / "add_seed.py"
sys.path.insert(0, str(ROOT / "tests" / "agents"))
from scripted import DIAGNOSIS, PROPOSAL, Scripted, call  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _wait_pending(run_id: str, runs: Path, step: str, timeout: float = 120) -> api.PendingReview:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p in api.pending_reviews(run_id, runs_dir=runs):
            if p.step_id == step:
                return p
        time.sleep(0.1)
    raise AssertionError(f"{step} was never posted for review")


def _config(**kw: object) -> api.RunConfig:
    return api.RunConfig(**{"device": "cpu", "trials": 1, "branches": 1, "iterations": 2, "model": "scripted:m",
                            "review": "proposals", **kw})  # type: ignore[arg-type]


def test_a_new_driver_resumes_a_paused_step_without_redoing_the_strategist(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = Scripted(script=[call("Diagnosis", DIAGNOSIS, 0), call("Proposal", PROPOSAL, 1)])
    h1 = api.start_run(PROBLEM, seed_kernel=SEED, config=_config(iterations=1), runs_dir=runs,
                       models={"scripted:m": first})
    t = threading.Thread(target=h1.run_to_end, daemon=True)
    t.start()
    p = _wait_pending(h1.id, runs, "g1b0")
    assert p.proposal and p.proposal["key"] == "BLOCK=512" and p.diagnosis and p.diagnosis["bottleneck"] == "memory"
    h1.request_stop()  # the first driver goes away while the review waits
    t.join(30)
    assert not t.is_alive() and not first.script
    h1.close()
    assert h1.info().status == "awaiting review" and h1.run.trace() == []

    api.review(h1.id, "edit", proposal={"why": "the reviewer's reason"}, runs_dir=runs, by="test")
    # the second driver's model can only code: an analyst or strategist call would break its script
    second = Scripted(script=[call("search_replace", {"old": "BLOCK = 256\n", "new": "BLOCK = 512\n"}, 0),
                              call("quick_check", {}, 1), call("finish", {}, 2)])
    with api.resume_run(h1.id, runs_dir=runs, models={"scripted:m": second}) as h2:
        info = h2.run_to_end()
    assert not second.script and len(second.seen) == 3, "the analyst or the strategist ran again"
    (step,) = api.open_run(h1.id, runs).steps()
    assert step.review and step.review.decision == "edit" and step.review.by == "test"
    assert step.proposal and step.proposal.why == "the reviewer's reason" and step.proposal.key == "BLOCK=512"
    assert step.review.original_proposal and step.review.original_proposal["why"] == PROPOSAL["why"]
    assert step.verdict == "pass" and info.status == "finished"
    assert api.pending_reviews(h1.id, runs_dir=runs) == []


def test_steering_and_a_rejection_reach_the_strategist(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    m = Scripted(script=[call("Diagnosis", DIAGNOSIS, 0), call("Proposal", PROPOSAL, 1),
                         call("Diagnosis", DIAGNOSIS, 2),
                         call("Proposal", {**PROPOSAL, "what": "NUM_WARPS 4 -> 8", "key": "NUM_WARPS=8",
                                           "category": "warps"}, 3),
                         call("search_replace", {"old": "NUM_WARPS = 4\n", "new": "NUM_WARPS = 8\n"}, 4),
                         call("finish", {}, 5)])
    # one iteration: a rejected proposal does not count against the budget, so g2b0 is still made
    with api.start_run(PROBLEM, seed_kernel=SEED, config=_config(iterations=1), runs_dir=runs,
                       models={"scripted:m": m}) as h:
        t = threading.Thread(target=h.run_to_end, daemon=True)
        t.start()
        _wait_pending(h.id, runs, "g1b0")
        api.steer(h.id, "note", "leave the block size alone", runs_dir=runs)
        api.steer(h.id, "ban", "pipelining", runs_dir=runs)
        with pytest.raises(api.UsageError, match="kind of move"):
            api.steer(h.id, "ban", "everything", runs_dir=runs)
        api.review(h.id, "reject", message="the block size is fine as it is", runs_dir=runs)
        _wait_pending(h.id, runs, "g2b0")
        api.review(h.id, "approve", runs_dir=runs)
        t.join(120)
    second_strategist = m.seen[3][0].content
    assert "leave the block size alone" in second_strategist and "pipelining" in second_strategist
    assert "rejected by the reviewer: the block size is fine as it is" in second_strategist  # the history
    assert "the reviewer rejected BLOCK=512 on this lineage: the block size is fine as it is" in second_strategist
    assert "reviewer" not in m.seen[1][0].content, "steering given after the first proposal leaked into it"
    s1, s2 = api.open_run(h.id, runs).steps()
    assert s1.review and s1.review.decision == "reject" and s1.child is None and s1.steering is None
    assert s2.steering and s2.steering.notes == ["leave the block size alone"] and s2.steering.banned == ["pipelining"]
    assert s2.verdict == "pass" and s1.decision.predicted_speedup is None
    assert api.open_run(h.id, runs).info().status == "finished"


def test_an_unattended_run_never_pauses(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with api.start_run(PROBLEM, seed_kernel=SEED, config=api.RunConfig(device="cpu", trials=1, iterations=2),
                       runs_dir=runs) as h:
        info = h.run_to_end()
    assert info.status == "finished"
    steps = api.open_run(h.id, runs).steps()
    assert len(steps) == 2 and all(s.review is None and s.steering is None for s in steps)
    assert not (h.path / "review" / "pending.json").exists() or api.pending_reviews(h.id, runs_dir=runs) == []


def test_a_persons_knob_proposal_reaches_the_builtin_coder_with_any_value(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    cfg = api.RunConfig(device="cpu", trials=1, branches=1, iterations=1, review="proposals")
    with api.start_run(PROBLEM, seed_kernel=SEED, config=cfg, runs_dir=runs) as h:
        t = threading.Thread(target=h.run_to_end, daemon=True)
        t.start()
        _wait_pending(h.id, runs, "g1b0")
        with pytest.raises(api.UsageError, match="builtin coder applies knob changes only"):
            api.review(h.id, "respond", proposal="fuse the two loads", runs_dir=runs)
        # 64 is not a neighbour the catalog would offer from 256: a person may still ask for it
        api.review(h.id, "respond", proposal="BLOCK 256 -> 64", runs_dir=runs)
        t.join(120)
    (step,) = api.open_run(h.id, runs).steps()
    assert step.proposal and step.proposal.key == "BLOCK=64" and step.verdict == "pass"
    assert "BLOCK = 64" in h.run.kernel(step.child or "")
