"""One timing routine for candidates and baselines alike.

Used in the trusted process (baselines) and inside a worker (the candidate), with the same rules:
warm-up; before every repetition the L2 cache is flushed by reading a buffer at least twice its size,
then the GPU spins briefly so that the host's constant launch overhead (which differs between a Triton
launcher, the eager dispatcher and our own op recorder) is not what gets measured; CUDA events bracket
the call on the current stream, and the device is synchronised before the host clock stops, so work
hidden on another stream shows up as a gap between the events and the wall clock;
each repetition uses the next input set of a pre-generated pool (fresh values, no warm caches) and its
outputs are handed to `keep` for re-checking. Pure functions of their arguments: no I/O, no globals.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import triton
import triton.language as tl

from . import torch_private

MIN_REPS = 30


@dataclass
class Samples:
    """Per-repetition times of one measurement, in milliseconds."""

    event_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    outer_ms: list[float] = field(default_factory=list)
    """Events from before the L2 flush to the end: the wall clock minus this is host latency alone (the
    GPU spin's length varies with the SM clock, so wall minus `event_ms` is a noisy measure of it)."""
    pre_ms: list[float] = field(default_factory=list)
    """Events around the L2 flush and the GPU spin before each call: a fixed amount of work, so when it takes
    longer than it does for the baseline, another process was using the GPU during the measurement."""

    def host_gaps_ms(self) -> list[float]:
        """Wall clock minus the device time the timing stream's events account for, per repetition."""
        outer = self.outer_ms if len(self.outer_ms) == len(self.wall_ms) else self.event_ms
        return [w - o for w, o in zip(self.wall_ms, outer)]

    def summary(self) -> dict[str, float]:
        ev = sorted(self.event_ms)
        n = len(ev)
        q = lambda p: ev[min(n - 1, max(0, round(p * (n - 1))))]  # noqa: E731
        wall = statistics.median(self.wall_ms) if self.wall_ms else float("nan")
        return {
            "median_ms": statistics.median(ev), "mean_ms": statistics.fmean(ev), "min_ms": ev[0], "max_ms": ev[-1],
            "p25_ms": q(0.25), "p75_ms": q(0.75), "iqr_rel": (q(0.75) - q(0.25)) / statistics.median(ev) if ev[n // 2] else 0.0,
            "reps": float(n), "wall_median_ms": wall,
        }


def l2_bytes(device: torch.device) -> int:
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "L2_cache_size", 0) or (50 << 20))


