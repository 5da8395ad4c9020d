"""The device memory ledger (`evaluators/ledger.py`): evaluations in flight on one device planned together.

Unit tests of admission, the first-come-first-served queue, release on every path, the timing turn (no
deadlock) and the budget seen as if alone, with fake byte counts; then evaluations judged by real workers on
the CPU, several threads at once, with the device's memory stated small (`EvalPolicy.device_memory_bytes`) so
that they must queue; a problem too large even alone is refused at once, busy device or not; and a candidate
that runs out of memory beside others is judged again alone before its verdict stands.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelwright.evaluators import EvalPolicy, EvalResult, Evaluator, Reason, load_problem
from kernelwright.evaluators.footprint import estimate
from kernelwright.evaluators.ledger import DeviceMemory, MemoryLedger, Reservation, ledger_for, measure
from kernelwright.evaluators.memory import RESERVE_BYTES, WORKER_STATE_BYTES, plan_memory

pytestmark = pytest.mark.timeout(600)


def ledger(worker_state: int = 0) -> MemoryLedger:
    return MemoryLedger("test", worker_state_bytes=worker_state, poll_s=0.01)


def fixed(n: int) -> Any:
    return lambda: n


class Waiter:
    """`ledger.admit(...)` in a thread of its own, so a test can see whether it is still waiting."""

    def __init__(self, led: MemoryLedger, *args: Any, **kwargs: Any) -> None:
        self.reservation: Reservation | None = None
        self.error: BaseException | None = None
        self.admitted_at: float | None = None
        self._thread = threading.Thread(target=self._run, args=(led, args, kwargs), daemon=True)
        self._thread.start()

    def _run(self, led: MemoryLedger, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        try:
            self.reservation = led.admit(*args, **kwargs)
            self.admitted_at = time.monotonic()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e

    def done(self, within: float = 5.0) -> bool:
        self._thread.join(within)
        return not self._thread.is_alive()


def queued(led: MemoryLedger, n: int, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while led.waiting < n:
        assert time.monotonic() < deadline, f"{led.waiting} waiting, expected {n}"
        time.sleep(0.005)


# -- admission and the queue ------------------------------------------------------------------------------


def test_admits_what_fits_and_queues_the_rest() -> None:
    led = ledger()
    a = led.admit(60, budget=fixed(100))
    assert a.waited_s < 1 and led.reserved == 60
    b = Waiter(led, 50, budget=fixed(100))
    assert not b.done(0.3), "60 + 50 does not fit in 100: the second must wait"
    a.release()
    assert b.done() and b.reservation is not None
    assert b.reservation.waited_s >= 0.25 and led.reserved == 50
    assert a.others == 0, "nothing else was in flight beside the first"
    b.reservation.release()
    assert led.in_flight == 0 and led.reserved == 0


def test_every_evaluation_beyond_the_first_is_charged_its_worker() -> None:
    led = ledger(worker_state=10)
    a = led.admit(45, budget=fixed(100))
    b = Waiter(led, 50, budget=fixed(100))
    assert not b.done(0.3), "45 + 50 + one more worker's 10 exceed 100"
    a.release()
    assert b.done()
    assert b.reservation is not None
    b.reservation.release()


def test_first_come_first_served_a_large_one_is_not_passed_over() -> None:
    led = ledger()
    a = led.admit(60, budget=fixed(100))
    big = Waiter(led, 80, budget=fixed(100))
    queued(led, 1)
    small = Waiter(led, 30, budget=fixed(100))
    assert not small.done(0.3), "30 would fit beside 60, but the 80 came first"
    a.release()
    assert big.done() and big.reservation is not None
    assert not small.done(0.2), "80 + 30 do not fit: the small one waits for the big one"
    big.reservation.release()
    assert small.done() and small.reservation is not None
    assert big.admitted_at is not None and small.admitted_at is not None and big.admitted_at < small.admitted_at
    small.reservation.release()


def test_released_on_an_exception_and_a_failed_wait_leaves_the_queue() -> None:
    led = ledger()
    with pytest.raises(ValueError):
        with led.admit(60, budget=fixed(100)):
            raise ValueError("the evaluation failed")
    assert led.in_flight == 0 and led.reserved == 0

    held = led.admit(60, budget=fixed(100))

    def broken() -> int:
        raise RuntimeError("the device could not be read")

    failing = Waiter(led, 50, budget=broken)
    assert failing.done() and isinstance(failing.error, RuntimeError)
    after = Waiter(led, 30, budget=fixed(100))
    assert after.done(), "the one behind a failed wait is not stuck behind it"
    assert after.reservation is not None and led.waiting == 0
    after.reservation.release()
    held.release()
    held.release()  # twice is harmless
    assert led.in_flight == 0


def test_alone_is_admitted_whatever_the_budget_reads() -> None:
    """Nothing else of this process is in flight: waiting would not make room (the plan was made alone)."""
    led = ledger()
    r = led.admit(200, budget=fixed(100))
    assert r.waited_s < 1 and r.over_budget
    r.release()


def test_exclusive_waits_for_an_empty_device_and_keeps_it_empty() -> None:
    led = ledger()
    a = led.admit(10, budget=fixed(100))
    alone = Waiter(led, 10, budget=fixed(100), exclusive=True)
    queued(led, 1)
    later = Waiter(led, 10, budget=fixed(100))
    assert not alone.done(0.3)
    a.release()
    assert alone.done() and alone.reservation is not None
    assert not later.done(0.3), "nothing is admitted beside an exclusive reservation"
    alone.reservation.release()
    assert later.done() and later.reservation is not None
    later.reservation.release()


def test_others_in_flight_are_recorded() -> None:
    led = ledger()
    a = led.admit(10, budget=fixed(100))
    b = led.admit(10, budget=fixed(100))
    c = led.admit(10, budget=fixed(100))
    for r in (a, b, c):
        r.release()
    assert (a.others, b.others, c.others) == (2, 2, 2)
    assert c.summary()["others_in_flight"] == 2 and not c.summary()["alone"]


# -- the timing turn ------------------------------------------------------------------------------------


def _time(r: Reservation, led: MemoryLedger, seen: list[int]) -> None:
    r.timing()
    seen.append(led.reserved)
    time.sleep(0.05)
    r.release()


def test_growth_for_the_timing_never_deadlocks() -> None:
    """Two evaluations of trial 45 and timing 90 in 100: both trials would fit, but then each would wait
    for the other to give memory back before it could time. The second is admitted only after the first."""
    led = ledger()
    a = led.admit(45, 90, budget=fixed(100))
    b = Waiter(led, 45, 90, budget=fixed(100))
    assert not b.done(0.3), "45 + 45 fit, but the first one's timing would not fit beside the second"
    seen: list[int] = []
    _time(a, led, seen)
    assert b.done() and b.reservation is not None
    _time(b.reservation, led, seen)
    assert seen == [90, 90] and led.in_flight == 0


def test_trials_overlap_and_timings_take_turns_within_the_budget() -> None:
    led = ledger(worker_state=5)
    budget = fixed(100)
    a = led.admit(30, 55, budget=budget)
    b = led.admit(30, 55, budget=budget)  # 30 + 30 + 5, and one growth of 25 on top: 90
    c = Waiter(led, 30, 55, budget=budget)
    assert not c.done(0.3), "a third trial would leave no room for the next timing"
    seen: list[int] = []
    threads = [threading.Thread(target=_time, args=(r, led, seen)) for r in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "the timings deadlocked"
    assert c.done() and c.reservation is not None
    assert max(seen) <= 100, seen
    c.reservation.release()


def test_a_grower_whose_neighbours_all_wait_is_let_through() -> None:
    """The budget shrank after admission (another process took memory): the grower cannot fit, but every
    other holder waits for the turn it holds, so nothing could give memory back. It goes on, said so."""
    led = ledger()
    box = [100]
    a = led.admit(30, 60, budget=lambda: box[0])
    b = led.admit(30, 60, budget=lambda: box[0])
    box[0] = 70
    seen: list[int] = []
    ta = threading.Thread(target=_time, args=(a, led, seen))
    ta.start()
    ta.join(0.3)
    assert ta.is_alive(), "60 + 30 exceed 70 while the other is still in its trials"
    tb = threading.Thread(target=_time, args=(b, led, seen))
    tb.start()
    ta.join(5)
    tb.join(5)
    assert not ta.is_alive() and not tb.is_alive()
    assert a.over_budget and not b.over_budget


# -- the budget, as if alone ------------------------------------------------------------------------------


class FakePool:
    def __init__(self, n: int) -> None:
        self.n = n

    def started_spares(self) -> int:
        return self.n


def test_alone_bytes_are_not_lowered_by_the_evaluations_in_flight() -> None:
    g = 1
    led = ledger(worker_state=1 * g)
    pool = FakePool(1)
    led.watch(pool)
    assert led.alone_bytes(DeviceMemory(total=80, used=5)) == 75, "idle: what is free, as always"
    r = led.admit(40, budget=fixed(70))
    # in flight, the evaluation uses 30 of its 40 now: still 75 for a plan, not the 45 free this moment
    assert led.alone_bytes(DeviceMemory(total=80, used=35)) == 75
    # another process took 10 beyond everything reserved: seen
    assert led.alone_bytes(DeviceMemory(total=80, used=55)) == 65
    # two more spare workers started meanwhile: one worker's state each
    pool.n = 3
    assert led.alone_bytes(DeviceMemory(total=80, used=35)) == 73
    r.release()
    assert led.alone_bytes(DeviceMemory(total=10, used=0, stated=True)) == 10


def test_measure() -> None:
    host = measure(torch.device("cpu"))
    assert host.total > 0 and 0 <= host.used <= host.total and not host.stated
    assert measure(torch.device("cpu"), stated=123) == DeviceMemory(total=123, used=0, stated=True)


# -- real evaluations on the CPU ------------------------------------------------------------------------------

PROBLEM = '''
import torch
import torch.nn as nn

N = 4099


class Model(nn.Module):
    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
        return out
'''

HOARDER = CANDIDATE.replace("        out = torch.empty_like(x)\n",
                            "        hoard = torch.empty(1 << 52, dtype=torch.uint8)  # far more than any host has\n"
                            "        out = torch.empty_like(x)\n")

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def device_ledger_left_empty() -> Any:
    led = ledger_for(CPU)
    assert led.in_flight == 0 and led.waiting == 0
    yield
    assert led.in_flight == 0 and led.waiting == 0, "an evaluation left its reservation behind"


def _problem(tmp_path: Path, source: str = PROBLEM) -> Path:
    p = tmp_path / "problem.py"
    p.write_text(source)
    return p


def _tight(problem: Path) -> int:
    """A stated device size whose budget holds one evaluation of `problem`, never two."""
    est = estimate(load_problem(problem))
    assert est.native is not None
    need = plan_memory(est.native, est.gold, 1 << 40, reps=30, pool_bytes=4 << 30).trial_bytes
    budget = need + WORKER_STATE_BYTES // 2
    return int((budget + RESERVE_BYTES) / 0.95) + 1


def _at_once(ev: Evaluator, sources: list[str]) -> list[EvalResult]:
    results: list[EvalResult | None] = [None] * len(sources)

    def one(k: int) -> None:
        results[k] = ev.evaluate(sources[k])

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(sources))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(400)
    assert all(r is not None for r in results), "an evaluation did not finish"
    return [r for r in results if r is not None]


def test_concurrent_evaluations_queue_within_a_small_budget(tmp_path: Path) -> None:
    problem = _problem(tmp_path)
    policy = EvalPolicy(trials=1, device_memory_bytes=_tight(problem))
    with Evaluator(load_problem(problem), "cpu", policy) as ev:
        results = _at_once(ev, [CANDIDATE] * 3)
    for r in results:
        assert r.verdict == "pass", f"{r.reason}: {r.detail}"
        assert r.memory is not None and r.memory["ledger"]["others_in_flight"] == 0, \
            "the budget holds one evaluation: none may have had company"
        assert "memory_wait_s" in r.phases
    waited = sorted(r.phases["memory_wait_s"] for r in results)
    assert waited[1] > 0.5 and waited[2] > waited[1], f"two of the three must have queued: {waited}"


def test_concurrent_evaluations_overlap_where_they_fit(tmp_path: Path) -> None:
    """The same three with room for all: they run at once (so the test above can tell queuing from luck)."""
    policy = EvalPolicy(trials=1, device_memory_bytes=1 << 40)
    with Evaluator(load_problem(_problem(tmp_path)), "cpu", policy) as ev:
        results = _at_once(ev, [CANDIDATE] * 3)
    assert all(r.verdict == "pass" for r in results), [f"{r.reason}: {r.detail}" for r in results]
    assert max(r.memory["ledger"]["others_in_flight"] for r in results if r.memory) >= 1


def test_too_large_even_alone_is_refused_at_once_on_a_busy_device(tmp_path: Path) -> None:
    """1 GB of input on a device stated at 5 GiB (0.75 GiB usable): problem_too_large before any queue, even
    while the device's ledger is full."""
    problem = _problem(tmp_path, PROBLEM.replace("N = 4099", "N = 250_000_000"))
    busy = ledger_for(CPU).admit(1 << 50, label="a neighbour holding everything")
    try:
        t0 = time.monotonic()
        with Evaluator(load_problem(problem), "cpu", EvalPolicy(trials=1, spares=0,
                                                                device_memory_bytes=5 << 30)) as ev:
            r = ev.evaluate(CANDIDATE)
        assert r.verdict == "error" and r.reason == Reason.PROBLEM_TOO_LARGE, f"{r.reason}: {r.detail}"
        assert "one trial needs" in r.detail
        assert time.monotonic() - t0 < 60
    finally:
        busy.release()


