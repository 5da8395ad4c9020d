"""The device memory ledger: the evaluations in flight on one device are planned together.

Each evaluation's memory plan (`memory.plan_memory`) is sound alone. The branches of a generation share one
evaluator per device and evaluate at once; each used to plan against the memory free at its own moment, and
together they held more than the device has: the trusted side ran out computing a float64 gold, or a candidate
was rejected `out_of_memory` for memory its neighbours held. The ledger admits an evaluation only when its
planned bytes, the trusted side and its worker together, fit beside what the evaluations already admitted
reserved; the others wait in a queue, first come first served, so a large evaluation is never passed over by a
stream of small ones (the wait is in the verdict's phases, `memory_wait_s`).

What is reserved, and when:
- at admission, one trial's bytes with the worker's held outputs (`Plan.trial_bytes + Plan.hold_bytes`);
  the float64 gold's computation is part of a trial's bytes, so the trusted side is covered too;
- when the timing begins (`Reservation.timing()`), the timing's bytes (`Plan.timing_bytes`) where larger.
Growing for the timing while still holding the trial's reservation could deadlock two evaluations, each waiting
for the other to give memory back. Two rules keep that from happening:
1. an evaluation is admitted only if, beside everything already admitted, the largest growth that any of them
   (or it) will ask for still fits once the timing under way (if any) is over;
2. one evaluation at a time grows: a timing turn per device, first come first served, held until release.
   Timings are one at a time on a GPU anyway (the measurement lock, taken only after the turn).
So the evaluation whose turn it is fits as soon as the timing before it has ended, without waiting for any
evaluation that is itself waiting; trials of several evaluations still overlap where they fit. Should the
budget shrink meanwhile (another process took memory), a grower whose every neighbour waits for the turn is let
through rather than wait for nobody. A caller releases on every path (`with`, or `release()` in `finally`); a
wait cut short by an exception leaves the queue.

The budget the reservations share is the device's memory less what is held outside the ledger: other
processes, this process's lasting use (its CUDA context, the references' parameters) and the contexts of idle
spare workers. The memory free *now* is not that budget: the evaluations in flight lower it transiently, and
their reservations already stand for them, so planning against it counts them twice and makes a candidate's
plan depend on its neighbours. What lies outside is measured when nothing of this process is in flight (exact
then), spare workers started since counted at `WORKER_STATE_BYTES` each, and while evaluations are in flight it
is at least what the device holds beyond their reservations (so memory taken from outside is seen). A plan
(gold precision, timing sets) is made against that budget as if alone (`alone_bytes`), the same for a
candidate whatever its neighbours; admission then waits for room. A problem that cannot fit even alone is
refused (`problem_too_large`) before it queues, and the evaluation at the head of the queue with nothing else of
this process in flight is admitted whatever the budget reads now (waiting would not change it).

One ledger per physical device for the whole process, keyed like the lock files (`locks.gpu_key`): a ledger
models the GPU, which every run in the process shares whatever it owns, so it is process state on purpose. What
belongs to a run (its evaluators, worker pools, reference) stays in the run; the ledger holds byte counts and
waiting threads only.

Limit: two kernelwright processes on one GPU (two `optimize` runs, or the device hosts or Ray actors of two
runs placed on one GPU) are not planned together. Each sees the other as memory held outside, as measured at
its own idle moments or beyond its own reservations; a peak of the other's between those looks is not reserved
(the lock files keep their measurements apart, not their memory). One run per GPU, or `--device` lists that do
not overlap, avoid it.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .locks import gpu_key
from .memory import WORKER_STATE_BYTES

log = logging.getLogger(__name__)

POLL_S = 0.25
"""how often a waiting evaluation looks at the device again: memory held outside the ledger changes unannounced"""

Budget = Callable[[], int]
"""the bytes the reservations on a device may add up to, as measured now"""


@dataclass(frozen=True)
class DeviceMemory:
    """One look at a device's memory."""

    total: int
    used: int
    """held now by anything, this process's allocator counted by what it has allocated, not by what it caches
    (its cached blocks serve this process's next allocations), except what its private pools (CUDA graphs')
    keep, which serves nothing else (`private_idle_bytes`)"""
    stated: bool = False
    """a size the caller gave (`EvalPolicy.device_memory_bytes`): nothing else is taken to be on the device"""


