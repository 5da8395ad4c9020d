"""The memory plan: what one evaluation of a problem needs on its device, decided before allocating.

From the problem's footprint (`footprint.py`: inputs, parameters, outputs and the forward's peak, in
the problem's precision and in float64) and the device's free memory, `plan_memory` decides:

- whether the gold reference is computed in float64 or, when that does not fit, is PyTorch's own result
  in the problem's precision (`gold_precision`, reported; the tolerance then doubles to cover the
  gold's own error);
- how many distinct input sets the timing alternates between (as many as fit, up to the repetitions);
- how many bytes of earlier outputs the worker may keep for the late-write re-check;
- or that the problem cannot be evaluated at all (`feasible` false, with one sentence saying why).

One trial is made, run and judged at a time, so the plan is for one trial's worth of memory in two
processes: the trusted process (inputs, the float64 gold and its computation, the comparison slices)
and the candidate's worker (its input buffers, its outputs and its own temporaries, taken to be like the
reference's). Pure arithmetic on byte counts: unit-tested on the CPU.

A plan is for one evaluation as if it were alone on the device; the evaluations in flight together are
planned together by the device's memory ledger (`ledger.py`), which reserves each plan's bytes and makes the
rest wait for room.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .footprint import Footprint

GiB = 1 << 30
COMPARE_BYTES = 4 * (1 << 24) * 8
"""the comparison's slices: a few float64 temporaries of `compare.CHUNK` elements"""
TRANSIENT_MARGIN = 1.15
"""the meta trace counts tensors, not the allocator's rounding and fragmentation"""
RESERVE_BYTES = 4 * GiB
"""kept free for what no trace sees: the worker's Triton and cuBLAS state, flush buffers, workspaces"""
HOLD_CAP = 2 * GiB
WORKER_STATE_BYTES = 1 * GiB
"""one worker's CUDA context, cuBLAS workspace and Triton state: what the ledger charges for each evaluation in
flight beyond the first (whose worker's share is in `RESERVE_BYTES`) and for each idle spare worker"""


@dataclass
class Plan:
    feasible: bool
    why: str = ""
    gold_precision: str = "float64"
    timing_gold: str = "float64"
    """what the timed outputs are re-checked against: float64, or native when that does not fit"""
    timing_sets: int = 0
    hold_bytes: int = 0
    free_bytes: int = 0
    budget_bytes: int = 0
    trial_bytes: int = 0
    """the most both processes hold at once during one trial"""
    timing_bytes: int = 0
    """the same during the timing, with `timing_sets` input sets"""
    footprint: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def trial_bytes(native: Footprint, gold: Footprint | None) -> int:
    """Peak bytes of one trial over both processes, with a float64 gold when `gold` is given."""
    i, p = native.input_bytes, native.param_bytes
    t = int(native.transient_bytes * TRANSIENT_MARGIN)
    worker_idle = i + p
    worker_call = i + p + t
    if gold is None:
        trusted_reference = i + p + t
        trusted_judging = i + p + native.output_bytes + COMPARE_BYTES
        return max(trusted_reference + worker_idle, trusted_judging + worker_call)
    p64, o64 = gold.param_bytes, gold.output_bytes
    t64 = int(gold.transient_bytes * TRANSIENT_MARGIN)
    gold_phase = i + p + p64 + gold.float_input_bytes + t64
    native_phase = i + p + p64 + o64 + t
    judging = i + p + p64 + o64 + COMPARE_BYTES
    return max(gold_phase + worker_idle, native_phase + worker_idle, judging + worker_call)


def timing_bytes(native: Footprint, gold: Footprint | None, sets: int) -> int:
    """Peak bytes over both processes while timing with `sets` input sets, then re-checking their outputs
    (the worker keeps each set's last output; its temporaries are given back before the re-check)."""
    i, p, o = native.input_bytes, native.param_bytes, native.output_bytes
    t = int(native.transient_bytes * TRANSIENT_MARGIN)
    recheck = (gold.param_bytes + gold.float_input_bytes + int(gold.transient_bytes * TRANSIENT_MARGIN)) if gold \
        else t
    timing = (sets * i + p + t) + (sets * (i + o) + p + t)
    rechecking = (sets * i + p + recheck + COMPARE_BYTES) + (sets * (i + o) + p)
    return max(timing, rechecking)


