"""Structure, then tuning: the builtin's knob moves swept over a verified structural child before the archive
judges it.

A model's structural change (a split reduction, a fused kernel, a persistent grid) arrives with whatever block
sizes, warps and stages it was written with. Judged once at those, a good structure can lose to its parent for
a bad block size and be rejected as "already tried". `tune` gives it the builtin policy's strength: a bounded
coordinate search over the knob moves the catalog (`moves.py`) offers on the child. Knob by knob (block sizes
first, then warps, stages, grouping), it tries the next value up and, when that does not win, the next value
down, and keeps walking in a direction while each step wins. A variant is kept only when it beats the current
best by more than the noise band (the larger of the two measurements' A/A bands, as the archive judges gains);
a variant that fails, errs or is timed suspect is recorded and passed over. At most `budget` evaluations, and
none started when the run's time left would not cover one more.

Evaluation comes in as a function (the run's evaluation service in the loop, a fake in tests), so this module
imports nothing above `agents/` and runs nothing itself. The sweep's record (`TuneRecord`) lands in the step's
trace record (`StepRecord.tuning`), the report and the export.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kernelwright.evaluators import EvalResult

from .moves import Knob, Move, apply, knobs, neighbours

NOT_ON_CPU = "not tuned: nothing is timed on the CPU"
"""the record of a structural child on the CPU: without timing there is nothing to tune on"""
OFF = "not tuned: tuning is off (tune_budget 0)"
NO_KNOBS = "not tuned: the child has no knob the builtin policy can move"

_ORDER = {"tiling": 0, "warps": 1, "pipelining": 2, "grouping": 3}
"""the order knobs are swept in: block sizes matter most for a new structure, grouping least"""

Evaluate = Callable[[str], tuple[str, EvalResult]]
"""source -> (kernel hash, verdict): the full verifier, correctness and timing"""


class TunedVariant(BaseModel):
    """One knob variant of the structural child that the sweep had the verifier judge."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    key: str
    """its knob changes from the untuned child, KNOB=VALUE joined by commas (e.g. BLOCK=512,NUM_WARPS=8)"""
    what: str
    """the same in words (BLOCK 256 -> 512, NUM_WARPS 4 -> 8)"""
    kernel: str
    """its kernel's hash (kernels/<hash>.py)"""
    verdict: Literal["pass", "fail", "error"]
    """the verifier's verdict on it"""
    reason: str
    """the verifier's reason code; suspect when its timing was flagged (never kept)"""
    median_ms: float | None = None
    """its median device time (None: not timed)"""
    detail: str = ""
    """why it failed, in the verifier's words, cut short (empty when it passed)"""


class TuneRecord(BaseModel):
    """The builtin's sweep of a structural child's knobs before the archive judged the step (`agents.tuning`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_by_name=True,
                              serialize_by_alias=True)

    from_: str = Field(alias="from")
    """the untuned child's hash, as the coder wrote it (its kernel stays in the run)"""
    from_ms: float | None = None
    """the untuned child's median device time"""
    noise_band: float | None = None
    """the untuned child's A/A noise band: a variant must beat the best so far by more than this (or its own)"""
    tried: list[TunedVariant] = Field(default_factory=list)
    """every variant judged, in order"""
    chose: str | None = None
    """the chosen variant's key (None: none beat the child, which is kept as written)"""
    child: str | None = None
    """the chosen variant's hash: the step's child, the one the archive judged (None: the untuned child)"""
    chosen_ms: float | None = None
    """the chosen variant's median device time"""
    evaluations: int = 0
    """verifier evaluations the sweep spent"""
    seconds: float = 0.0
    """wall seconds the sweep took"""
    note: str | None = None
    """why the child was not tuned, or why the sweep ended before its moves ran out (budget, time)"""

    def words(self) -> str:
        """The sweep in one line, as the trace, the report and the export's readers see it."""
        if not self.evaluations:
            return self.note or "not tuned: no variant was tried"
        n = f"{self.evaluations} variant{'' if self.evaluations == 1 else 's'} in {self.seconds:.1f} s"
        chosen = next((v for v in self.tried if v.key == self.chose), None)
        if chosen is not None:
            said = f"{chosen.what} gave {_ms(self.from_ms)} -> {_ms(self.chosen_ms)} ms (chosen)"
        else:
            band = f" (±{self.noise_band:.1%})" if self.noise_band is not None else ""
            said = (f"none beat the child's {_ms(self.from_ms)} ms by more than the noise band{band}: "
                    "kept as written")
        return f"tuned after the structural change: {n}; {said}" + (f" ({self.note})" if self.note else "")


