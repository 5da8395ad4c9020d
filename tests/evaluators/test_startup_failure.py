"""A worker that fails before any candidate code reached it is the evaluator's failure, never the candidate's.

On an H100 a worker whose CUDA context could not be made (the device was full) exited with status 3 during its
start-up, and the evaluation said `fail`/`crashed`: "the candidate's process exited (status 3) during start-up: a
candidate must return from forward, never exit"; a tuning variant read as crashed and a profile's breakdown as a
kernel that exited. Here a worker is made to fail the same way on the CPU: its device string is one its own
set-up (`worker.Session`, `_device_setup`) refuses, so it prints the traceback and `main()` returns 3, the exit
status of a set-up that failed. Every path that waits for a worker must say verdict "error", `evaluator_error`,
with the exit status and the worker's own last output line; a death after a request reached it stays the
candidate's.
"""

from __future__ import annotations

import os
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelwright.evaluators import EvalPolicy, Evaluator, load_problem
from kernelwright.evaluators.pool import Limits, Worker, WorkerFault, WorkerPool, WorkerStartFailure
from kernelwright.evaluators.profiling import profile_candidate
from kernelwright.evaluators.result import EvalResult, Reason

BLAME = "a candidate must return from forward"
BAD_DEVICE = "cpu:bogus"
"""a device string the worker's own set-up refuses (torch.device raises): its process exits with status 3"""

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return 2 * x


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
"""An honest doubling kernel: the worker never gets to load it."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _double[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return y
'''


class _BrokenPool(WorkerPool):
    """A CPU pool whose every worker fails in its own start-up, before any candidate is sent to it."""

    def _new(self) -> Worker:
        return Worker(BAD_DEVICE, self.limits)


@pytest.fixture()
def broken_pool() -> Iterator[WorkerPool]:
    with _BrokenPool("cpu", Limits(), spares=0) as pool:
        yield pool


def _says_start_failure(detail: str) -> None:
    assert "the worker failed to start: " in detail and "before the candidate was loaded" in detail, detail
    assert "not the candidate's" in detail, detail
    assert "exited (status 3)" in detail, detail
    assert "Invalid device string" in detail, detail  # the last line of the worker's own traceback
    assert BLAME not in detail, detail


def test_worker_that_exits_during_start_up_is_the_evaluators_failure() -> None:
    w = Worker(BAD_DEVICE, Limits())
    try:
        with pytest.raises(WorkerStartFailure) as caught:
            w.wait_ready()
        fault = caught.value
        assert fault.reason == Reason.EVALUATOR_ERROR
        assert fault.status == 3
        _says_start_failure(fault.detail)
        with pytest.raises(WorkerStartFailure) as again:  # a request on it waits for the same start-up
            w.request({"op": "load"}, {"source": CANDIDATE}, 30.0, "import and construction")
        assert again.value is fault
    finally:
        w.close()


def test_evaluation_and_quick_check_on_a_worker_that_cannot_start_are_errors(
        tmp_path: Path, broken_pool: WorkerPool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    problem = tmp_path / "double.py"
    problem.write_text(textwrap.dedent(PROBLEM))
    with Evaluator(load_problem(problem), "cpu", EvalPolicy(trials=1, compile_mode=None), pool=broken_pool) as ev:
        for quick in (False, True):
            result = ev.evaluate(textwrap.dedent(CANDIDATE), quick=quick)
            assert (result.verdict, result.reason) == ("error", Reason.EVALUATOR_ERROR), (quick, result.detail)
            _says_start_failure(result.detail)
            assert all(BLAME not in c.detail for c in result.checks), result.checks
            assert "Invalid device string" in result.candidate_log  # the whole traceback is kept for a reader


def test_profile_whose_worker_cannot_start_does_not_blame_the_candidate(broken_pool: WorkerPool) -> None:
    """The profiled run of a verified candidate (CUDA named, so the profile does not stop at "no GPU"; the broken
    pool's worker fails before anything of the device is used)."""
    judged = EvalResult(verdict="pass", reason=Reason.OK, device="cuda:0")
    prof = profile_candidate(judged, device=torch.device("cuda", 0), pool=broken_pool, worker_limits=Limits(),
                             phase_limits={"load_s": 30.0, "first_call_s": 30.0}, load_payload={"source": CANDIDATE},
                             draw_inputs=lambda: [torch.randn(8, 16)], ncu=False)
    why = prof.breakdown_unavailable or ""
    assert why.startswith("no profiled run: "), why
    _says_start_failure(why)
    assert "the profiled run failed" not in prof.text and BLAME not in prof.text, prof.text


def test_death_after_a_request_reached_the_worker_stays_the_candidates() -> None:
    """The boundary: once a request reached a ready worker, its death keeps the message it always had."""
    w = Worker("cpu", Limits())
    try:
        w.wait_ready()
        assert w.request({"op": "nope"}, None, 30.0, "a test")[0]["kind"] == "protocol"
        os.kill(w.proc.pid, signal.SIGTERM)
        with pytest.raises(WorkerFault) as caught:
            w.request({"op": "nope"}, None, 30.0, "the first forward")
        assert not isinstance(caught.value, WorkerStartFailure)
        assert caught.value.reason == Reason.CRASHED
        assert caught.value.detail == "the candidate's process died from SIGTERM during the first forward"
    finally:
        w.close()


def test_worker_that_ended_after_ready_before_any_request_is_the_evaluators_failure() -> None:
    """Ready, then gone before the load request (the candidate's source) could reach it: still not the candidate."""
    w = Worker("cpu", Limits())
    try:
        w.wait_ready()
        os.kill(w.proc.pid, signal.SIGTERM)
        w.proc.wait(timeout=30)
        with pytest.raises(WorkerStartFailure) as caught:
            w.request({"op": "load"}, {"source": CANDIDATE}, 30.0, "import and construction")
        assert caught.value.reason == Reason.EVALUATOR_ERROR
        assert ("its process died from SIGTERM after it said it was ready, before the first request reached it"
                in caught.value.detail), caught.value.detail
        assert BLAME not in caught.value.detail
    finally:
        w.close()


def test_a_spare_that_failed_its_start_up_is_not_handed_out() -> None:
    """A spare started ahead (`prepare`) that failed, or ended, stays in the pool no longer: `acquire` closes it and
    hands out a worker that can start, so the next evaluation is not an `error` for it."""
    with WorkerPool("cpu", Limits(), spares=0) as pool:
        dead = Worker(BAD_DEVICE, Limits())
        dead.proc.wait(timeout=60)
        pool._ready.append(dead)
        w = pool.acquire()
        try:
            assert w is not dead and dead.proc.poll() is not None
            assert w.wait_ready().get("op") == "ready"
        finally:
            w.close()


def test_an_evaluation_whose_worker_cannot_start_is_tried_once_more(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that could not start (a device full for a moment) costs the candidate nothing: the evaluation is made
    once more with a fresh worker, and that verdict stands, with a check saying so."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    problem = tmp_path / "double.py"
    problem.write_text(textwrap.dedent(PROBLEM))

    class FirstBroken(WorkerPool):
        made = 0

        def _new(self) -> Worker:
            FirstBroken.made += 1
            return Worker(BAD_DEVICE if FirstBroken.made == 1 else "cpu", self.limits)

    with FirstBroken("cpu", Limits(), spares=0) as pool, \
            Evaluator(load_problem(problem), "cpu", EvalPolicy(trials=1, compile_mode=None), pool=pool) as ev:
        result = ev.evaluate(textwrap.dedent(CANDIDATE))
    assert result.verdict == "pass", (result.reason, result.detail)
    assert result.checks[0].name == "worker_start" and "judged again with a fresh worker" in result.checks[0].detail