def usable_bytes(free_bytes: int, reserve_bytes: int = RESERVE_BYTES) -> int:
    """What a plan may fill of `free_bytes`: a twentieth is left to the allocator's rounding, and the reserve
    to what no trace sees. The same budget bounds the reservations of the device's ledger (`ledger.py`)."""
    return max(int(free_bytes * 0.95) - reserve_bytes, 0)


def plan_memory(native: Footprint, gold: Footprint | None, free_bytes: int, reps: int, pool_bytes: int,
                device: str = "the device", reserve_bytes: int = RESERVE_BYTES) -> Plan:
    """Decide gold precision, timing sets and held bytes for a problem on a device with `free_bytes` free."""
    budget = usable_bytes(free_bytes, reserve_bytes)
    fp = {"input_bytes": native.input_bytes, "param_bytes": native.param_bytes, "output_bytes": native.output_bytes,
          "forward_peak_bytes": native.peak_bytes, "gold_peak_bytes": gold.peak_bytes if gold else 0}
    plan = Plan(feasible=True, free_bytes=free_bytes, budget_bytes=budget, footprint=fp)
    need64 = trial_bytes(native, gold) if gold is not None else None
    need_native = trial_bytes(native, None)
    if need64 is not None and need64 <= budget:
        plan.gold_precision, plan.trial_bytes = "float64", need64
    elif need_native <= budget:
        plan.gold_precision, plan.trial_bytes = "native", need_native
        plan.timing_gold = "native"
        why = (f"a float64 reference needs {_gb(need64)} with the candidate's share, {_gb(budget)} are usable"
               if need64 is not None else "the model has no float64 version")
        plan.notes.append(f"gold is PyTorch's own result in the problem's precision: {why}; the tolerance is "
                          "doubled to cover the gold's own error")
        gold = None
    else:
        plan.feasible = False
        plan.trial_bytes = need_native
        plan.why = (f"one trial needs {_gb(need_native)} of device memory (inputs {_gb(native.input_bytes)}, "
                    f"outputs {_gb(native.output_bytes)}, the forward's peak {_gb(native.peak_bytes)}, for the "
                    f"reference and the candidate at once) but {device} has {_gb(free_bytes)} free")
        return plan
    plan.hold_bytes = int(min(HOLD_CAP, max(budget - plan.trial_bytes, 0)))
    per_set = 2 * native.input_bytes + native.output_bytes
    cap = max(1, min(reps, max(2, pool_bytes // max(per_set, 1))))

    def most_sets(g: Footprint | None) -> int:
        for n in range(cap, 0, -1):
            if timing_bytes(native, g, n) <= budget:
                return n
        return 0

    sets = most_sets(gold)
    if gold is not None and sets < min(2, cap) and most_sets(None) > sets:
        # Re-checking the timed outputs against float64 is what does not fit next to two input sets: they
        # are re-checked against PyTorch's own result instead (tolerance doubled), and the timing alternates.
        sets = most_sets(None)
        gold = None
        plan.timing_gold = "native"
        plan.notes.append("the timed outputs are re-checked against PyTorch's own result in the problem's "
                          "precision (tolerance doubled): a float64 re-check does not fit beside two timing sets")
    plan.timing_sets = sets
    plan.timing_bytes = timing_bytes(native, gold, max(sets, 1))
    if sets == 1:
        plan.notes.append("only one timing input set fits: repetitions reuse it (flushed from L2 each time)")
    elif sets == 0:
        plan.notes.append(f"timing needs {_gb(plan.timing_bytes)} with one input set, more than the "
                          f"{_gb(budget)} usable: the candidate is judged but not timed")
    return plan
