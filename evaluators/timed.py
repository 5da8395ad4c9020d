"""The candidate's timed repetitions, and which of them are checked: chosen at random after each one ran.

A candidate that is honest on the calls whose outputs are checked and cheaper on the others wins a median
built from the others (docs/verifier.md item 30). So nothing a candidate can see may tell it which of its timed
calls will be checked: every repetition runs exactly as a correctness call does (the same op recorder, the
free memory poisoned before it the same way, `poison.py`), one per request, and only after a repetition has
returned does the judge decide — with a secret random source, independently for each — whether to fetch its
output and compare it with the expected values. A candidate that is partial on a share `f` of its repetitions
escapes with probability (1 - share)^(f·reps): to move the median it must cheat on at least half of them,
which with the default share (0.4) and 30 repetitions it survives less than once in 2,000 evaluations.

The loop is written against a small transport interface (`time_begin`, `time_rep`, `time_output`,
`time_done`, `time_end`) so that its logic is tested on the CPU with a scripted transport.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from .judge import Reject, judge_ok, judge_processes, judge_record
from .pool import WorkerFault
from .result import Reason
from .timing import Samples

CHECK_SHARE = 0.4
"""the chance that each timed repetition is checked (decided after it ran)"""


class TimedTransport(Protocol):
    def time_begin(self, sets: list[list[Any]], warmup: int, timeout: float) -> dict[str, Any]: ...
    def time_rep(self, i: int, timeout: float, phase: str) -> dict[str, Any]: ...
    def time_output(self, timeout: float, out_bytes: int) -> tuple[dict[str, Any], list[torch.Tensor]]: ...
    def time_done(self) -> None: ...
    def time_end(self, timeout: float) -> dict[str, Any]: ...


class Processes(Protocol):
    def stray_processes(self) -> list[int]: ...


@dataclass
class TimedReps:
    samples: Samples = field(default_factory=Samples)
    checked: list[int] = field(default_factory=list)
    """indices of the repetitions whose outputs were checked"""
    check_s: float = 0.0
    """seconds spent fetching and checking outputs (between repetitions, outside every timed region)"""


def time_candidate(transport: TimedTransport, worker: Processes, sets: list[list[Any]], reps: int, warmup: int,
                   check: Callable[[int, list[torch.Tensor], str], None], *, call_s: float, total_s: float,
                   out_bytes: int, share: float = CHECK_SHARE, rng: random.Random | None = None) -> TimedReps:
    """Warm up, then time `reps` repetitions cycling over the input sets; after each, with probability `share`,
    fetch its outputs and `check(set_index, outputs, label)` them (which raises `Reject` when they are wrong).
    Each request is judged like a correctness call (the record, stray processes, the reply). Raises `Reject`
    or `WorkerFault`; a timing that outlasts `total_s` is a `timeout`."""
    rng = rng or random.Random()
    n = len(sets)
    if n < 1:
        raise ValueError("no timing input set")
    out = TimedReps()
    start = time.monotonic()
    header = transport.time_begin(sets, warmup, max(call_s * max(warmup, 1), call_s))
    judge_record(header, "timing warm-up")
    judge_processes(worker.stray_processes(), "timing warm-up")
    judge_ok(header, "timing", "timing warm-up")
    outputs: int | None = None
    for r in range(reps):
        i = r % n
        label = f"timed repetition {r + 1}/{reps} on input set {i}"
        header = transport.time_rep(i, call_s, label)
        judge_record(header, label)
        judge_processes(worker.stray_processes(), label)
        judge_ok(header, "timing", label)
        if header.get("bad_outputs"):
            raise Reject(Reason.BAD_OUTPUT, f"{label}: forward returned something other than plain tensors", "timing")
        count = int(header.get("outputs", 0) or 0)
        if outputs is not None and count != outputs:
            raise Reject(Reason.WRONG_OUTPUT, f"{label}: {count} outputs where the earlier repetitions returned "
                         f"{outputs}", "timing")
        outputs = count
        try:
            out.samples.event_ms.append(float(header["event_ms"]))
            out.samples.wall_ms.append(float(header["wall_ms"]))
            out.samples.outer_ms.append(float(header["outer_ms"]))
            out.samples.pre_ms.append(float(header["pre_ms"]))
        except (KeyError, TypeError, ValueError):
            raise Reject(Reason.WORKER_ERROR, f"{label}: the worker's reply has no timing figures", "timing") from None
        if rng.random() < share:  # decided now, after the repetition ran
            t0 = time.monotonic()
            h, outs = transport.time_output(call_s, out_bytes)
            judge_record(h, label)
            judge_ok(h, "timing", label)
            try:
                check(i, outs, label)
            except Reject as r:
                raise Reject(r.reason, r.detail, "timing", r.rule, errors=r.errors) from None
            finally:
                del outs
                transport.time_done()
            out.checked.append(r)
            out.check_s += time.monotonic() - t0
        if time.monotonic() - start - out.check_s > total_s:  # the judge's own checks do not count
            raise WorkerFault(Reason.TIMEOUT, f"the candidate did not finish its timing within {total_s:.0f} s "
                              f"({r + 1} of {reps} repetitions done)")
    header = transport.time_end(call_s)
    judge_record(header, "timing")
    judge_processes(worker.stray_processes(), "timing")
    judge_ok(header, "timing", "timing")
    return out
