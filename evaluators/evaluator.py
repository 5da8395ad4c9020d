"""`Evaluator(problem, device, policy).evaluate(source) -> EvalResult`: the only judge of a candidate.

The trusted process (this one) never imports candidate code. It checks the source statically, plans the
memory one trial needs, hands the source to a fresh worker and then streams trials to it one at a time in
random order: draw the inputs on the device from a secret seed, compute the gold output, give the worker
the inputs, judge what comes back (the op record, the Triton launches, the output types and layouts,
aliasing, the inputs as the candidate left them, the values against the gold), free everything, next.
The first failure decides the verdict. A failure of the judge itself (out of memory, a bug) is a verdict
of its own, `error`, never an exception the caller has to catch.

This module runs things (workers, the reference, the baselines); what a reply means is decided by the pure
functions of `judge.py`, and profiles are collected by `profiling.py`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import logging
import os
import random
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from . import gpu_monitor, sandbox, static, torch_private
from .baselines import BaselineTimer
from .compare import degenerate_outputs
from .device import resolve_device
from .facts import DeviceFacts, cpu_facts, device_facts
from .footprint import Footprint, estimate, meta_problem
from .inputs import FAMILIES
from .judge import (
    Reject, compare_all, judge_coverage, judge_inputs, judge_launches, judge_ok, judge_outputs, judge_processes,
    judge_recheck, judge_record, measure_coverage, timing_summary,
)
from .locks import LockTimeout, measurement_lock, shared_use
from .ledger import MemoryLedger, Reservation, ledger_for, measure
from .memory import Plan, plan_memory, timing_bytes, usable_bytes
from .pool import Limits, Worker, WorkerFault, WorkerPool, WorkerStartFailure, declared_variants
from .problem import Precision, Problem, ProblemError, problem_from_source
from .profiling import Profile, profile_candidate
from .reference import GOLD_NATIVE, ReferenceSession
from .result import Check, EvalResult, KernelLaunch, Reason, Timing, TrialRecord, bound
from .roofline import count_work, device_peaks, floor_ms
from .timed import CHECK_SHARE, time_candidate
from .timing import noise_band
from .transport import SharedTransport, WireTransport

log = logging.getLogger(__name__)

ROUGH_REPS = 3
"""timed forwards of the quick check's rough time (`Evaluator._rough_time`)"""
ROUGH_WARMUP = 2
ROUGH_LOCK_S = 30.0
"""how long the rough time waits for the device's measurement lock before it is left out"""


@dataclass
class EvalPolicy:
    """How hard to check. Defaults follow docs/verifier.md, 'Numbers held to'."""

    trials: int = 5
    """trials per input family (fresh values each); at least 5 for a verdict anyone should trust"""
    families: tuple[str, ...] = FAMILIES
    precision: Precision | None = None
    """overrides the problem's PRECISION"""
    static_check: bool = True
    """the AST pre-filter; tests switch it off to prove the run-time guards catch the same thing"""
    min_coverage: float = 0.5
    """share of the forward's time that must be spent in the candidate's own Triton kernels"""
    limits: Limits = field(default_factory=Limits)
    spares: int = 1
    timing: bool = True
    """time the candidate and the baselines (CUDA only)"""
    timing_reps: int = 30
    warmup: int = 3
    check_share: float = CHECK_SHARE
    """the chance that each timed repetition's output is checked, decided after it ran (`time_candidate`)"""
    compile_mode: str | None = "default"
    """torch.compile mode of the compiled baseline ("default", "max-autotune", "max-autotune-no-cudagraphs",
    "reduce-overhead"), None to skip it. A CUDA-graph mode is measured together with its no-graph twin and
    the faster counts (`baselines.compile_modes`)."""
    pool_bytes: int = 4 << 30
    """at most this much device memory for the timing input sets (fewer if the memory plan says so)"""
    device_memory_bytes: int | None = None
    """the device's memory as the plan and the memory ledger take it, with nothing else on it (None: measured,
    less what is held outside the ledger); a test makes it small to make evaluations queue"""
    shared_buffers: bool = True
    """on CUDA, exchange tensors with the worker through device buffers it owns (no host copies)"""
    ordering_check: bool = True
    """run the ordering check on a kernel that waits on tickets (off where the same source's check already ran
    on this problem: the quick check's shape variants, after its own shapes)"""
    program_order: str | None = None
    """Triton's interpreter only (cpu): each launch's programs run one at a time in this order ("forward" or
    "reverse" program id); set by the ordering check's own evaluators (`Evaluator._ordering_check`)"""
    allow_unconfined: bool = field(default_factory=sandbox.allowed_by_environment)
    """run candidates even where the OS sandbox cannot confine them (a machine the user trusts); else such an
    evaluation is verdict `error`, reason `unconfined`. Default: KERNELWRIGHT_ALLOW_UNCONFINED=1, read where
    the policy is made (it travels with the policy to device hosts and Ray actors)"""


PREPARED_WORKERS = 2
"""workers `Evaluator.prepare` has ready: one for the first kernel's quick check, one for its verification"""

ORDERING_MAX_ELEMENTS = 1 << 20
"""input elements up to which a problem with no small shape variant is run by the ordering check at its own size"""


class ProblemTooLarge(Exception):
    """The problem cannot be evaluated on this device even one input set at a time."""


class Unconfined(Exception):
    """The worker cannot confine candidate code and the user did not opt out: nothing is run (the sentence)."""


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in str(e).lower()


def _failure(e: BaseException, phases: dict[str, float]) -> str:
    """One sentence for a failure of the judge: what, in which phase, where in the evaluator's code."""
    import traceback

    frames = [f for f in traceback.extract_tb(e.__traceback__) if "kernelwright" in f.filename
              or "/evaluators/" in f.filename]
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno} ({frames[-1].name})" if frames else ""
    after = f" after the {list(phases)[-1].removesuffix('_s')} phase" if phases else ""
    what = "ran out of device memory" if _is_oom(e) else f"failed ({type(e).__name__}: {str(e)[:300]})"
    first = (str(e).strip().splitlines() or [""])[0][:200] if _is_oom(e) else ""
    return f"the evaluator itself {what}{after}{where}" + (f": {first}" if first else "")


def _error_summary(result: EvalResult, worst: float, base: float) -> str:
    """The worst error against the base tolerance, and, where a draw was judged by a tolerance of its own
    (measured from PyTorch's error on it: a sensitive family, or a second look), the draw that came closest to
    its bar, so that a worst error above the base tolerance is not read as a pass it should not have had."""
    text = f"worst error {worst:.3g} (tolerance {base:.3g}"
    judged = [(t.max_rel_error / t.tolerance, t) for t in result.trials
              if t.tolerance and t.max_rel_error is not None]
    if judged:
        near = max(judged, key=lambda rt: rt[0])[1]
        if near.tolerance != base:
            own = f", from PyTorch's own error {near.reference_error:.3g} there" if near.reference_error else ""
            text += (f"; closest to its bar: {near.family} draw {near.trial}, {near.max_rel_error:.3g} against "
                     f"{near.tolerance:.3g}{own}")
    return f"{text}, gold {result.gold_precision})"


def _free_bytes(device: torch.device, ledger: MemoryLedger, stated: int | None = None) -> int:
    """Memory this evaluation may plan with: the device's memory less what is held outside its memory ledger
    (other processes, this process's lasting use, idle spare workers), as if nothing else of this process were
    in flight (`MemoryLedger.alone_bytes`). Not the memory free this moment: the evaluations in flight lower
    that transiently, and their reservations in the ledger already stand for them. Alone, it is the free
    memory plus what this process's allocator caches, as it always was."""
    return ledger.alone_bytes(measure(device, stated))