def private_idle_bytes(device: torch.device) -> int:
    """What this process's private memory pools on `device` hold but have not allocated now: a CUDA graph's pool
    (torch.compile's CUDA-graph modes, which the compiled baselines use) keeps its blocks for the graph's next
    replays, so they serve none of this process's other allocations and an out-of-memory retry does not free
    them. Counted as cache, they made a GroupNorm run at 7.5 GB on an H100 plan with memory a max-autotune
    baseline's graphs held, and three of its evaluations ran out of device memory in the reference (issue 23)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        try:  # no trace entries: this is read on every look at the device's memory (torch 2.13 has the argument)
            segments = torch.cuda.memory_snapshot(include_traces=False)
        except TypeError:
            segments = torch.cuda.memory_snapshot()
    except Exception:  # noqa: BLE001 - no snapshot (an allocator without one): the cache as the allocator reports it
        return 0
    return sum(max(int(seg.get("total_size", 0)) - int(seg.get("allocated_size", 0)), 0) for seg in segments
               if seg.get("device", index) == index and tuple(seg.get("segment_pool_id") or (0, 0)) != (0, 0))


def measure(device: torch.device, stated: int | None = None) -> DeviceMemory:
    """The device's memory now: a GPU's through the driver, the host's (the CPU mode's "device") from
    /proc/meminfo, or the size `stated` by the caller."""
    if stated is not None:
        return DeviceMemory(total=int(stated), used=0, stated=True)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device) - private_idle_bytes(device)
        return DeviceMemory(total=int(total), used=max(int(total - free - cached), 0))
    found: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in ("MemTotal", "MemAvailable"):
                    found[key] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if len(found) < 2:  # no way to know: as much as a plan may want, as before the ledger
        return DeviceMemory(total=1 << 40, used=0)
    return DeviceMemory(total=found["MemTotal"], used=max(found["MemTotal"] - found["MemAvailable"], 0))


class SparePool(Protocol):
    def started_spares(self) -> int: ...


class Reservation:
    """One evaluation's place in a device's ledger: admitted with its trial's bytes, grown for its timing
    (`timing()`), released once (`release()`, or leaving its `with` block)."""

    def __init__(self, ledger: MemoryLedger, trial_bytes: int, timing_bytes: int, budget: Budget, exclusive: bool,
                 label: str) -> None:
        self.ledger = ledger
        self.trial_bytes = max(int(trial_bytes), 0)
        self.growth = max(int(timing_bytes) - self.trial_bytes, 0)
        """what the timing adds to the trial's reservation"""
        self.budget = budget
        self.exclusive = exclusive
        """admitted only with nothing else of this process on the device, and nothing else admitted meanwhile"""
        self.label = label
        self.bytes = self.trial_bytes
        """charged now"""
        self.timing_started = False
        self.released = False
        self.waited_s = 0.0
        self.timing_waited_s = 0.0
        self.others = 0
        """the most other reservations in flight on the device at once during this one's life"""
        self.over_budget = False
        """admitted (or grown) past the measured budget because nothing else could give memory back"""

    def timing(self) -> float:
        """Wait for this device's timing turn and the timing's bytes; the seconds waited."""
        return self.ledger._grow(self)

    def release(self) -> None:
        self.ledger._release(self)

    def summary(self) -> dict[str, Any]:
        """What the verdict's memory section says of this reservation."""
        return {"reserved_bytes": self.trial_bytes, "timing_reserved_bytes": self.trial_bytes + self.growth,
                "wait_s": round(self.waited_s, 4), "timing_wait_s": round(self.timing_waited_s, 4),
                "others_in_flight": self.others, "alone": self.exclusive, "over_budget": self.over_budget}

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class MemoryLedger:
    """The reservations of the evaluations in flight on one device, and the queue of those waiting."""

    def __init__(self, name: str, worker_state_bytes: int = WORKER_STATE_BYTES, poll_s: float = POLL_S) -> None:
        self.name = name
        self.worker_state_bytes = worker_state_bytes
        """charged for every evaluation in flight beyond the first (whose worker's share is in the plan's
        reserve): its worker's CUDA context, cuBLAS workspace and Triton state, which no trace sees"""
        self.poll_s = poll_s
        self._cond = threading.Condition(threading.RLock())
        self._queue: deque[Reservation] = deque()
        self._held: list[Reservation] = []
        self._turns: deque[Reservation] = deque()
        self._timer: Reservation | None = None
        self._idle_outside: int | None = None
        self._pools: weakref.WeakSet[Any] = weakref.WeakSet()

    # -- what is reserved ---------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._held)

    @property
    def waiting(self) -> int:
        """Evaluations waiting for admission or for their timing turn."""
        with self._cond:
            return len(self._queue) + len(self._turns)

    @property
    def reserved(self) -> int:
        with self._cond:
            return self._charge(self._held)

    def _charge(self, holders: list[Reservation], extra: int = 0) -> int:
        return sum(r.bytes for r in holders) + extra + self.worker_state_bytes * max(len(holders) - 1, 0)

    # -- what the budget is -----------------------------------------------------------------------------

    def watch(self, pool: SparePool) -> None:
        """Count `pool`'s started spare workers as memory held outside the ledger (for as long as it lives)."""
        with self._cond:
            self._pools.add(pool)

    def _spare_bytes(self) -> int:
        return self.worker_state_bytes * sum(p.started_spares() for p in list(self._pools))

    def alone_bytes(self, mem: DeviceMemory) -> int:
        """The memory an evaluation would have on the device with nothing else of this process in flight:
        what its plan is made against (see the module's docstring)."""
        if mem.stated:
            return max(mem.total - mem.used, 0)
        with self._cond:
            spares = self._spare_bytes()
            if not self._held:
                self._idle_outside = mem.used - spares
            outside = mem.used - self._charge(self._held)
            if self._idle_outside is not None:
                outside = max(outside, self._idle_outside + spares)
        return max(mem.total - max(outside, 0), 0)

    # -- admission ------------------------------------------------------------------------------------

    def admit(self, trial_bytes: int, timing_bytes: int = 0, budget: Budget | None = None, *,
              exclusive: bool = False, label: str = "") -> Reservation:
        """Wait for room for `trial_bytes` (and, by rule 1, for the `timing_bytes` to come) and reserve it.
        First come first served; `exclusive` waits until nothing else is in flight and keeps it so."""
        r = Reservation(self, trial_bytes, timing_bytes, budget or (lambda: 1 << 62), exclusive, label)
        t0 = time.monotonic()
        with self._cond:
            self._queue.append(r)
            try:
                while not (self._queue[0] is r and self._admissible(r)):
                    self._cond.wait(self.poll_s)
            except BaseException:
                self._queue.remove(r)
                self._cond.notify_all()
                raise
            self._queue.popleft()
            self._held.append(r)
            for h in self._held:
                h.others = max(h.others, len(self._held) - 1)
            self._cond.notify_all()  # the next in line may fit too
        r.waited_s = time.monotonic() - t0
        if r.waited_s > 1.0:
            log.info("%s: %s waited %.1f s for %.2f GB of device memory", self.name, label or "an evaluation",
                     r.waited_s, r.trial_bytes / 1e9)
        return r

    def _admissible(self, r: Reservation) -> bool:
        if not self._held:  # nothing of ours to wait for: the plan was made against the device alone
            r.over_budget = self._charge([r]) > r.budget()
            return True
        if r.exclusive or any(h.exclusive for h in self._held):
            return False
        budget = r.budget()
        after = [*self._held, r]
        if self._charge(after) > budget:
            return False
        # rule 1: once the timing under way is over, whichever of these grows next must still fit
        settled = [h for h in after if not h.timing_started]
        growth = max((h.growth for h in settled), default=0)
        return self._charge(settled, growth) + self.worker_state_bytes * (len(after) - len(settled)) <= budget

    def _grow(self, r: Reservation) -> float:
        t0 = time.monotonic()
        with self._cond:
            if r.released or r.timing_started or r not in self._held:
                return 0.0
            self._turns.append(r)
            try:
                while True:
                    if self._timer is None and self._turns[0] is r:
                        others = [h for h in self._held if h is not r]
                        if self._charge([*others, r], r.growth) <= r.budget():
                            break
                        if all(h in self._turns for h in others):  # none of them can give memory back first
                            r.over_budget = True
                            break
                    self._cond.wait(self.poll_s)
            except BaseException:
                self._turns.remove(r)
                self._cond.notify_all()
                raise
            self._turns.popleft()
            self._timer = r
            r.timing_started = True
            r.bytes = r.trial_bytes + r.growth
        r.timing_waited_s = time.monotonic() - t0
        return r.timing_waited_s

    def _release(self, r: Reservation) -> None:
        with self._cond:
            if r.released:
                return
            r.released = True
            for q in (self._held, self._queue, self._turns):
                if r in q:
                    q.remove(r)
            if self._timer is r:
                self._timer = None
            self._cond.notify_all()


_LEDGERS: dict[str, MemoryLedger] = {}
_LEDGERS_LOCK = threading.Lock()


def ledger_for(device: torch.device) -> MemoryLedger:
    """The ledger of the physical device behind `device`, shared by everything in this process that uses it."""
    key = gpu_key(device)
    with _LEDGERS_LOCK:
        if key not in _LEDGERS:
            _LEDGERS[key] = MemoryLedger(key)
        return _LEDGERS[key]