def flush_buffer(device: torch.device) -> torch.Tensor:
    """A buffer of at least twice the L2 size (float32). Reading it all before a repetition evicts
    everything else and leaves the cache clean, so a timed kernel starts cold, as under Nsight Compute
    (writing it instead would leave dirty lines whose write-back the timed kernel would pay for)."""
    return torch.ones(max(2 * l2_bytes(device), 64 << 20) // 4, dtype=torch.float32, device=device)


FLUSH_BLOCK = 8192


@triton.jit
def _read_all(src, sink, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = tl.max(tl.load(src + offs, mask=offs < n, other=0.0), axis=0)
    if m < 0:  # the buffer holds ones: never taken, but it keeps the loads
        tl.store(sink, m)


def flush_l2(flush: torch.Tensor) -> None:
    """Read the whole flush buffer with one Triton kernel: no allocation (a PyTorch reduction would take
    a workspace from the caching allocator and leave its partial results in memory that the worker poisoned
    for the candidate's next allocation, `poison.py`)."""
    n = flush.numel()
    _read_all[(triton.cdiv(n, FLUSH_BLOCK),)](flush, flush, n, BLOCK=FLUSH_BLOCK, num_warps=8)


def measure(run: Callable[[int], Any], n_sets: int, device: torch.device, *, reps: int = MIN_REPS,
            warmup: int = 3, flush: torch.Tensor | None = None, keep: Callable[[int, Any], None] | None = None,
            sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter,
            hide_host_ns: int = 1_000_000, record: Callable[..., Any] | None = None,
            elapsed: Callable[..., float] | None = None, spin: Callable[[int], Any] | None = None) -> Samples:
    """Time `run(i)` for input sets i = 0, 1, ..., n_sets-1, 0, ... on a CUDA device.

    `sync` and `clock` are passed in so a worker can use the functions it captured before a candidate
    could replace them.
    """
    if device.type != "cuda":
        raise ValueError("timing needs a CUDA device")
    # `spin` (torch.cuda._sleep) launches on the calling thread's current device, whatever `device` says: on
    # a host with several GPUs, a thread timing cuda:1 while cuda:0 is current would spin on cuda:0 (stalling
    # whatever is measured there) and leave cuda:1's calls unshielded from launch overhead.
    with torch.cuda.device(device):
        return _measure(run, n_sets, device, reps=reps, warmup=warmup, flush=flush, keep=keep, sync=sync,
                        clock=clock, hide_host_ns=hide_host_ns, record=record, elapsed=elapsed, spin=spin)


def _measure(run: Callable[[int], Any], n_sets: int, device: torch.device, *, reps: int, warmup: int,
             flush: torch.Tensor | None, keep: Callable[[int, Any], None] | None, sync: Callable[[], None] | None,
             clock: Callable[[], float], hide_host_ns: int, record: Callable[..., Any] | None,
             elapsed: Callable[..., float] | None, spin: Callable[[int], Any] | None) -> Samples:
    rep = Repetition(device, flush=flush, sync=sync, clock=clock, hide_host_ns=hide_host_ns, record=record,
                     elapsed=elapsed, spin=spin)
    for w in range(warmup):
        run(w % n_sets)
    rep.sync()
    samples = Samples()
    for r in range(reps):
        i = r % n_sets
        out = rep(run, i, samples)
        if keep is not None:
            keep(i, out)
        del out
    return samples


class Repetition:
    """One timed repetition, the same for the baselines (looped by `measure`) and a candidate (whose
    worker runs one per request, so that the judge can decide after each one whether to check its output):
    synchronise, start the wall clock, record the `pre` event, flush L2, spin the GPU while the host prepares
    the call, record `start`, call, record `end`, synchronise, stop the wall clock. Construct it on the
    thread and device that will time (the spin launches on the current device)."""

    def __init__(self, device: torch.device, *, flush: torch.Tensor | None = None,
                 sync: Callable[[], None] | None = None, clock: Callable[[], float] = time.perf_counter,
                 hide_host_ns: int = 1_000_000, record: Callable[..., Any] | None = None,
                 elapsed: Callable[..., float] | None = None, spin: Callable[[int], Any] | None = None) -> None:
        if device.type != "cuda":
            raise ValueError("timing needs a CUDA device")
        self.device = device
        self.record = record or torch.cuda.Event.record
        self.elapsed = elapsed or torch.cuda.Event.elapsed_time
        self.spin = spin or torch_private.cuda_sleep
        self.sync = sync or (lambda: torch.cuda.synchronize(device))
        self.clock = clock
        self.flush = flush if flush is not None else flush_buffer(device)
        self.hide_host_ns = hide_host_ns
        self.cycles = int(hide_host_ns * _cycles_per_ns(device, self.record, self.elapsed, self.spin)) \
            if hide_host_ns else 0

    def __call__(self, run: Callable[[int], Any], i: int, samples: Samples) -> Any:
        """Time `run(i)` once, append its figures to `samples` and return its output."""
        stream = torch.cuda.current_stream(self.device)
        pre, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        self.sync()
        t0 = self.clock()
        self.record(pre, stream)
        flush_l2(self.flush)
        if self.cycles:
            # Keep the GPU busy while the host prepares the call, so the events measure device time and
            # not the same constant launch overhead on every side; gaps between a call's own kernels
            # still count.
            self.spin(self.cycles)
        self.record(start, stream)
        out = run(i)
        self.record(end, stream)
        self.sync()
        samples.wall_ms.append((self.clock() - t0) * 1e3)
        samples.event_ms.append(self.elapsed(start, end))
        samples.outer_ms.append(self.elapsed(pre, end))
        samples.pre_ms.append(self.elapsed(pre, start))
        return out


_CLOCK_GHZ: dict[int, float] = {}


def _cycles_per_ns(device: torch.device, record: Callable[..., Any], elapsed: Callable[..., float],
                   spin: Callable[[int], Any]) -> float:
    """The SM clock in GHz (cycles per ns), measured once with a timed spin."""
    idx = device.index or 0
    if idx not in _CLOCK_GHZ:
        rates = []
        # (called inside `measure`, which made `device` current: the spins below run where the events are)
        spin(20_000_000)  # let the clock ramp up from idle first
        stream = torch.cuda.current_stream(device)
        for _ in range(3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            record(s, stream)
            spin(5_000_000)
            record(e, stream)
            torch.cuda.synchronize(device)
            rates.append(5_000_000 / (elapsed(s, e) * 1e6))
        # The highest rate seen: a spin sized with it lasts at least as long as asked.
        _CLOCK_GHZ[idx] = max(rates)
    return _CLOCK_GHZ[idx]


def noise_band(a: Samples, b: Samples) -> float:
    """The A/A noise band: relative difference between two medians of the same thing, floored by their spread."""
    ma, mb = statistics.median(a.event_ms), statistics.median(b.event_ms)
    m = (ma + mb) / 2
    if m <= 0:
        return 0.0
    iqr = max(a.summary()["iqr_rel"], b.summary()["iqr_rel"])
    return max(abs(ma - mb) / m, 0.5 * iqr, 0.01)


def judge_speedup(speedup: float, band: float) -> str:
    """'faster', 'slower' or 'no change' (inside the noise band)."""
    if speedup > 1 + band:
        return "faster"
    if speedup < 1 / (1 + band):
        return "slower"
    return "no change"


def suspect_flags(cand: Samples, eager: Samples, *, floor_ms: float | None = None,
                  clocks: dict[str, dict[str, Any]] | None = None,
                  best_baseline_ms: float | None = None) -> tuple[list[str], dict[str, float] | None]:
    """Why a candidate's timing is not to be believed (empty: no reason), and the flush+spin medians.

    - faster than 0.9x the roofline floor, or more than 10x faster than the best baseline measured (eager
      or torch.compile, whichever is faster: eager alone is pathologically slow on some problems, and
      matching the compiler is no reason for suspicion): too good to be true;
    - the fixed flush and spin before each call took much longer than for the baseline: another process
      was using the GPU during the measurement;
    - the wall clock exceeds the events (from before the flush to after the call) by much more than for the
      baseline: work ran outside the timed stream;
    - NVML reported a throttle reason while the SM clock was actually below its maximum (a reason that is
      set while the clock runs at full speed, as `sw_power_cap` often is, moved nothing).
    """
    med = statistics.median(cand.event_ms)
    eager_med = statistics.median(eager.event_ms)
    best = best_baseline_ms if best_baseline_ms is not None else eager_med
    flags: list[str] = []
    if floor_ms is not None and med < 0.9 * floor_ms:
        flags.append(f"faster than the roofline floor ({med:.4g} ms < {floor_ms:.4g} ms)")
    if best / med > 10:
        flags.append(f"more than 10x faster than the best baseline ({best / med:.1f}x against {best:.4g} ms)")
    flush_spin = None
    if cand.pre_ms and eager.pre_ms:
        pre_c, pre_e = statistics.median(cand.pre_ms), statistics.median(eager.pre_ms)
        flush_spin = {"candidate": pre_c, "eager": pre_e}
        if pre_c > 1.25 * pre_e + 0.05:
            flags.append(f"the GPU was shared during the measurement: the fixed flush and spin before each call "
                         f"took {pre_c:.3f} ms against {pre_e:.3f} ms for the baseline")
    gap_c = statistics.median(cand.host_gaps_ms())
    gap_e = statistics.median(eager.host_gaps_ms())
    if gap_c > gap_e + max(0.05, 0.5 * med):
        flags.append(f"work outside the timed stream: the wall clock exceeds the events by {gap_c:.3f} ms "
                     f"(baseline {gap_e:.3f} ms)")
    for when, c in (clocks or {}).items():
        flag = throttle_flag(when, c)
        if flag:
            flags.append(flag)
    return flags, flush_spin


def throttle_flag(when: str, reading: dict[str, Any]) -> str | None:
    """A throttling flag for one NVML reading, only when a reason was active and the SM clock was down."""
    if not reading.get("throttled"):
        return None
    sm, top = reading.get("sm_clock_mhz"), reading.get("max_sm_clock_mhz")
    if isinstance(sm, (int, float)) and isinstance(top, (int, float)) and top > 0 and sm >= 0.95 * top:
        return None
    shown = f" (SM clock {sm} of {top} MHz)" if sm is not None else ""
    return f"GPU throttled {when} timing: {', '.join(reading.get('throttle', []))}{shown}"


def split_flag(samples: Samples, checked: list[int], band: float) -> str | None:
    """A suspect flag when the checked repetitions ran markedly slower than the unchecked ones: they were
    chosen at random after the fact, so for an honest kernel both are draws from one distribution."""
    if len(checked) < 5 or len(samples.event_ms) - len(checked) < 5:
        return None
    chosen = set(checked)
    a = sorted(ms for r, ms in enumerate(samples.event_ms) if r in chosen)
    b = sorted(ms for r, ms in enumerate(samples.event_ms) if r not in chosen)
    ma, mb = a[len(a) // 2], b[len(b) // 2]
    m = sorted(samples.event_ms)[len(samples.event_ms) // 2]
    # each group's own spread (the two groups together would count the very split looked for as spread)
    spread = max(x[3 * len(x) // 4] - x[len(x) // 4] for x in (a, b)) / m if m > 0 else 0.0
    if m > 0 and (ma - mb) / m > max(3 * band, 2 * spread, 0.05):
        return (f"the checked repetitions ran slower than the unchecked ones ({ma:.4g} ms against {mb:.4g} ms "
                f"median): the kernel behaves differently when it is not checked")
    return None