@functools.cache
def _say_untested_torch() -> None:
    """Once per process: a torch outside the tested versions may change the private APIs the guards use."""
    words = torch_private.untested()
    if words:
        log.warning(words)


class Evaluator:
    """Judges candidates for one problem on one device. Reuse it: the reference and spare workers persist."""

    def __init__(self, problem: Problem, device: str | None = None, policy: EvalPolicy | None = None,
                 pool: WorkerPool | None = None, seed: int | None = None) -> None:
        _say_untested_torch()
        self.problem = problem
        self.policy = policy or EvalPolicy()
        self.device = resolve_device(device)
        self.precision = self.policy.precision or problem.precision
        self._own_pool = pool is None
        self._baselines: BaselineTimer | None = None
        self._roof: dict[str, float] | None = None
        self._plan: Plan | None = None
        self._footprints: tuple[Footprint, Footprint | None] | None = None
        self._footprint_note: str | None = None
        self._flags: list[str] | None = None
        self._broken: str | None = None
        self._ref_lock = threading.RLock()
        """the reference session and the evaluator's cached state; taken after a GPU lock, never before one"""
        self._ordering: tuple[dict[str, Evaluator], WorkerPool, str] | None = None
        self._ordering_lock = threading.Lock()
        self._ordered: set[str] = set()
        """digests of the sources that passed the ordering check here"""
        self._footprint_lock = threading.Lock()
        if pool is not None and pool.device != str(self.device):
            raise ValueError(f"the worker pool runs on {pool.device}, this evaluator on {self.device}")
        # Start the first worker before the reference is built: its start-up overlaps ours.
        self.pool = pool or WorkerPool(str(self.device), self.policy.limits, self.policy.spares,
                                       allow_unconfined=self.policy.allow_unconfined)
        try:
            self.reference = ReferenceSession(problem, self.device, self.precision,
                                              seed if seed is not None else secrets.randbits(63))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        with self._ordering_lock:
            ordering, self._ordering = self._ordering, None
        if ordering is not None:
            for ev in ordering[0].values():
                ev.close()
            ordering[1].close()
        if self._own_pool:
            self.pool.close()
        if self._baselines is not None:  # its thread, and the compiled baselines' CUDA graphs
            self._baselines.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the memory plan ------------------------------------------------------------------------------

    def plan(self) -> Plan:
        """What one evaluation of this problem needs and how it will fit (decided once, before anything
        large is allocated). Raises ProblemTooLarge when even one input set cannot be evaluated."""
        with self._footprint_lock:
            if self._footprints is None:  # traced on the meta device: no memory, no wait
                est = estimate(self.problem, self.precision.cast_dtype)
                if est.native is not None:
                    self._footprints = (est.native, est.gold)
        if self._footprints is None:
            # A problem the meta device cannot run is measured by one real forward, of a size not known yet:
            # nothing else of this process is let onto the device meanwhile (once per evaluator).
            with ledger_for(self.device).admit(0, exclusive=True, label=f"{self.problem.path}: footprint"):
                self._ensure_footprints()  # before _ref_lock: measuring it takes the GPU (lock order: see _roofline)
        with self._ref_lock:
            # The footprint is traced once; the plan is made anew each time, against the device's memory as if
            # this evaluation were alone (the ledger then makes it wait for room beside the others in flight).
            plan = self._make_plan()
            if self._plan is not None and self._plan.gold_precision == GOLD_NATIVE and plan.feasible:
                plan.gold_precision = GOLD_NATIVE  # the battery's gold does not change within one evaluator
            self._plan = plan
            if plan.gold_precision == GOLD_NATIVE and self.reference.gold_precision != GOLD_NATIVE:
                self.reference.use_native_gold(next((n for n in plan.notes if "gold" in n), "memory"))
            if not plan.feasible:
                raise ProblemTooLarge(plan.why)
            return plan

    def _ensure_footprints(self) -> None:
        with self._footprint_lock:
            if self._footprints is None:
                est = estimate(self.problem, self.precision.cast_dtype)
                if est.native is None:
                    self._footprints = self._measured_footprint()
                    self._footprint_note = f"footprint measured on the device: {est.why_unknown}"
                else:
                    self._footprints = (est.native, est.gold)

    def _make_plan(self) -> Plan:
        notes = []
        assert self._footprints is not None
        native, gold = self._footprints
        if self._footprint_note:
            notes.append(self._footprint_note)
        ledger = ledger_for(self.device)
        ledger.watch(self.pool)  # its idle spares hold memory outside the ledger
        free = _free_bytes(self.device, ledger, self.policy.device_memory_bytes)
        where = f"{self.device} ({torch.cuda.get_device_name(self.device)})" if self.device.type == "cuda" else "the host"
        plan = plan_memory(native, gold, free, self.policy.timing_reps, self.policy.pool_bytes, where)
        plan.notes = notes + plan.notes
        return plan

    def _measured_footprint(self) -> tuple[Footprint, Footprint | None]:
        """One real forward on a base input set, measured: for problems the meta device cannot run."""
        ref = self.reference
        dev = self.device
        with shared_use(dev), self._ref_lock:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
                before = torch.cuda.memory_allocated(dev)
            try:
                inputs = ref.draw("base", 0, ref.new_battery())
                outs = ref._run(ref.native, inputs, self.precision.allows_tf32)
            except ProblemError:
                raise
            except Exception as e:
                if _is_oom(e):
                    raise ProblemTooLarge(f"one forward of the reference does not fit in {self.device}'s free "
                                          "memory") from None
                raise ProblemError(f"{self.problem.path}: Model.forward raised {type(e).__name__}: "
                                   f"{(str(e).strip().splitlines() or [''])[0][:300]}") from e
            ins = [x for x in inputs if isinstance(x, torch.Tensor)]
            params = list(ref.native.parameters()) + list(ref.native.buffers())
            i_b = sum(x.numel() * x.element_size() for x in ins)
            p_b = sum(x.numel() * x.element_size() for x in params)
            o_b = sum(o.numel() * o.element_size() for o in outs if isinstance(o, torch.Tensor))
            f_b = sum(x.numel() * x.element_size() for x in ins if x.is_floating_point())
            peak = (torch.cuda.max_memory_allocated(dev) - before + i_b) if dev.type == "cuda" else i_b + 3 * o_b
            del inputs, outs, ins
        native = Footprint(i_b, p_b, o_b, max(peak + p_b, i_b + p_b + o_b), f_b)
        k = 8 / max(min((x.element_size() for x in params if x.is_floating_point()), default=4), 1)
        k = max(k, 2.0)
        gold = Footprint(i_b + int(f_b * (k - 1)), int(p_b * k), int(o_b * k), int(native.peak_bytes * k),
                         int(f_b * k))
        return native, gold

    # -- the reference side alone --------------------------------------------------------------------

    def baseline(self) -> dict[str, Any]:
        """The reference side of an evaluation with no candidate: the memory plan, one battery of trials
        (gold, PyTorch's own error, tolerances), eager and torch.compile timings, the roofline floor and the
        wall time of each phase. How a user checks a problem set before a run; never raises."""
        t_start = time.monotonic()
        phases: dict[str, float] = {}
        out: dict[str, Any] = {"problem": self.problem.path, "device": str(self.device),
                               "precision": self.precision.value, "verdict": "ok", "reason": "ok", "detail": ""}
        dev = self.device
        reservation: Reservation | None = None
        try:
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats(dev)
            t0 = time.monotonic()
            plan = self.plan()
            phases["plan_s"] = time.monotonic() - t0
            out["memory"] = plan.as_dict()
            out["inputs_gb"] = plan.footprint.get("input_bytes", 0) / 1e9
            ledger = ledger_for(dev)
            timed = dev.type == "cuda" and self.policy.timing and plan.timing_sets > 0
            reservation = ledger.admit(
                plan.trial_bytes, plan.timing_bytes if timed else 0,
                lambda: usable_bytes(_free_bytes(dev, ledger, self.policy.device_memory_bytes)),
                label=f"{self.problem.path}: the baseline")
            phases["memory_wait_s"] = reservation.waited_s
            ref = self.reference
            t0 = time.monotonic()
            trials = 0
            worst = 0.0
            with shared_use(dev), self._ref_lock:
                battery = ref.new_battery()
                for family, index in ref.schedule(self.policy.trials, self.policy.families):
                    trial = ref.trial(family, index, battery)
                    if trial is None:
                        continue
                    trials += 1
                    worst = max(worst, trial.native_error)
                    del trial
            phases["reference_s"] = time.monotonic() - t0
            out.update(trials=trials, gold_precision=ref.gold_precision, tolerance=ref.base_tolerance,
                       pytorch_error=worst, reference_forward_ms=(ref.forward_s or 0.0) * 1e3,
                       skipped_families=dict(ref.skipped),
                       notes=list(ref.notes) + plan.notes + ([f"gold: {ref.gold_note}"] if ref.gold_note else []),
                       limits=self._limits(self.policy.timing_reps + self.policy.warmup))
            if dev.type == "cuda" and self.policy.timing and plan.timing_sets > 0:
                phases["timing_memory_wait_s"] = reservation.timing()
                t0 = time.monotonic()
                with shared_use(dev), self._ref_lock:
                    if self._baselines is None:
                        self._baselines = BaselineTimer(ref, self.policy.compile_mode)
                    inputs = ref.timing_inputs(plan.timing_sets)
                phases["timing_inputs_s"] = time.monotonic() - t0
                with measurement_lock(dev):
                    t0 = time.monotonic()
                    a = self._baselines.eager(inputs, self.policy.timing_reps, self.policy.warmup)
                    b = self._baselines.eager(inputs, self.policy.timing_reps, self.policy.warmup)
                    phases["eager_s"] = time.monotonic() - t0
                    t0 = time.monotonic()
                    compiled, why = self._baselines.compiled(inputs, self.policy.timing_reps, self.policy.warmup)
                    phases["compile_s"] = time.monotonic() - t0
                eager_ms = (a.summary()["median_ms"] + b.summary()["median_ms"]) / 2
                out.update(eager_ms=eager_ms, noise_band=noise_band(a, b), timing_sets=len(inputs),
                           compile_ms=compiled["median_ms"] if compiled else None,
                           compile_mode=(compiled or {}).get("mode"), compile_modes=(compiled or {}).get("modes"),
                           compile_unavailable=why)
                t0 = time.monotonic()
                try:
                    roof = self._roofline(inputs[0])
                    out.update(floor_ms=roof["floor_ms"], bound=roof["bound"], flops=roof["flops"],
                               bytes=roof["bytes"])
                except Exception as e:  # noqa: BLE001
                    out["floor_unavailable"] = f"{type(e).__name__}: {e}"[:300]
                phases["roofline_s"] = time.monotonic() - t0
                del inputs
            elif dev.type == "cuda" and plan.timing_sets < 1:
                out["timing_unavailable"] = plan.notes[-1] if plan.notes else "no timing set fits"
            else:
                out["timing_unavailable"] = "cpu mode: timings would be meaningless" if dev.type == "cpu" \
                    else "timing was switched off"
        except ProblemTooLarge as e:
            out.update(verdict="error", reason=str(Reason.PROBLEM_TOO_LARGE), detail=str(e))
        except ProblemError as e:
            out.update(verdict="error", reason=str(Reason.BAD_PROBLEM), detail=str(e))
        except Exception as e:  # noqa: BLE001
            log.info("baseline failure", exc_info=True)
            out.update(verdict="error", reason=str(Reason.EVALUATOR_ERROR), detail=_failure(e, phases))
        except BaseException:  # interrupted: the device's room goes back before this does
            if reservation is not None:
                reservation.release()
            raise
        if dev.type == "cuda":
            out["trusted_peak_bytes"] = int(torch.cuda.max_memory_allocated(dev))
            torch.cuda.empty_cache()
        if reservation is not None:  # after the cached blocks went back
            reservation.release()
            out["memory"]["ledger"] = reservation.summary()
        phases["total_s"] = time.monotonic() - t_start
        out["phases"] = {k: round(v, 4) for k, v in phases.items()}
        return out

    # -- set up ahead of the first candidate ------------------------------------------------------------

    def prepare(self) -> dict[str, Any]:
        """Set up now, with no candidate, what the first `evaluate` would otherwise set up on its critical path,
        so that a caller with time to spare (a run whose model is still writing its first kernel) spends it here:
        `baseline()` (the footprint and memory plan; one battery of reference trials: the float64 gold model, each
        family's tolerance calibrated, the forward's time; on CUDA with timing on, the eager and torch.compile
        baselines, compiled once for this evaluator and cached on disk, and the roofline's peaks), then the first
        `PREPARED_WORKERS` workers ready. Each is kept where `evaluate` reads it (`_footprints`, the reference session,
        `_baselines`, `_roof`, the pool's ready spares), so none is done again. Safe beside evaluations in flight
        on this evaluator (the same locks, taken in the same order, as theirs). Never raises: returns
        `{"outcome": "ready" | why not, "seconds": ..., "phases": {...}, ...}`."""
        t_start = time.monotonic()
        phases: dict[str, float] = {}
        outcome = "ready"
        # the reference side first: the first spare worker, started with the pool, comes up in its own process
        # meanwhile (on a GPU, its context holds the device in shared use, which the baselines' timing waits out)
        base = self.baseline()
        phases.update({f"baseline_{k}": float(v) for k, v in (base.get("phases") or {}).items()})
        if base.get("verdict") != "ok":
            outcome = f"{base.get('reason')}: {base.get('detail')}"[:400]
        # two workers ready: the first kernel's writer runs a quick check before the kernel's verification, and each
        # takes a fresh worker (one per candidate); with one ready, the verification waited for the next one's
        # start-up (5.7 s of a GPU worker's 9 s, an H200; `bench/startup_written.py`)
        ahead = self.pool.start_ahead(PREPARED_WORKERS)
        t0 = time.monotonic()
        try:
            for spare in ahead:
                spare.wait_ready()  # an evaluation that takes it meanwhile waits on the same start-up, once
        except Exception as e:  # noqa: BLE001 - a worker that cannot start is the evaluation's to report
            if outcome == "ready":
                outcome = f"a prepared worker did not start ({type(e).__name__}: {str(e)[:200]})"
        phases["worker_wait_s"] = time.monotonic() - t0
        return {"outcome": outcome, "seconds": round(time.monotonic() - t_start, 3),
                "phases": {k: round(v, 3) for k, v in phases.items()},
                "compile_unavailable": base.get("compile_unavailable"),
                "timing_unavailable": base.get("timing_unavailable")}

    # -- the verdict ----------------------------------------------------------------------------------

    def evaluate(self, source: str, *, quick: bool = False) -> EvalResult:
        """Judge a candidate (`_judge`). Never raises: a failure of the judge is verdict "error".

        Memory: each judgement waits for room in the device's memory ledger (`ledger.py`), beside the other
        evaluations in flight there; the wait is `phases["memory_wait_s"]` (and `timing_memory_wait_s` for the
        timing's share). A candidate is never rejected for memory its neighbours held: a judgement that ran out
        of memory (the candidate's `out_of_memory`, or the judge's own) while other evaluations held memory on
        the device is made once more alone, nothing else of this process admitted meanwhile, and that verdict
        stands, with a check saying so. Not on the worker's host-memory limit, which is the candidate's own."""
        result, short_of_memory = self._judge(source, quick)
        if result.verdict == "error" and any(c.name == "worker_start" for c in result.checks):
            # a worker that could not start (a device full for a moment, a host under load): one more worker, once;
            # the pool hands out no spare that already failed
            first = result
            result, short_of_memory = self._judge(source, quick)
            result.checks.insert(0, Check(name="worker_start", outcome="info", detail=bound(
                f"judged again with a fresh worker: {first.detail}", 600)))
        crowded = int(((result.memory or {}).get("ledger") or {}).get("others_in_flight", 0))
        if not (short_of_memory and crowded):
            return result
        first = result
        result, _ = self._judge(source, quick, alone=True)
        result.phases["crowded_judgement_s"] = first.phases.get("total_s", 0.0)
        result.checks.insert(0, Check(name="memory", outcome="info", detail=bound(
            f"judged again alone: a first judgement ran out of memory ({first.reason}: {first.detail}) while "
            f"{crowded} other evaluation(s) held memory on the device", 600)))
        return result

    def _judge(self, source: str, quick: bool = False, alone: bool = False) -> tuple[EvalResult, bool]:
        """Judge a candidate: static check, trials against the reference, the run-time guards and, on CUDA
        with timing on, the timed comparison with the baselines. Also says whether the verdict is a lack of
        memory that others' memory could explain. `alone`: admitted with nothing else of this process on the
        device (`MemoryLedger.admit(exclusive=True)`).

        `quick`: the coder's quick check — one trial of each input family plus the problem's
        `get_test_inputs()` sets (its general shapes), every guard, no timing but, on CUDA with timing on, one
        rough measurement for the draft's author (`_rough_time`: a check, never a `Timing`). Not a verdict anyone
        should trust for admission; it tells a draft's author about compile errors and wrong results in seconds."""
        t_start = time.monotonic()
        checks: list[Check] = []
        phases: dict[str, float] = {}
        result = EvalResult(verdict="fail", reason=Reason.WORKER_ERROR, precision=self.precision.value,
                            device=str(self.device))
        result.timing_unavailable = (
            "cpu mode runs Triton's interpreter: timings would be meaningless" if self.device.type == "cpu"
            else "quick check: correctness only" if quick
            else "timing was switched off" if not self.policy.timing else "the candidate was rejected before timing"
        )
        worker: Worker | None = None
        transport: WireTransport | SharedTransport | None = None
        reservation: Reservation | None = None
        short_of_memory = False
        try:
            if self._broken:
                raise RuntimeError(f"this evaluator can no longer judge: {self._broken}")
            self._static(source, checks)
            if self.policy.static_check and self.policy.ordering_check and self.policy.program_order is None:
                self._ordering_check(source, checks, phases)
            t0 = time.monotonic()
            plan = self.plan()
            phases["plan_s"] = time.monotonic() - t0
            result.memory = plan.as_dict()
            # Room beside the evaluations in flight on the device, before this one's worker takes its share.
            ledger = ledger_for(self.device)
            timed = self.device.type == "cuda" and self.policy.timing and not quick and plan.timing_sets > 0
            rough = self.device.type == "cuda" and self.policy.timing and quick and plan.timing_sets > 0
            reservation = ledger.admit(
                plan.trial_bytes + plan.hold_bytes,
                plan.timing_bytes if timed else self._rough_bytes(plan) if rough else 0,
                lambda: usable_bytes(_free_bytes(self.device, ledger, self.policy.device_memory_bytes)),
                exclusive=alone, label=f"{self.problem.path}: a candidate")
            phases["memory_wait_s"] = reservation.waited_s
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)
            worker = self.pool.acquire()
            t0 = time.monotonic()
            info = worker.wait_ready()
            phases["worker_wait_s"] = time.monotonic() - t0
            phases["worker_startup_s"] = worker.startup_s or 0.0
            for stage, at in (info.get("stages") or {}).items():
                if stage != "spawned":
                    phases[f"worker_{stage}_s"] = float(at)
            result.versions = {k: str(v) for k, v in info.get("versions", {}).items()}
            if self.device.type == "cuda":  # read here, in the trusted process, not from the worker's word
                result.versions["gpu"] = torch.cuda.get_device_name(self.device)
            confinement = str(info.get("sandbox") or "unknown: the worker did not say")
            checks.append(Check(name="sandbox", outcome="fail" if info.get("refused") else "info", detail=confinement))
            if info.get("refused"):  # the worker's own refusal: no candidate is sent to it
                raise Unconfined(str(info["refused"]))
            if self.device.type == "cuda" and self.policy.shared_buffers and info.get("ipc"):
                transport = SharedTransport(worker, self.device)
                checks.append(Check(name="transport", outcome="info",
                                    detail="device buffers owned by the worker, opened by the judge (CUDA IPC)"))
            else:
                transport = WireTransport(worker)
                if self.device.type == "cuda":
                    why = info.get("ipc_error") or "switched off by policy"
                    checks.append(Check(name="transport", outcome="info", detail=f"host copies over the socket ({why})"))
            self._run(worker, transport, source, result, checks, phases, plan, quick)
            if rough:
                self._rough_time(worker, transport, checks, reservation, phases)
            if self.device.type == "cuda" and self.policy.timing and not quick:
                t0 = time.monotonic()
                try:
                    if plan.timing_sets < 1:
                        raise LockTimeout(plan.notes[-1] if plan.notes else "no timing set fits in memory")
                    phases["timing_memory_wait_s"] = reservation.timing()  # this device's timing turn
                    result.timing = self._time(worker, transport, checks, plan, phases)
                    result.timing_unavailable = None
                except LockTimeout as e:
                    result.timing_unavailable = f"not timed: {e}"
                    checks.append(Check(name="timing", outcome="skip", detail=str(e)))
                phases["timing_s"] = time.monotonic() - t0
                phases["measure_s"] = result.timing.measure_s if result.timing else 0.0
            result.verdict, result.reason = "pass", Reason.OK
            result.detail = (f"correct on {len(result.trials)} trials over {len(result.families)} input families; "
                             + _error_summary(result, result.max_rel_error or 0, result.tolerance or 0))
        except Reject as r:
            result.reason, result.detail, result.rule = r.reason, bound(r.detail), r.rule
            if r.errors is not None:  # a failed comparison: its errors are the result's
                result.max_rel_error, result.norm_rel_error = r.errors
            checks.append(Check(name=r.check, outcome="fail", detail=bound(r.detail, 600)))
            short_of_memory = r.reason == Reason.OUT_OF_MEMORY
        except WorkerStartFailure as f:  # no candidate code reached it: the judge's failure, never the candidate's
            self._judge_error(result, checks, Reason.EVALUATOR_ERROR, f.detail)
            checks.append(Check(name="worker_start", outcome="fail", detail=bound(f.detail, 600)))
            short_of_memory = f.out_of_memory  # a device too full for its context, perhaps only while crowded
        except WorkerFault as f:
            result.reason, result.detail = f.reason, bound(f.detail)
            checks.append(Check(name="worker", outcome="fail", detail=bound(f.detail, 600)))
            # the watchdog's host-memory limit is the candidate's own, whoever else is on the device
            short_of_memory = f.reason == Reason.OUT_OF_MEMORY and not (worker is not None and worker._oom)
        except ProblemTooLarge as e:
            self._judge_error(result, checks, Reason.PROBLEM_TOO_LARGE, str(e))
        except Unconfined as e:
            result.verdict, result.reason, result.detail = "error", Reason.UNCONFINED, bound(str(e))
        except ProblemError as e:
            self._judge_error(result, checks, Reason.BAD_PROBLEM, str(e))
        except Exception as e:  # noqa: BLE001 - the judge failed, not the candidate: say so, never raise
            log.info("evaluator failure", exc_info=True)
            self._judge_error(result, checks, Reason.EVALUATOR_ERROR, _failure(e, phases))
            short_of_memory = _is_oom(e)
            if "CUDA error" in str(e) or "illegal" in str(e).lower():
                self._broken = f"a CUDA error in the trusted process ({str(e)[:200]})"
        finally:
            if transport is not None:
                try:
                    transport.close()
                except Exception as e:  # noqa: BLE001
                    log.debug("closing the transport failed: %s", e)
                    self._broken = self._broken or f"closing the shared buffers failed ({str(e)[:200]})"
            if worker is not None:
                result.candidate_log = bound(worker.log_tail(), 4000)
                if result.memory is not None:
                    result.memory["worker_peak_bytes"] = worker.device_peak
                worker.close()
                try:
                    self.pool.fill()
                except RuntimeError:  # the pool was closed meanwhile
                    pass
            if self.device.type == "cuda":
                try:
                    if result.memory is not None:
                        result.memory["trusted_peak_bytes"] = int(torch.cuda.max_memory_allocated(self.device))
                    torch.cuda.empty_cache()
                except Exception:  # noqa: BLE001
                    pass
            if reservation is not None:  # last: the worker is gone and the cached blocks given back
                reservation.release()
                if result.memory is not None:
                    result.memory["ledger"] = reservation.summary()
        result.checks = checks
        phases["total_s"] = time.monotonic() - t_start
        result.phases = {k: round(v, 4) for k, v in phases.items()}
        return result, short_of_memory

    def _judge_error(self, result: EvalResult, checks: list[Check], reason: Reason, detail: str) -> None:
        result.verdict, result.reason, result.detail = "error", reason, bound(detail)
        checks.append(Check(name="evaluator", outcome="fail", detail=bound(detail, 600)))

    def _static(self, source: str, checks: list[Check]) -> None:
        try:
            violations = static.check_source(source, allow_streams=self.problem.allow_streams)
        except SyntaxError as e:
            raise Reject(Reason.SYNTAX_ERROR, f"line {e.lineno}: {e.msg}", "static") from None
        if not self.policy.static_check:
            checks.append(Check(name="static", outcome="skip", detail="disabled by policy"))
            return
        if violations:
            first = violations[0]
            more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
            raise Reject(Reason.FORBIDDEN_CODE, first.sentence() + more, "static", first.rule)
        checks.append(Check(name="static", outcome="pass"))

    def _ordering_check(self, source: str, checks: list[Check], phases: dict[str, float]) -> None:
        """A kernel that takes a ticket may spin on work items claimed before it (`static.ticket_waits`). That it
        waits on nothing else is checked here by running it where residency is one program: Triton's interpreter,
        on the CPU, at the problem's small shape, each launch's programs one at a time, in reverse and then in
        forward program-id order (`EvalPolicy.program_order`). A program that waits on one that has not started
        never finishes in one of the two orders, whatever order its author relied on (program ids, dispatch
        order); one that waits only on smaller tickets finishes in both, and must be right in both. A hang is cut
        at the CPU's execution limit. Fails closed: a kernel the check cannot run may not wait."""
        report = static.ticket_wait_report(source)
        lines, waiting, twins = report.lines, report.kernels, report.twins
        if not lines:
            return
        where = f"line {lines[0]}" + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else "")
        if twins:
            raise Reject(Reason.FORBIDDEN_CODE,
                         f"{where}: a kernel that waits on other programs shares its name with another function "
                         f"({twins[0]}): the ordering check knows a launch by its kernel's name, so each such kernel "
                         "needs a name of its own", "ordering", "inter_program_wait")
        digest = hashlib.sha256(source.encode()).hexdigest()
        if digest in self._ordered:  # this source passed it on this evaluator (a quick check, then the verdict)
            checks.append(Check(name="ordering", outcome="pass", detail=f"spin loop at {where}: passed before"))
            return
        t0 = time.monotonic()
        try:
            evaluators, label = self._ordering_evaluators()
        except Exception as e:  # noqa: BLE001 - no small shape, or its reference cannot be built: no waits then
            raise Reject(Reason.FORBIDDEN_CODE,
                         f"{where}: a loop waits on other programs, and the check that allows such waits (the kernel "
                         f"run at a small shape in Triton's interpreter, programs one at a time) cannot run for this "
                         f"problem: {type(e).__name__}: {str(e).strip()[:300]}", "ordering", "inter_program_wait"
                         ) from None
        results: dict[str, EvalResult] = {}

        def judged(order: str) -> EvalResult:
            if order not in results:
                results[order] = evaluators[order].evaluate(source)
                phases[f"ordering_{order}_s"] = results[order].phases.get("total_s", 0.0)
            return results[order]

        for order in evaluators:
            r = judged(order)
            if r.verdict == "pass":
                unrun = [k for k in waiting if k not in {launch.name for launch in r.kernels}]
                if unrun:  # a kernel the check never saw run (a path only another device takes) may not wait
                    raise Reject(Reason.FORBIDDEN_CODE,
                                 f"{where}: the kernel {unrun[0]} waits on other programs but never ran in the ordering "
                                 f"check ({label}, Triton's interpreter): a kernel that waits must run there, on every "
                                 "device's path", "ordering", "inter_program_wait")
                continue
            how = f"with each launch's programs run one at a time in {order} program-id order ({label}, Triton's " \
                  f"interpreter)"
            if r.verdict == "error":
                raise RuntimeError(f"the ordering check could not judge the kernel {how}: {r.reason}: {r.detail}")
            if r.reason != Reason.TIMEOUT:
                raise Reject(r.reason, f"{how}: {r.detail}", "ordering", r.rule)
            # a hang: in one order only, the kernel waited on a program that had not started; in both, it did
            # that or it is too slow for the interpreter at this shape (said so: the message must not guess)
            other = next(o for o in evaluators if o != order)
            both = judged(other).verdict != "pass" and judged(other).reason == Reason.TIMEOUT
            raise Reject(Reason.FORBIDDEN_CODE,
                         f"{where}: " + (f"the kernel did not finish in either order, programs run one at a time "
                                         f"({label}, Triton's interpreter, within the CPU's execution limit): its "
                                         f"programs wait on a program that has not started, or it is too slow for "
                                         f"the interpreter at this shape"
                                         if both else f"programs wait on a program that has not started: {how} "
                                                      f"the kernel did not finish (in {other} order it did)")
                         + ". A program may wait only on work items claimed before its own ticket "
                           "(`t = tl.atomic_add(counter, 1)`), never on program ids or later tickets",
                         "ordering", "inter_program_wait")
        phases["ordering_s"] = time.monotonic() - t0
        self._ordered.add(digest)
        checks.append(Check(name="ordering", outcome="pass",
                            detail=f"spin loop at {where} waits only on earlier tickets: finished and correct with "
                                   f"programs one at a time in reverse and forward order ({label})"))

    def _ordering_evaluators(self) -> tuple[dict[str, Evaluator], str]:
        """The ordering check's two evaluators (reverse, forward) of the problem at its small shape on the CPU,
        sharing one worker pool; built on first use, closed with this evaluator."""
        with self._ordering_lock:
            if self._ordering is None:
                from .variants import shapes_for

                shapes, dropped, _ = shapes_for(self.problem.source, self.problem.path, ("small",))
                small = next((sh for sh in shapes if sh.name == "small"), None)
                if small is not None:
                    sizes, label = small.sizes, small.label()
                elif (shapes[0].elements or ORDERING_MAX_ELEMENTS + 1) <= ORDERING_MAX_ELEMENTS:
                    sizes, label = {}, shapes[0].label()
                else:
                    raise ValueError(dropped.get("small") or "the problem has no size constants to make it small")
                problem = problem_from_source(self.problem.source, self.problem.path, self.precision.value, sizes=sizes)
                pool = WorkerPool("cpu", self.policy.limits, 0, allow_unconfined=self.policy.allow_unconfined)
                made: dict[str, Evaluator] = {}
                try:
                    for order in ("reverse", "forward"):
                        policy = EvalPolicy(trials=1, families=("base",), timing=False, spares=0, compile_mode=None,
                                            limits=self.policy.limits, program_order=order,
                                            allow_unconfined=self.policy.allow_unconfined)
                        made[order] = Evaluator(problem, "cpu", policy, pool=pool)
                except BaseException:
                    for ev in made.values():
                        ev.close()
                    pool.close()
                    raise
                self._ordering = (made, pool, label)
            return self._ordering[0], self._ordering[2]

    def _limits(self, reps: int = 0) -> dict[str, float]:
        return self.policy.limits.scaled(self.reference.forward_s, self.device.type, reps)

    def _run(self, worker: Worker, transport: WireTransport | SharedTransport, source: str, result: EvalResult,
             checks: list[Check], phases: dict[str, float], plan: Plan, quick: bool = False) -> None:
        ref = self.reference
        # One compile allowance for the whole evaluation, stated in the phases (and kept there as it is drawn).
        worker.allow_compiling(self.policy.limits.compile_allowance(
            self.device.type, ref.forward_s, declared_variants(source)), phases)
        t0 = time.monotonic()
        header, _ = worker.request({"op": "load"}, self._load_payload(source), self._limits()["load_s"],
                                   "import and construction", compiles=True)
        phases["load_s"] = time.monotonic() - t0
        judge_record(header, "load")
        judge_processes(worker.stray_processes(), "load")
        judge_ok(header, "load")
        checks.append(Check(name="load", outcome="pass", detail="imported, constructed, parameters loaded"))

        result.tolerance, result.gold_precision = ref.base_tolerance, ref.gold_precision
        rng = random.Random(secrets.randbits(64))
        with self._ref_lock:
            # quick: one trial of every family (a heavy-tailed draw shows a fragile reduction in seconds)
            order = ref.schedule(1, self.policy.families) if quick else \
                ref.schedule(self.policy.trials, self.policy.families)
            battery = ref.new_battery()
        rng.shuffle(order)
        launches: dict[str, KernelLaunch] = {}
        launch_s = forward_s = 0.0
        kernel_time: dict[str, float] | None = None
        profile_at = rng.randrange(1, len(order)) if self.device.type == "cuda" and len(order) > 1 else -1
        max_rel = norm_rel = 0.0
        tolerance = ref.base_tolerance
        held = 0
        calls = 0
        ref_s = judge_s = call_s = 0.0
        prev_shapes: list[Any] | None = None
        flag_sets: list[set[str]] = []
        sub = {"inputs": 0.0, "compare": 0.0, "keep": 0.0, "release": 0.0}  # where judging goes
        t_trials = time.monotonic()
        for k, (family, index) in enumerate(order):
            t0 = time.monotonic()
            with shared_use(self.device), self._ref_lock:  # GPU lock first: see _roofline
                trial = ref.trial(family, index, battery)
                if trial is not None and self._flags is None and family == "base" and len(flag_sets) < 2:
                    flag_sets.append(set(degenerate_outputs(trial.gold, trial.inputs, trial.tolerance)))
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()  # what the reference used is the candidate's to use now
            ref_s += time.monotonic() - t0
            if trial is None:
                continue
            if family == "base":
                tolerance = result.tolerance = trial.tolerance
            tensors = [x for x in trial.inputs if isinstance(x, torch.Tensor)]
            shapes = [(tuple(x.shape), x.dtype) for x in tensors]
            reuse = prev_shapes == shapes and rng.random() < 0.6
            prev_shapes = shapes
            out_bytes = sum(torch.Size(m["shape"]).numel() * torch.empty((), dtype=m["dtype"]).element_size()
                            for m in trial.out_meta)
            hold = held + out_bytes <= plan.hold_bytes
            label = f"trial {calls + 1}/{len(order)} ({trial.family})"
            lim = self._limits()
            t0 = time.monotonic()
            with shared_use(self.device):
                header, outs, after = transport.call(
                    trial.inputs, reuse=reuse, hold=hold, profile=k == profile_at,
                    timeout=lim["first_call_s"] if calls == 0 else lim["call_s"],
                    phase=f"the forward pass ({label})", compiles=calls == 0, out_bytes=out_bytes)
            call_s += time.monotonic() - t0
            t0 = time.monotonic()
            judge_record(header, label)
            judge_processes(worker.stray_processes(), label)
            judge_ok(header, "forward", label)
            for name, rec in header.get("launches", {}).items():
                entry = launches.setdefault(name, KernelLaunch(name=name, launches=0))
                entry.launches += int(rec.get("count", 0))
                # the bytes one forward's launches span, from a forward on the problem's own inputs; one after
                # the first call when there is one (the first may include autotuning's benchmark launches)
                if family == "base" and (entry.launches_per_forward is None or calls > 0) \
                        and isinstance(rec.get("arg_bytes"), int):
                    entry.launches_per_forward = int(rec.get("count", 0))
                    entry.arg_bytes_per_forward = max(0, int(rec["arg_bytes"]))
                if not entry.compiled and isinstance(rec.get("compiled"), dict):
                    entry.compiled = {str(k): int(v) for k, v in rec["compiled"].items() if isinstance(v, (int, float))}
                for g in rec.get("grids", []):
                    if g not in entry.grids and len(entry.grids) < 4:
                        entry.grids.append(g)
            if calls > 0 or len(order) == 1:  # the first call carries one-off costs (compilation, lazy set-up)
                forward_s += float(header.get("forward_s", 0.0))
                launch_s += sum(float(r.get("seconds", 0.0)) for r in header.get("launches", {}).values())
            calls += 1
            if header.get("kernel_time"):
                kernel_time = header["kernel_time"]
            judge_launches(header, label)
            judge_outputs(header, outs, trial.out_meta, self.device, label)
            t1 = time.monotonic()
            judge_inputs(after, tensors, label)
            t2 = time.monotonic()
            looked = "stands"
            with shared_use(self.device):
                try:
                    rec_max, rec_norm = compare_all(outs, trial.gold, trial.tolerance, label)
                except Reject as first:
                    # before a failure on a draw whose PyTorch error was never measured stands, measure it
                    # (GPU lock first, then the reference's: see _roofline) and judge as for a sensitive family;
                    # only a failure of the values: a wrong shape or unwritten elements are the kernel's alone
                    looked, widened = "stands", None
                    if first.reason in (Reason.WRONG_OUTPUT, Reason.NAN_OUTPUT):
                        with self._ref_lock:
                            looked, widened = ref.second_look(trial)
                    failure: Reject | None = None if looked == "skip" else first
                    if looked == "widened" and widened is not None:
                        try:
                            rec_max, rec_norm = compare_all(outs, trial.gold, widened.tolerance, label)
                            failure = None
                        except Reject as again:
                            failure = again
                    if failure is not None:
                        if trial.native_measured:  # how far PyTorch itself was on these very inputs
                            failure.detail = (f"{failure.detail}; PyTorch's own {self.precision.value} error on "
                                              f"these inputs: {trial.native_error:.3g}")
                        raise failure from None
            t3 = time.monotonic()
            sub["inputs"] += t2 - t1
            sub["compare"] += t3 - t2
            # a draw the second look dropped (PyTorch itself too far off on it to judge by, as for a sensitive
            # family; the reference's notes say so) is not recorded; its outputs are kept like any other's
            if looked != "skip":
                max_rel, norm_rel = max(max_rel, rec_max), max(norm_rel, rec_norm)
                result.trials.append(TrialRecord(
                    family=trial.family, trial=trial.index, max_rel_error=rec_max, norm_rel_error=rec_norm,
                    passed=True, reference_error=trial.native_error if trial.native_measured else None,
                    tolerance=trial.tolerance))
            if hold or not transport.shared:
                transport.keep(outs)
                held += out_bytes
            t4 = time.monotonic()
            sub["keep"] += t4 - t3
            del outs, after, trial, tensors
            transport.release()
            sub["release"] += time.monotonic() - t4
            judge_s += time.monotonic() - t0
        # a family none of whose draws was judged: skipped whole, or every draw of it skipped alone (PyTorch too
        # far off, or NaN/Inf where the gold is finite, on each); none judged at all is no verdict
        with self._ref_lock:
            family_skips = ref.family_skips({f for f, _ in order}, {t.family for t in result.trials})
        if not result.trials:
            raise ProblemError(f"{self.problem.path}: no input family could be checked "
                               f"({'; '.join(f'{f}: {w}' for f, w in family_skips.items())})")
        if self._flags is None and flag_sets:
            self._flags = sorted(set.intersection(*flag_sets))
        phases["trials_s"] = time.monotonic() - t_trials
        phases["trials_reference_s"] = ref_s
        phases["trials_candidate_s"] = call_s
        phases["trials_judging_s"] = judge_s
        for part, spent in sub.items():
            phases[f"trials_judging_{part}_s"] = spent
        result.tolerance = tolerance
        result.gold_precision = ref.gold_precision
        result.problem_flags = list(self._flags or [])
        result.families = sorted({t.family for t in result.trials})
        for note in ref.notes + ([f"gold: {ref.gold_note}"] if ref.gold_note else []):
            checks.append(Check(name="tolerance", outcome="info", detail=note))
        for fam, why in family_skips.items():
            checks.append(Check(name=f"family:{fam}", outcome="skip", detail=why))
        if ref.kept_buffers:
            checks.append(Check(name="buffers", outcome="info",
                                detail=f"kept as structure (not re-randomised): {', '.join(ref.kept_buffers[:8])}"))
        result.max_rel_error, result.norm_rel_error = max_rel, norm_rel
        result.kernels = sorted(launches.values(), key=lambda k: -k.launches)
        checks.append(Check(name="correctness", outcome="pass",
                            detail=f"{calls} trials, families {', '.join(result.families)}; "
                                   + _error_summary(result, max_rel, tolerance)))
        checks.append(Check(name="ops", outcome="pass", detail="no PyTorch compute ops in forward"))
        checks.append(Check(name="triton_launch", outcome="pass",
                            detail=", ".join(f"{k.name}×{k.launches}" for k in result.kernels)))
        checks.append(Check(name="inputs", outcome="pass", detail="inputs unchanged after every call"))
        checks.append(Check(name="aliasing", outcome="pass", detail="fresh outputs, no aliasing"))
        self._coverage(result, checks, launch_s, forward_s, kernel_time)
        header, changed = transport.recheck(self._limits()["call_s"])
        judge_record(header, "re-read")
        judge_processes(worker.stray_processes(), "re-read")
        judge_recheck(changed)
        checks.append(Check(name="recheck", outcome="pass", detail="earlier outputs unchanged"))

    # -- profiles and facts ---------------------------------------------------------------------------

    def device_facts(self) -> DeviceFacts:
        """The device's facts for the roles (`facts.device_facts`), with the copy bandwidth at the size this
        problem moves. Measures the device's peaks if no earlier timing did (seconds, once per device)."""
        if self.device.type != "cuda":
            return cpu_facts()
        with self._ref_lock:
            roof = self._roof
        problem_bytes = roof["bytes"] if roof else None
        if problem_bytes is None:
            try:
                model, meta_inputs = meta_problem(self.problem, self.precision.cast_dtype)
                problem_bytes = count_work(model, meta_inputs).bytes
            except Exception:  # noqa: BLE001 - an op the meta device cannot run: the size stays unknown
                problem_bytes = None
        try:
            with measurement_lock(self.device):
                peaks = device_peaks(self.device)
        except Exception as e:  # noqa: BLE001 - facts are informative; say what is missing
            facts = device_facts(self.device, problem_bytes, None, self.policy.timing)
            facts.unavailable = f"the device's peaks could not be measured: {type(e).__name__}: {e}"[:300]
            return facts
        return device_facts(self.device, problem_bytes, peaks, self.policy.timing)

    def profile(self, source: str, ncu: bool = False, result: EvalResult | None = None) -> Profile:
        """Evaluate (unless `result` is given), then profile a verified candidate for the analyst
        (`profiling.profile_candidate`)."""
        result = result or self.evaluate(source)

        def draw_inputs() -> list[Any]:
            with shared_use(self.device), self._ref_lock:
                return self.reference.timing_inputs(1)[0]

        return profile_candidate(result, device=self.device, pool=self.pool, worker_limits=self.policy.limits,
                                 phase_limits=self._limits(), load_payload=self._load_payload(source),
                                 draw_inputs=draw_inputs, ncu=ncu)

    def _load_payload(self, source: str) -> dict[str, Any]:
        payload = {"source": source, "init_args": self.reference.init_inputs, "state": self.reference.state,
                   "cast_dtype": self.precision.cast_dtype, "allow_streams": self.problem.allow_streams}
        if self.policy.program_order is not None:
            payload["program_order"] = self.policy.program_order
        return payload

    # -- timing ---------------------------------------------------------------------------------------

    def _rough_bytes(self, plan: Plan) -> int:
        """What the quick check's rough measurement needs at its peak: the timing's bytes with one input set."""
        if self._footprints is None:
            return plan.timing_bytes
        return min(plan.timing_bytes, timing_bytes(*self._footprints, 1))

    def _rough_time(self, worker: Worker, transport: WireTransport | SharedTransport, checks: list[Check],
                    reservation: Reservation, phases: dict[str, float]) -> None:
        """The quick check's rough time of a draft at the problem's size, for its author: `ROUGH_REPS` timed
        forwards (CUDA events, in the worker, as the real timing takes them) on one fresh input set after
        `ROUGH_WARMUP` warm-ups, under the device's measurement lock; their median, as a check of outcome `info`.
        Rough on purpose: one measurement, no baselines, no noise band, outputs not re-checked; never used to
        admit anything. A candidate that fails while timed fails the quick check (the same guards as the real
        timing); a GPU busy past `ROUGH_LOCK_S` leaves it unmeasured, with a check saying so."""
        t0 = time.monotonic()
        try:
            phases["rough_memory_wait_s"] = reservation.timing()  # this device's timing turn
            with shared_use(self.device), self._ref_lock:  # GPU lock first: see _roofline
                torch.cuda.empty_cache()
                inputs = self.reference.timing_inputs(1)
            lim = self._limits(ROUGH_REPS + ROUGH_WARMUP)
            with measurement_lock(self.device, timeout=ROUGH_LOCK_S):
                timed = time_candidate(transport, worker, inputs, ROUGH_REPS, ROUGH_WARMUP, lambda *_: None,
                                       call_s=lim["call_s"], total_s=lim["timing_s"], out_bytes=0, share=0.0)
            del inputs
            ms = sorted(timed.samples.event_ms)[len(timed.samples.event_ms) // 2]
            checks.append(Check(name="rough_time", outcome="info", detail=(
                f"rough time at the problem's size: {ms:.4g} ms (median of {ROUGH_REPS} forwards after "
                f"{ROUGH_WARMUP} warm-ups, CUDA events; rough, one measurement, never used to admit anything)")))
        except LockTimeout as e:
            checks.append(Check(name="rough_time", outcome="skip", detail=f"rough time not measured: {e}"))
        phases["rough_time_s"] = time.monotonic() - t0

    def _time(self, worker: Worker, transport: WireTransport | SharedTransport, checks: list[Check], plan: Plan,
              phases: dict[str, float]) -> Timing:
        pol = self.policy
        with self._ref_lock:
            if self._baselines is None:
                self._baselines = BaselineTimer(self.reference, pol.compile_mode)
        t0 = time.monotonic()
        with shared_use(self.device), self._ref_lock:  # GPU lock first: see _roofline
            torch.cuda.empty_cache()  # fresh segments for the timing sets: no cached trial block split under them
            inputs = self.reference.timing_inputs(plan.timing_sets)
        phases["timing_inputs_s"] = time.monotonic() - t0
        out_bytes = int(plan.footprint.get("output_bytes", 0))
        lim = self._limits(pol.timing_reps + pol.warmup)
        idx = self.device.index or 0
        native_recheck = plan.timing_gold == "native"
        tol = self.reference.family_tolerance("base") * (
            2 if native_recheck and self.reference.gold_precision != GOLD_NATIVE else 1)

        def check(k: int, outs: list[torch.Tensor], label: str) -> None:
            # (the measurement lock is held: taking the reference's lock under it keeps the lock order)
            with self._ref_lock:
                self._recheck_timed(inputs[k], outs, native_recheck, tol, label)

        with measurement_lock(self.device):
            t_lock = time.monotonic()
            clocks_before = gpu_monitor.read(idx)
            eager_a = self._baselines.eager(inputs, pol.timing_reps, pol.warmup)
            t0 = time.monotonic()
            torch.cuda.empty_cache()  # the eager run's freed outputs are the gold's room now
            timed = time_candidate(transport, worker, inputs, pol.timing_reps, pol.warmup, check,
                                   call_s=lim["call_s"], total_s=lim["timing_s"], out_bytes=out_bytes,
                                   share=pol.check_share, rng=random.Random(secrets.randbits(64)))
            phases["timing_candidate_s"] = time.monotonic() - t0 - timed.check_s
            phases["timing_recheck_s"] = timed.check_s
            # The worker is done: nothing of the candidate's may run while the baseline is timed again.
            transport.close()
            worker.kill()
            torch.cuda.empty_cache()
            eager_b = self._baselines.eager(inputs, pol.timing_reps, pol.warmup)
            clocks_after = gpu_monitor.read(idx)
            t0 = time.monotonic()
            compiled, compile_why = self._baselines.compiled(inputs, pol.timing_reps, pol.warmup)
            phases["timing_compile_s"] = time.monotonic() - t0
            measure_s = time.monotonic() - t_lock
        checks.append(Check(name="timed_outputs", outcome="pass",
                            detail=f"{len(timed.checked)} of {pol.timing_reps} timed repetitions over "
                                   f"{len(inputs)} input sets checked, each chosen at random after it ran"))
        roof, floor_why = None, None
        try:
            roof = self._roofline(inputs[0])
        except Exception as e:  # noqa: BLE001 - the floor is informative; its failure must not fail the verdict
            floor_why = f"{type(e).__name__}: {e}"[:300]
        summary, check_ = timing_summary(timed.samples, eager_a, eager_b, compiled, compile_why, clocks_before,
                                         clocks_after, roof, floor_why, pol.compile_mode, checked=timed.checked)
        checks.append(check_)
        summary["timing_sets"] = len(inputs)
        summary["checked_reps"] = len(timed.checked)
        if roof is not None and roof.get("memory_ms"):  # the roofline's two sides, for the design's own floor
            summary["bandwidth"] = roof["bytes"] / (roof["memory_ms"] / 1e3)
            summary["compute_floor_ms"] = roof.get("compute_ms")
        summary["measure_s"] = measure_s  # seconds this evaluation held the GPU exclusively
        del inputs
        return Timing.model_validate(summary)

    def _recheck_timed(self, inputs: list[Any], outs: list[torch.Tensor], native: bool, tol: float,
                       label: str) -> None:
        gold = self.reference.gold_for(inputs, native=native)
        if len(outs) != len(gold):
            raise Reject(Reason.WRONG_OUTPUT, f"{label}: {len(outs)} outputs, expected {len(gold)}", "timing")
        try:
            compare_all(outs, gold, tol, label)
        except Reject as r:
            raise Reject(r.reason, r.detail, "timing") from None

    def _roofline(self, inputs: list[Any]) -> dict[str, float]:
        # Lock order, everywhere in this class: a GPU lock (shared_use, measurement_lock) is taken before
        # `_ref_lock`, never while holding it. `_time` holds the measurement lock and then takes `_ref_lock` to
        # re-check the timed outputs; a thread holding `_ref_lock` while waiting for the GPU would deadlock
        # with it (seen with four branches on one GPU).
        with self._ref_lock:
            if self._roof is not None:
                return self._roof
            try:  # on the meta device: no memory, no time
                model, meta_inputs = meta_problem(self.problem, self.precision.cast_dtype)
                work = count_work(model, meta_inputs)
            except Exception:  # noqa: BLE001 - an op the meta device cannot run: count on the real thing
                work = None
        if work is None:
            with shared_use(self.device), self._ref_lock:
                work = count_work(copy.deepcopy(self.reference.native), inputs)
        with measurement_lock(self.device):
            peaks = device_peaks(self.device)
        with self._ref_lock:
            if self._roof is None:
                self._roof = {**floor_ms(work, peaks, self.precision.value), "flops": work.flops, "bytes": work.bytes}
            return self._roof

    # -- judging ------------------------------------------------------------------------------------

    def _coverage(self, result: EvalResult, checks: list[Check], launch_s: float, forward_s: float,
                  kernel_time: dict[str, float] | None) -> None:
        measured = measure_coverage(kernel_time, launch_s, forward_s, self.device.type)
        if measured is None:
            checks.append(Check(name="coverage", outcome="skip", detail="no profile was taken"))
            return
        cov, basis = measured
        result.kernel_coverage = round(cov, 4)
        checks.append(judge_coverage(cov, basis, self.policy.min_coverage))