def _ms(v: float | None) -> str:
    return "?" if v is None else f"{v:.4g}"


def _step(knob: Knob, up: bool) -> int | None:
    """The knob's next legal value up (or down), or None at the end of its range."""
    values = [v for v in neighbours(knob) if (v > knob.value) == up]
    return (min(values) if up else max(values)) if values else None


def _gain(best_ms: float, best_band: float, result: EvalResult) -> bool:
    """Whether a variant beats the best so far by more than the noise band (the archive's rule for a gain)."""
    t = result.timing
    if result.verdict != "pass" or t is None or t.suspect or t.median_ms <= 0:
        return False
    return best_ms / t.median_ms - 1 > max(best_band, t.noise_band)


def tune(child_src: str, child_result: EvalResult, evaluate: Evaluate, budget: int, *, child_hash: str = "",
         time_left_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> TuneRecord:
    """Sweep the child's knobs (see the module docstring) and say what was tried and chosen.

    `child_result` is the child's own verdict (it must pass with timing, else nothing is tried); `evaluate`
    judges a variant's source; `budget` bounds the evaluations; `time_left_s` (the run's time budget, if any)
    stops the sweep before an evaluation that the time left would not cover (each is assumed to take as long
    as the last one). The chosen variant's hash is `child` of the record; its verdict is `evaluate`'s."""
    t0 = clock()
    record = TuneRecord(from_=child_hash)
    t = child_result.timing
    if child_result.verdict != "pass" or t is None:
        record.note = (f"not tuned: the child was not timed ({child_result.timing_unavailable})"
                       if child_result.verdict == "pass" else f"not tuned: the child did not pass ({child_result.reason})")
        return record
    record.from_ms, record.noise_band = t.median_ms, t.noise_band
    if budget <= 0:
        record.note = OFF
        return record
    start = knobs(child_src)
    order = sorted((k for k in start.values() if k.category in _ORDER and neighbours(k)),
                   key=lambda k: _ORDER[k.category])
    if not order:
        record.note = NO_KNOBS
        return record
    best_src, best_ms, best_band = child_src, t.median_ms, t.noise_band
    best_values: dict[str, int] = {}
    seen = {child_src}
    last_s = 0.0

    def out_of_room() -> str | None:
        if record.evaluations >= budget:
            return f"its budget of {budget} evaluation{'' if budget == 1 else 's'} was spent"
        if time_left_s is not None and clock() - t0 + last_s > time_left_s:
            return "the run's time budget leaves no room for another evaluation"
        return None

    for first in order:
        for up in (True, False):
            walked = False
            while True:
                knob = knobs(best_src).get(first.id)
                new = _step(knob, up) if knob is not None else None
                if knob is None or new is None:
                    break
                try:
                    src = apply(best_src, Move(knob.id, knob.value, new, knob.category, knob.coupled))
                except (KeyError, ValueError):
                    break
                if src in seen:
                    break
                stop = out_of_room()
                if stop is not None:
                    record.note = stop
                    return _finish(record, t0, clock)
                seen.add(src)
                values = {**best_values, knob.id: new}
                changed = [(k, start[k].value, v) for k, v in values.items() if start[k].value != v]
                began = clock()
                h, result = evaluate(src)
                last_s = clock() - began
                record.evaluations += 1
                rt = result.timing
                key = ",".join(f"{k}={v}" for k, _, v in changed)
                record.tried.append(TunedVariant(
                    key=key, what=", ".join(f"{k} {old} -> {v}" for k, old, v in changed), kernel=h,
                    verdict=result.verdict, reason="suspect" if rt is not None and rt.suspect else str(result.reason),
                    median_ms=rt.median_ms if rt is not None else None,
                    detail="" if result.verdict == "pass" else " ".join((result.detail or "").split())[:160]))
                if not _gain(best_ms, best_band, result):
                    break
                assert rt is not None
                best_src, best_ms, best_band, best_values = src, rt.median_ms, rt.noise_band, values
                record.chose, record.child, record.chosen_ms = key, h, rt.median_ms
                walked = True
            if walked:
                break  # this knob found its direction; the other way leads back
    return _finish(record, t0, clock)


def _finish(record: TuneRecord, t0: float, clock: Callable[[], float]) -> TuneRecord:
    record.seconds = round(clock() - t0, 3)
    return record
