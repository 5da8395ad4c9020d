"""The timed repetitions and the choice of those checked (docs/verifier.md item 30), on the CPU with a scripted
transport standing in for a worker: a candidate honest only where the old rule looked (the last repetition
of each input set) or on a fixed share of its calls is caught; an honest one passes; the choice is made after
each repetition ran; a timing that outlasts its limit is a timeout. The same attack on a real GPU worker is
tests/gpu/fixtures/b30_unchecked_reps.py."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from kernelwright.evaluators.judge import Reject, compare_all
from kernelwright.evaluators.pool import WorkerFault
from kernelwright.evaluators.result import Reason
from kernelwright.evaluators.timed import CHECK_SHARE, time_candidate
from kernelwright.evaluators.timing import Samples, split_flag

REPS = 30


class Scripted:
    """A worker's timing side: `honest(r)` says whether repetition r computes the whole answer. Every call is
    logged, so the order of the judge's decisions can be checked."""

    def __init__(self, sets: list[list[Any]], honest: Any, fast_when_cheating: bool = True) -> None:
        self.sets = sets
        self.honest = honest
        self.fast = fast_when_cheating
        self.log: list[tuple[str, int]] = []
        self.r = -1
        self.i = 0
        self.done_calls = 0

    def time_begin(self, sets: list[list[Any]], warmup: int, timeout: float) -> dict[str, Any]:
        self.log.append(("begin", warmup))
        return {"ok": True}

    def time_rep(self, i: int, timeout: float, phase: str) -> dict[str, Any]:
        self.r += 1
        self.i = i
        self.log.append(("rep", self.r))
        ms = 1.0 if self.honest(self.r) or not self.fast else 0.5
        return {"ok": True, "event_ms": ms, "wall_ms": ms + 0.05, "outer_ms": ms + 0.02, "pre_ms": 0.02,
                "outputs": 1}

    def time_output(self, timeout: float, out_bytes: int) -> tuple[dict[str, Any], list[torch.Tensor]]:
        self.log.append(("output", self.r))
        x, y = self.sets[self.i]
        out = x + y
        if not self.honest(self.r):
            out[out.numel() // 2:] = 0.0  # only part of the tiles computed
        return {"ok": True}, [out]

    def time_done(self) -> None:
        self.done_calls += 1

    def time_end(self, timeout: float) -> dict[str, Any]:
        self.log.append(("end", 0))
        return {"ok": True}


class NoProcesses:
    def stray_processes(self) -> list[int]:
        return []


def make_sets(n: int) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(n)
    return [[torch.randn(64, generator=g), torch.randn(64, generator=g)] for _ in range(n)]


def run(transport: Scripted, sets: list[list[torch.Tensor]], seed: int, **kw: Any):
    def check(k: int, outs: list[torch.Tensor], label: str) -> None:
        x, y = sets[k]
        compare_all(outs, [(x.double() + y.double())], 1e-4, label)

    return time_candidate(transport, NoProcesses(), sets, REPS, 3, check, call_s=10, total_s=60, out_bytes=256,
                          rng=random.Random(seed), **kw)


def test_honest_candidate_passes_and_a_sample_is_checked() -> None:
    sets = make_sets(2)
    t = Scripted(sets, honest=lambda r: True)
    timed = run(t, sets, seed=1)
    assert len(timed.samples.event_ms) == REPS and timed.samples.pre_ms and timed.samples.outer_ms
    assert 0 < len(timed.checked) < REPS
    assert t.done_calls == len(timed.checked)
    assert t.log[0][0] == "begin" and t.log[-1][0] == "end"


@pytest.mark.parametrize("n_sets", [1, 2, 5])
def test_partial_except_where_the_old_rule_looked_is_caught(n_sets: int) -> None:
    """The attack that passed on an H200: honest only on the last repetition of each input set (all the old
    timing re-checked), partial elsewhere — at sizes where few input sets fit."""
    sets = make_sets(n_sets)
    last = {max(r for r in range(REPS) if r % n_sets == k) for k in range(n_sets)}
    for seed in range(20):
        t = Scripted(sets, honest=lambda r: r in last)
        with pytest.raises(Reject) as e:
            run(t, sets, seed=seed)
        assert e.value.reason == Reason.WRONG_OUTPUT and e.value.check == "timing"
        assert "timed repetition" in e.value.detail


def test_cheating_on_half_the_repetitions_escapes_rarely() -> None:
    """To move the median a candidate must be partial on at least half its repetitions; with each checked
    with probability CHECK_SHARE, chosen afterwards, it escapes with (1 - share)^15 (< 1e-3)."""
    sets = make_sets(3)
    escaped = 0
    trials = 400
    for seed in range(trials):
        rng = random.Random(10_000 + seed)
        cheat = set(rng.sample(range(REPS), REPS // 2))
        t = Scripted(sets, honest=lambda r, c=cheat: r not in c)
        try:
            run(t, sets, seed=seed)
            escaped += 1
        except Reject:
            pass
    assert (1 - CHECK_SHARE) ** (REPS // 2) < 1e-3
    assert escaped <= 2, f"{escaped} of {trials} escaped"


def test_the_choice_is_made_after_the_repetition_ran() -> None:
    """An output is only ever fetched right after its own repetition, and the decision draws on the random
    source only after the repetition's reply: a candidate learns whether a call was checked only once it is
    over, and the draws are independent of everything it did."""
    sets = make_sets(2)
    events: list[str] = []

    class Watched(random.Random):
        def random(self) -> float:
            events.append("draw")
            return super().random()

    t = Scripted(sets, honest=lambda r: True)
    orig = t.time_rep

    def rep(i: int, timeout: float, phase: str) -> dict[str, Any]:
        events.append("rep")
        return orig(i, timeout, phase)

    t.time_rep = rep  # type: ignore[method-assign]

    def check(k: int, outs: list[torch.Tensor], label: str) -> None:
        pass

    time_candidate(t, NoProcesses(), sets, REPS, 3, check, call_s=10, total_s=60, out_bytes=256, rng=Watched(3))
    assert events == ["rep", "draw"] * REPS
    fetched = [r for op, r in t.log if op == "output"]
    reps = [r for op, r in t.log if op == "rep"]
    for r in fetched:  # each fetch follows its own repetition, before the next
        assert t.log.index(("output", r)) == t.log.index(("rep", r)) + 1
    assert len(reps) == REPS


def test_worker_failures_and_changing_outputs_are_verdicts() -> None:
    sets = make_sets(2)

    class Failing(Scripted):
        def time_rep(self, i: int, timeout: float, phase: str) -> dict[str, Any]:
            h = super().time_rep(i, timeout, phase)
            if self.r == 7:
                return {"ok": False, "kind": "cuda_error", "detail": "illegal address"}
            if self.r == 9:
                h["outputs"] = 2
            return h

    with pytest.raises(Reject) as e:
        run(Failing(sets, honest=lambda r: True), sets, seed=0)
    assert e.value.reason == Reason.CUDA_ERROR and "timed repetition 8/30" in e.value.detail

    class Recorded(Scripted):
        def time_rep(self, i: int, timeout: float, phase: str) -> dict[str, Any]:
            h = super().time_rep(i, timeout, phase)
            if self.r == 4:
                h["ops"] = {"add": 1}
                h["violations"] = ["threading.Thread"]
            return h

    with pytest.raises(Reject) as e:
        run(Recorded(sets, honest=lambda r: True), sets, seed=0)
    assert e.value.reason == Reason.FORBIDDEN_CALL


def test_a_timing_past_its_limit_is_a_timeout() -> None:
    sets = make_sets(1)
    t = Scripted(sets, honest=lambda r: True)

    def check(k: int, outs: list[torch.Tensor], label: str) -> None:
        pass

    with pytest.raises(WorkerFault) as e:
        time_candidate(t, NoProcesses(), sets, REPS, 3, check, call_s=10, total_s=-1.0, out_bytes=256,
                       rng=random.Random(0))
    assert e.value.reason == Reason.TIMEOUT and "1 of 30 repetitions" in e.value.detail


def test_split_flag() -> None:
    """Checked repetitions slower than the unchecked ones (what a candidate that could tell them apart would
    show) are flagged; an honest spread is not."""
    rng = random.Random(0)
    honest = Samples(event_ms=[1.0 + rng.gauss(0, 0.01) for _ in range(REPS)])
    checked = list(range(0, REPS, 3))
    assert split_flag(honest, checked, 0.02) is None
    told = Samples(event_ms=[1.0 if r in checked else 0.6 for r in range(REPS)])
    flag = split_flag(told, checked, 0.02)
    assert flag and "checked repetitions ran slower" in flag
    assert split_flag(told, checked[:3], 0.02) is None  # too few to say