def _judged_beside_a_neighbour(ev: Evaluator, source: str) -> EvalResult:
    """`ev.evaluate(source)` while another reservation is in flight on the device; the neighbour leaves as soon
    as anything queues behind it (a judgement asking to be alone)."""
    led = ledger_for(CPU)
    neighbour = led.admit(1 << 20, label="a neighbour")
    box: list[EvalResult] = []
    t = threading.Thread(target=lambda: box.append(ev.evaluate(source)))
    t.start()
    try:
        while t.is_alive() and led.waiting == 0:
            time.sleep(0.01)
    finally:
        neighbour.release()
    t.join(300)
    assert box, "the evaluation did not finish"
    return box[0]


def test_out_of_memory_beside_others_is_judged_again_alone(tmp_path: Path) -> None:
    """A candidate that runs out of memory while another evaluation is in flight is judged again alone; its
    own hoarding fails it there too, so the verdict stands, and says it was judged alone."""
    policy = EvalPolicy(trials=1, device_memory_bytes=1 << 40)
    with Evaluator(load_problem(_problem(tmp_path)), "cpu", policy) as ev:
        r = _judged_beside_a_neighbour(ev, HOARDER)
        assert r.reason == Reason.OUT_OF_MEMORY, f"{r.reason}: {r.detail}"
        assert r.memory is not None and r.memory["ledger"]["alone"] and r.memory["ledger"]["others_in_flight"] == 0
        assert r.checks[0].name == "memory" and "judged again alone" in r.checks[0].detail
        assert r.phases["crowded_judgement_s"] > 0 and r.phases["memory_wait_s"] > 0
        alone = ev.evaluate(HOARDER)  # nothing else in flight: its verdict stands at once
    assert alone.reason == Reason.OUT_OF_MEMORY
    assert alone.memory is not None and not alone.memory["ledger"]["alone"]
    assert all(c.name != "memory" for c in alone.checks) and "crowded_judgement_s" not in alone.phases


