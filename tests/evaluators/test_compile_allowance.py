"""The compile allowance (docs/verifier.md item 29): one bounded total per evaluation, stated in the verdict.

A phase that may compile runs past its execution limit only while the worker is seen compiling, and only on
what is left of its evaluation's allowance; cache writes that are not new artefacts buy nothing. Three
layers: the arithmetic and the evidence (pure), the deadline of `Worker._receive` against a fake worker that
never answers (seconds, deterministic), and the adversarial candidates c29_* through the whole evaluator
(their time and the phases' stated allowance).
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernelwright.evaluators import EvalPolicy, EvalResult, Evaluator, Limits, load_problem
from kernelwright.evaluators.pool import CompileLedger, Worker, WorkerFault, declared_variants
from kernelwright.evaluators.result import Reason

ADVERSARIAL = Path(__file__).resolve().parents[1] / "adversarial"
POLL = 0.5
"""how often a waiting phase looks (the socket's timeout in `wire.recv`): the slack of every deadline here"""

AUTOTUNED = '''
import triton
import triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128, 256, 512, 1024)
                          for w in range(1, 5)], key=["n"])
@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pass
'''


# -- the arithmetic -------------------------------------------------------------------------------------


def test_declared_variants_counts_kernels_and_configs() -> None:
    assert declared_variants(AUTOTUNED) == 21  # one @jit and 5 x 4 configs from a comprehension
    listed = "@triton.jit\ndef a(): pass\n@jit\ndef b(): pass\nC = [triton.Config({}), triton.Config({})]\n"
    assert declared_variants(listed) == 4
    assert declared_variants("x = [triton.Config({}) for b in BLOCKS]") == 8  # not literal: 8
    assert declared_variants("def forward(:") == 0
    assert declared_variants("C = [triton.Config({}) for a in range(10**6) for b in range(10**6)]") <= 1024


def test_allowance_arithmetic() -> None:
    lim = Limits()
    # The CPU: the interpreter compiles nothing, whatever the source declares.
    assert lim.compile_allowance("cpu", 0.5, 1000) == lim.cpu_compile_s == 15.0
    # A GPU: base + per declared variant (one compilation, the autotuner's runs of it), capped.
    assert lim.compile_allowance("cuda", 0.001, 21) == pytest.approx(120 + 21 * (15 + 10 * 0.001))
    assert lim.compile_allowance("cuda", 0.0, 0) == 120 + 15  # a source with no kernel still gets one
    assert lim.compile_allowance("cuda", 0.001, 1000) == lim.compile_cap_s == 600
    assert lim.compile_allowance("cuda", 2.0, 40) == 600  # a slow problem's autotuning: still capped
    assert lim.compile_allowance("cuda") == 600  # nothing declared (a profiling worker): the cap
    # Generous for an autotuned kernel with 20 configs: 15 s a config, beside the base.
    assert lim.compile_allowance("cuda", 0.001, declared_variants(AUTOTUNED)) >= 120 + 20 * 15


def test_the_ledger_never_draws_past_the_allowance() -> None:
    phases: dict[str, float] = {}
    ledger = CompileLedger("/nonexistent", allowance_s=10.0, quiet_s=1.0, kernel_s=5.0)
    ledger.state(phases)
    assert phases == {"compile_allowance_s": 10.0, "compile_used_s": 0.0}
    assert ledger.draw(-3.0) == 0.0  # a phase that ended within its execution limit draws nothing
    assert ledger.draw(4.0) == 4.0 and ledger.left() == 6.0
    assert ledger.draw(100.0) == 6.0 and ledger.left() == 0.0  # the load and the forward share one total
    assert ledger.draw(1.0) == 0.0
    assert phases == {"compile_allowance_s": 10.0, "compile_used_s": 10.0}


def _put(cache: Path, key: str, name: str, text: str = "x") -> None:
    (cache / key).mkdir(parents=True, exist_ok=True)
    (cache / key / name).write_text(text)


def test_only_new_artefacts_are_evidence(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _put(cache, "old", "k.cubin")  # there before the evaluation compiled anything
    ledger = CompileLedger(str(cache), allowance_s=60.0, quiet_s=2.0, kernel_s=30.0)
    ledger.begin()
    now = ledger.look()
    assert not ledger.compiling(now)

    _put(cache, "old", "k2.cubin")  # into an entry that was there before: nothing
    (cache / "stray.cubin").write_text("x")  # a file outside any entry: nothing
    assert not ledger.compiling(ledger.look())

    _put(cache, "a", "k.json")  # a new entry: progress, for the quiet window
    now = ledger.look()
    assert ledger.compiling(now) and not ledger.compiling(now + 2.5)
    _put(cache, "a", "k.json", "again")  # a rewrite (fresh mtime, same name): nothing
    os.utime(cache / "a" / "k.json", (time.time() + 3600, time.time() + 3600))  # a time in the future: nothing
    _put(cache, "a", "more.cubin")  # a new name in an entry that was complete on sight: nothing
    assert not ledger.compiling(ledger.look() + 2.5)

    # A compile in progress: its first stage without its group file keeps it alive past the quiet window
    # (ptxas may be silent for long), for at most kernel_s after the entry appeared.
    _put(cache, "b", "k.source")
    now = ledger.look()
    assert ledger.compiling(now + 2.5) and ledger.compiling(now + 29.0) and not ledger.compiling(now + 31.0)
    _put(cache, "b", "k.ttir")  # its next stage
    ledger.look()
    _put(cache, "b", "__grp__k.json")  # complete: no longer a compile in progress
    now = ledger.look()
    assert ledger.compiling(now) and not ledger.compiling(now + 2.5)


def test_an_entry_stops_being_evidence_after_kernel_s(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    ledger = CompileLedger(str(cache), allowance_s=60.0, quiet_s=0.2, kernel_s=0.5)
    cache.mkdir()
    ledger.begin()
    _put(cache, "a", "k.source")
    assert ledger.compiling(ledger.look())
    time.sleep(0.7)
    _put(cache, "a", "k.ttir")  # a new stage, but the entry is older than kernel_s: the bound per kernel
    now = ledger.look()
    assert not ledger.compiling(now)


# -- the deadline, against a fake worker ----------------------------------------------------------------


class _Gone:
    """Stands for the worker's process: already dead, so `kill()` signals nothing."""

    pid = os.getpid()  # `_poll` reads this process's memory figures: far under the limit

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


@pytest.fixture
def fake_worker(tmp_path: Path) -> Iterator[Callable[[Limits], tuple[Worker, socket.socket]]]:
    """A Worker without a process: `_receive` waits on a socket whose other end never answers, while the
    test plays the worker's part in its Triton cache."""
    made: list[socket.socket] = []

    def make(limits: Limits) -> tuple[Worker, socket.socket]:
        w = object.__new__(Worker)
        w.device, w.limits, w.proc, w._oom, w.device_peak = "cpu", limits, _Gone(), False, 0
        w.cache_dir = str(tmp_path / "triton-cache")
        os.makedirs(w.cache_dir, exist_ok=True)
        w.sock, peer = socket.socketpair()
        made.extend((w.sock, peer))
        return w, peer

    yield make
    for s in made:
        s.close()


class _Writer:
    """Plays a stalling candidate's part: every `every` seconds, a new cache entry (or, with `rewrite`,
    the same file again), as Triton's cache manager would put it."""

    def __init__(self, cache: str, every: float = 0.2, rewrite: bool = False, name: str = "k.source") -> None:
        self.cache, self.every, self.rewrite, self.name = Path(cache), every, rewrite, name
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        k = 0
        while not self.stop.wait(self.every):
            k += 1
            _put(self.cache, "0" * 64 if self.rewrite else f"{k:064x}", self.name, str(k))

    def __enter__(self) -> _Writer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _timed(w: Worker, timeout: float, phase: str) -> tuple[float, WorkerFault]:
    t0 = time.monotonic()
    with pytest.raises(WorkerFault) as caught:
        w._receive(timeout, phase, compiles=True)
    assert caught.value.reason == Reason.TIMEOUT, caught.value
    return time.monotonic() - t0, caught.value


def test_a_cache_writing_stall_is_cut_at_the_allowance_across_phases(fake_worker) -> None:
    """The import draws the whole allowance; the first forward, stalling the same way, then gets its
    execution limit only: one total per evaluation, not one per phase."""
    w, _ = fake_worker(Limits(cpu_compile_s=2.0, compile_quiet_s=1.0))
    phases: dict[str, float] = {}
    w.allow_compiling(2.0, phases)
    w.compile_ledger.begin()
    with _Writer(w.cache_dir):
        spent, fault = _timed(w, 0.5, "import and construction")
        assert 0.5 + 2.0 - 0.05 <= spent <= 0.5 + 2.0 + POLL + 0.5, spent
        assert "compile allowance of 2 s, now spent" in fault.detail, fault.detail
        assert phases == {"compile_allowance_s": 2.0, "compile_used_s": 2.0}
        spent, fault = _timed(w, 0.5, "the forward pass")
        assert spent <= 0.5 + POLL + 0.5, spent  # nothing left to draw: the execution limit alone
        assert phases["compile_used_s"] == 2.0


def test_rewriting_the_cache_buys_nothing(fake_worker) -> None:
    w, _ = fake_worker(Limits(cpu_compile_s=30.0, compile_quiet_s=1.0))
    phases: dict[str, float] = {}
    w.allow_compiling(30.0, phases)
    w.compile_ledger.begin()
    _put(Path(w.cache_dir), "0" * 64, "k.json")  # one new entry (seen by an earlier phase), then rewrites
    w.compile_ledger.look()
    with _Writer(w.cache_dir, rewrite=True, name="k.json"):
        time.sleep(1.2)  # its progress is older than the quiet window when the limit passes
        spent, fault = _timed(w, 1.5, "the forward pass")
    assert spent <= 1.5 + POLL + 0.5, spent
    assert phases["compile_used_s"] <= POLL + 0.1, phases
    assert "compile allowance: 0 of 30 s used" in fault.detail, fault.detail


def test_a_trickling_worker_still_meets_the_deadline(fake_worker) -> None:
    """The looks run only while the socket is silent; a worker that sends a byte now and then keeps them
    from running, so the socket's own deadline (execution limit + what is left) must hold alone."""
    w, peer = fake_worker(Limits(cpu_compile_s=1.5, compile_quiet_s=30.0))
    w.allow_compiling(1.5)
    w.compile_ledger.begin()
    stop = threading.Event()

    def trickle() -> None:
        peer.send(struct.pack("!QQ", 1 << 20, 0))  # a message header announcing a large body, then a trickle
        while not stop.wait(0.1):
            try:
                peer.send(b"\0")
            except OSError:
                return

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    try:
        with _Writer(w.cache_dir):
            spent, _ = _timed(w, 0.5, "the forward pass")
    finally:
        stop.set()
        t.join()
    assert spent <= 0.5 + 1.5 + 0.5, spent


# -- the candidates, through the evaluator --------------------------------------------------------------


def _limits_of(candidate: Path) -> Limits:
    m = re.search(r"^LIMITS:\s*(.+?)\s*$", candidate.read_text(), re.M)
    assert m, f"{candidate.name} states no LIMITS"
    return Limits(**{k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())})


def _judge(candidate: str, limits: Limits) -> EvalResult:
    with Evaluator(load_problem(ADVERSARIAL / "problems" / "relu.py"), "cpu",
                   EvalPolicy(trials=2, compile_mode=None, limits=limits, spares=0)) as ev:
        return ev.evaluate((ADVERSARIAL / "candidates" / candidate).read_text())


def _candidate_time(result: EvalResult) -> float:
    """The evaluation's time less what is not the candidate's (the worker's start-up, the plan)."""
    return result.phases["total_s"] - result.phases.get("worker_wait_s", 0.0) - result.phases.get("plan_s", 0.0)


def test_compile_stall_is_judged_within_the_allowance() -> None:
    """c29_compile_stall puts a new cache entry about once a second through Triton's cache manager and
    never returns: it draws the stated allowance and no more; the verdict comes well within 60 s of it."""
    path = ADVERSARIAL / "candidates" / "c29_compile_stall.py"
    limits = _limits_of(path)
    result = _judge(path.name, limits)
    assert result.reason == Reason.TIMEOUT, result.detail
    allowance = result.phases["compile_allowance_s"]
    assert allowance == limits.cpu_compile_s == 8.0
    assert result.phases["compile_used_s"] == pytest.approx(allowance, abs=0.01), result.phases
    assert "compile allowance of 8 s, now spent" in result.detail, result.detail
    took = _candidate_time(result)
    assert took <= limits.first_call_s + allowance + 10, (took, result.phases)  # 10 s: import, reference, kill
    assert took < allowance + 60


def test_compile_stall_by_rewrites_draws_nothing() -> None:
    path = ADVERSARIAL / "candidates" / "c29_compile_stall_rewrite.py"
    limits = _limits_of(path)
    result = _judge(path.name, limits)
    assert result.reason == Reason.TIMEOUT, result.detail
    assert result.phases["compile_allowance_s"] == 8.0
    assert result.phases["compile_used_s"] <= POLL + 0.1, result.phases
    assert _candidate_time(result) <= limits.first_call_s + 10, result.phases


def test_honest_candidate_under_the_same_limits_passes() -> None:
    """The control: an honest kernel judged with the stall's small limits passes, drawing nothing (the
    interpreter compiles nothing), with the allowance stated all the same."""
    limits = _limits_of(ADVERSARIAL / "candidates" / "c29_compile_stall.py")
    result = _judge("honest_relu.py", limits)
    assert result.verdict == "pass", result.detail
    assert result.phases["compile_allowance_s"] == 8.0 and result.phases["compile_used_s"] == 0.0