def test_a_verdict_alone_replaces_an_out_of_memory_beside_others(tmp_path: Path) -> None:
    """The decision itself: out of memory with company -> judged again alone, and the alone verdict (a pass
    here) is the one returned; out of memory with no company stands."""
    with Evaluator(load_problem(_problem(tmp_path)), "cpu", EvalPolicy(trials=1, spares=0)) as ev:
        calls: list[bool] = []

        def judge(source: str, quick: bool = False, alone: bool = False) -> tuple[EvalResult, bool]:
            calls.append(alone)
            if alone:
                return EvalResult(verdict="pass", reason=Reason.OK, memory={"ledger": {"others_in_flight": 0}}), False
            return EvalResult(verdict="fail", reason=Reason.OUT_OF_MEMORY, detail="CUDA out of memory",
                              memory={"ledger": {"others_in_flight": 3}}), True

        ev._judge = judge  # type: ignore[method-assign]
        r = ev.evaluate(CANDIDATE)
        assert calls == [False, True] and r.verdict == "pass"
        assert "3 other evaluation(s)" in r.checks[0].detail

        calls.clear()
        ev._judge = lambda source, quick=False, alone=False: (  # type: ignore[method-assign]
            calls.append(alone) or EvalResult(verdict="fail", reason=Reason.OUT_OF_MEMORY,
                                              memory={"ledger": {"others_in_flight": 0}}), True)
        assert ev.evaluate(CANDIDATE).reason == Reason.OUT_OF_MEMORY and calls == [False]


def test_a_cuda_graph_pool_is_not_taken_for_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocator's cached blocks serve this process's next allocations, so they count as free; a private pool's
    (a CUDA graph's: torch.compile's max-autotune baseline) serve none, so they count as used. Taken for cache,
    they let a GroupNorm run on an H100 plan with 15 GB a baseline's graphs held: three evaluations ran out of
    device memory in the reference."""
    gib = 1 << 30
    segments = [
        {"device": 0, "total_size": 10 * gib, "allocated_size": 2 * gib, "segment_pool_id": (0, 0)},  # 8 cached
        {"device": 0, "total_size": 20 * gib, "allocated_size": 5 * gib, "segment_pool_id": (1, 0)},  # 15 kept
        {"device": 1, "total_size": 30 * gib, "allocated_size": 0, "segment_pool_id": (2, 0)},  # another GPU's
    ]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (50 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 30 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 7 * gib)
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda *a, **k: segments)
    from kernelwright.evaluators.ledger import private_idle_bytes
    assert private_idle_bytes(torch.device("cuda:0")) == 15 * gib
    # 30 GiB in use on the device: 8 of them are this process's plain cache; the graph pool's 15 idle are not
    assert measure(torch.device("cuda:0")) == DeviceMemory(total=80 * gib, used=22 * gib)
    # no snapshot: the cache as the allocator reports it, as before
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("none")))
    assert measure(torch.device("cuda:0")) == DeviceMemory(total=80 * gib, used=7 * gib)
