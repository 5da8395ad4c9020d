"""`Evaluator(problem, device, policy).evaluate(source) -> EvalResult`: the only judge of a candidate.

The trusted process (this one) never imports candidate code. It checks the source statically, hands it
to a fresh worker, feeds the worker input sets drawn from a secret seed in random order, and judges every
reply itself: the op record, the Triton launches, the output types and layouts, aliasing, the state of the
inputs after the call and the values against the float64 reference. The first failure decides the verdict.
"""

from __future__ import annotations

import copy
import logging
import os
import random
import re
import shutil
import statistics
import tempfile
import threading
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from . import gpu_monitor, static
from .baselines import BaselineTimer
from .compare import compare
from .device import resolve_device
from .inputs import FAMILIES
from .locks import LockTimeout, measurement_lock, shared_use
from .pool import Limits, Worker, WorkerFault, WorkerPool
from .problem import Precision, Problem
from .profiling import (
    NCU_ALL_METRICS, NcuReport, Profile, breakdown_from_events, ncu_unavailable_reason, parse_ncu_csv, render,
)
from .reference import ReferenceSession, Trial, TrialBattery
from .result import Check, EvalResult, KernelLaunch, Reason, TrialRecord, bound
from .roofline import count_work, device_peaks, floor_ms
from .timing import Samples, judge_speedup, noise_band, suspect_flags
from .wire import dtype_name

log = logging.getLogger(__name__)


@dataclass
class EvalPolicy:
    """How hard to check. Defaults follow VERIFIER.md's 'Numbers to hold to'."""

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
    compile_mode: str | None = "default"
    """torch.compile mode of the compiled baseline ("default", "max-autotune"), None to skip it"""
    pool_bytes: int = 4 << 30
    """device memory for the pool of timing input sets (and their expected outputs)"""


class _Reject(Exception):
    def __init__(self, reason: Reason, detail: str, check: str, rule: str | None = None) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.check, self.rule = reason, detail, check, rule


_KIND_REASON = {
    "import": Reason.COMPILE_ERROR, "missing_model_new": Reason.MISSING_MODEL_NEW, "init": Reason.INIT_ERROR,
    "parameters": Reason.PARAMETER_MISMATCH, "exception": Reason.RUNTIME_ERROR, "out_of_memory": Reason.OUT_OF_MEMORY,
    "cuda_error": Reason.CUDA_ERROR, "protocol": Reason.WORKER_ERROR,
}


class Evaluator:
    """Judges candidates for one problem on one device. Reuse it: the reference and spare workers persist."""

    def __init__(self, problem: Problem, device: str | None = None, policy: EvalPolicy | None = None,
                 pool: WorkerPool | None = None, seed: int | None = None) -> None:
        self.problem = problem
        self.policy = policy or EvalPolicy()
        self.device = resolve_device(device)
        self.precision = self.policy.precision or problem.precision
        self._own_pool = pool is None
        self._baselines: BaselineTimer | None = None
        self._roof: dict[str, float] | None = None
        self._tolerance: float | None = None
        self._ref_lock = threading.RLock()
        # Start the first worker before the reference runs: its start-up overlaps ours.
        if pool is not None and pool.device != str(self.device):
            raise ValueError(f"the worker pool runs on {pool.device}, this evaluator on {self.device}")
        self.pool = pool or WorkerPool(str(self.device), self.policy.limits, self.policy.spares)
        try:
            self.reference = ReferenceSession(problem, self.device, self.precision,
                                              seed if seed is not None else secrets.randbits(63))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the verdict ----------------------------------------------------------------------------------

    def evaluate(self, source: str) -> EvalResult:
        t_start = time.monotonic()
        checks: list[Check] = []
        phases: dict[str, float] = {}
        result = EvalResult(verdict="fail", reason=Reason.WORKER_ERROR, precision=self.precision.value,
                            device=str(self.device))
        result.timing_unavailable = (
            "cpu mode runs Triton's interpreter: timings would be meaningless" if self.device.type == "cpu"
            else "timing was switched off" if not self.policy.timing else "the candidate was rejected before timing"
        )
        worker: Worker | None = None
        try:
            self._static(source, checks)
            worker = self.pool.acquire()
            t0 = time.monotonic()
            with self._ref_lock, shared_use(self.device):
                battery = self.reference.battery(self.policy.trials, self.policy.families)
            phases["reference_s"] = time.monotonic() - t0
            result.tolerance = self._tolerance = battery.tolerance
            result.problem_flags = battery.problem_flags
            for note in battery.notes:
                checks.append(Check(name="tolerance", outcome="info", detail=note))
            for fam, why in battery.skipped_families.items():
                checks.append(Check(name=f"family:{fam}", outcome="skip", detail=why))
            result.families = sorted({t.family for t in battery.trials})
            t0 = time.monotonic()
            info = worker.wait_ready()
            phases["worker_wait_s"] = time.monotonic() - t0
            phases["worker_startup_s"] = worker.startup_s or 0.0
            for stage, at in (info.get("stages") or {}).items():
                if stage != "spawned":
                    phases[f"worker_{stage}_s"] = float(at)
            result.versions = {k: str(v) for k, v in info.get("versions", {}).items()}
            sandbox = str(info.get("sandbox") or "unknown: the worker did not say")
            checks.append(Check(name="sandbox", outcome="info", detail=sandbox))
            with shared_use(self.device):
                self._run(worker, source, battery, result, checks, phases)
            if self.device.type == "cuda" and self.policy.timing:
                t0 = time.monotonic()
                try:
                    result.timing = self._time(worker, checks)
                    result.timing_unavailable = None
                except LockTimeout as e:
                    result.timing_unavailable = f"not timed: {e}"
                    checks.append(Check(name="timing", outcome="skip", detail=str(e)))
                phases["timing_s"] = time.monotonic() - t0
                phases["measure_s"] = float((result.timing or {}).get("measure_s", 0.0))
            result.verdict, result.reason = "pass", Reason.OK
            result.detail = (f"correct on {len(result.trials)} trials over {len(result.families)} input families; "
                             f"worst error {result.max_rel_error or 0:.3g} (tolerance {battery.tolerance:.3g})")
        except _Reject as r:
            result.reason, result.detail, result.rule = r.reason, bound(r.detail), r.rule
            checks.append(Check(name=r.check, outcome="fail", detail=bound(r.detail, 600)))
        except WorkerFault as f:
            result.reason, result.detail = f.reason, bound(f.detail)
            checks.append(Check(name="worker", outcome="fail", detail=bound(f.detail, 600)))
        finally:
            if worker is not None:
                result.candidate_log = bound(worker.log_tail(), 4000)
                worker.close()
        result.checks = checks
        phases["total_s"] = time.monotonic() - t_start
        result.phases = {k: round(v, 4) for k, v in phases.items()}
        return result

    def _static(self, source: str, checks: list[Check]) -> None:
        try:
            violations = static.check_source(source, allow_streams=self.problem.allow_streams)
        except SyntaxError as e:
            raise _Reject(Reason.SYNTAX_ERROR, f"line {e.lineno}: {e.msg}", "static") from None
        if not self.policy.static_check:
            checks.append(Check(name="static", outcome="skip", detail="disabled by policy"))
            return
        if violations:
            first = violations[0]
            more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
            raise _Reject(Reason.FORBIDDEN_CODE, first.sentence() + more, "static", first.rule)
        checks.append(Check(name="static", outcome="pass"))

    def _run(self, worker: Worker, source: str, battery: TrialBattery, result: EvalResult,
             checks: list[Check], phases: dict[str, float]) -> None:
        lim = self.policy.limits
        t0 = time.monotonic()
        header, _ = worker.request({"op": "load"}, self._load_payload(source), lim.load_s, "import and construction")
        phases["load_s"] = time.monotonic() - t0
        self._judge_record(header, "load")
        self._judge_processes(worker, "load")
        if not header.get("ok"):
            kind = header.get("kind", "exception")
            raise _Reject(_KIND_REASON.get(kind, Reason.RUNTIME_ERROR), str(header.get("detail", "")), "load")
        checks.append(Check(name="load", outcome="pass", detail="imported, constructed, parameters loaded"))

        rng = random.Random(secrets.randbits(64))
        order = list(battery.trials)
        rng.shuffle(order)
        launches: dict[str, KernelLaunch] = {}
        launch_s = forward_s = 0.0
        kernel_time: dict[str, float] | None = None
        profile_at = rng.randrange(1, len(order)) if self.device.type == "cuda" and len(order) > 1 else -1
        sent: list[list[torch.Tensor]] = []
        max_rel = norm_rel = 0.0
        t_trials = time.monotonic()
        prev_shapes: list[Any] | None = None
        for k, trial in enumerate(order):
            tensors = [x for x in trial.inputs if isinstance(x, torch.Tensor)]
            shapes = [(tuple(x.shape), x.dtype) for x in tensors]
            reuse = prev_shapes == shapes and rng.random() < 0.6
            prev_shapes = shapes
            layouts = [{"shape": list(x.shape), "stride": list(x.stride())} if isinstance(x, torch.Tensor) else None
                       for x in trial.inputs]
            out_bytes = sum(torch.Size(m["shape"]).numel() * torch.empty((), dtype=m["dtype"]).element_size()
                            for m in trial.out_meta)
            in_bytes = sum(x.numel() * x.element_size() for x in tensors)
            label = f"trial {k + 1}/{len(order)} ({trial.family})"
            header, payload = worker.request(
                {"op": "call", "layouts": layouts, "reuse": reuse, "profile": k == profile_at, "poison": True},
                {"inputs": trial.inputs},
                lim.first_call_s if k == 0 else lim.call_s, f"the forward pass ({label})",
                max_bytes=2 * (out_bytes + in_bytes) + (1 << 20),
            )
            self._judge_record(header, label)
            self._judge_processes(worker, label)
            if not header.get("ok"):
                kind = header.get("kind", "exception")
                raise _Reject(_KIND_REASON.get(kind, Reason.RUNTIME_ERROR), f"{label}: {header.get('detail', '')}",
                              "forward")
            for name, rec in header.get("launches", {}).items():
                entry = launches.setdefault(name, KernelLaunch(name=name, launches=0))
                entry.launches += int(rec.get("count", 0))
                if not entry.compiled and isinstance(rec.get("compiled"), dict):
                    entry.compiled = {str(k): int(v) for k, v in rec["compiled"].items() if isinstance(v, (int, float))}
                for g in rec.get("grids", []):
                    if g not in entry.grids and len(entry.grids) < 4:
                        entry.grids.append(g)
            if k > 0 or len(order) == 1:  # the first call carries one-off costs (compilation, lazy set-up)
                forward_s += float(header.get("forward_s", 0.0))
                launch_s += sum(float(r.get("seconds", 0.0)) for r in header.get("launches", {}).values())
            if header.get("kernel_time"):
                kernel_time = header["kernel_time"]
            if not header.get("launches"):
                raise _Reject(Reason.NO_CUSTOM_KERNEL,
                              f"{label}: ModelNew.forward launched no Triton kernel; the work must be done by the "
                              "candidate's own @triton.jit kernels", "triton_launch")
            outs = self._judge_outputs(header, payload, trial, label)
            self._judge_inputs(payload, tensors, label)
            rec_max = rec_norm = 0.0
            for i, (o, g) in enumerate(zip(outs, trial.gold)):
                c = compare(o, g, trial.tolerance or battery.tolerance, f"{label}, output {i}")
                if not c.ok:
                    result.max_rel_error = c.max_rel
                    result.norm_rel_error = c.norm_rel
                    raise _Reject(c.reason or Reason.WRONG_OUTPUT, c.detail, "correctness")
                rec_max, rec_norm = max(rec_max, c.max_rel), max(rec_norm, c.norm_rel)
            max_rel, norm_rel = max(max_rel, rec_max), max(norm_rel, rec_norm)
            result.trials.append(TrialRecord(family=trial.family, trial=trial.index, max_rel_error=rec_max,
                                             norm_rel_error=rec_norm, passed=True))
            sent.append(outs)
        phases["trials_s"] = time.monotonic() - t_trials
        result.max_rel_error, result.norm_rel_error = max_rel, norm_rel
        result.kernels = sorted(launches.values(), key=lambda k: -k.launches)
        checks.append(Check(name="correctness", outcome="pass",
                            detail=f"{len(order)} trials, families {', '.join(result.families)}; worst error "
                                   f"{max_rel:.3g} (tolerance {battery.tolerance:.3g})"))
        checks.append(Check(name="ops", outcome="pass", detail="no PyTorch compute ops in forward"))
        checks.append(Check(name="triton_launch", outcome="pass",
                            detail=", ".join(f"{k.name}×{k.launches}" for k in result.kernels)))
        checks.append(Check(name="inputs", outcome="pass", detail="inputs unchanged after every call"))
        checks.append(Check(name="aliasing", outcome="pass", detail="fresh outputs, no aliasing"))
        self._coverage(result, checks, launch_s, forward_s, kernel_time)
        self._recheck(worker, sent, checks)

    # -- profiles -------------------------------------------------------------------------------------

    def profile(self, source: str, ncu: bool = False, result: EvalResult | None = None) -> Profile:
        """Evaluate (unless `result` is given), then profile a verified candidate for the analyst."""
        result = result or self.evaluate(source)
        prof = Profile(verdict=result.verdict, reason=str(result.reason), timing=result.timing,
                       kernels=[k.model_dump() for k in result.kernels])
        if not result.passed:
            prof.breakdown_unavailable = prof.ncu.why = f"the candidate was rejected ({result.reason})"
            prof.text = f"rejected: {result.reason}: {result.detail}"
            return prof
        if self.device.type != "cuda":
            prof.breakdown_unavailable = "no GPU: kernels ran in Triton's interpreter"
            prof.ncu = NcuReport(available=False, why="no GPU: kernels ran in Triton's interpreter")
            prof.text = render(prof)
            return prof
        trial = self.reference.timing_pool(1, self.policy.pool_bytes)[0]
        layouts = [{"shape": list(x.shape), "stride": list(x.stride())} if isinstance(x, torch.Tensor) else None
                   for x in trial.inputs]
        worker = self.pool.acquire()
        try:
            self._load(worker, source)
            header, _ = worker.request({"op": "profile", "layouts": layouts, "iterations": 3}, {"inputs": trial.inputs},
                                       self.policy.limits.first_call_s, "profiling")
            if header.get("ok"):
                prof.breakdown = breakdown_from_events([(str(n), float(us)) for n, us in header.get("events", [])])
            else:
                prof.breakdown_unavailable = f"the profiled run failed: {str(header.get('detail', ''))[:300]}"
        except WorkerFault as f:
            prof.breakdown_unavailable = f"the profiled run failed: {f.detail}"
        finally:
            worker.close()
        prof.ncu = self._ncu(source, trial, layouts, [k.name for k in result.kernels]) if ncu else \
            NcuReport(available=False, why="not requested (use --ncu)")
        prof.text = render(prof)
        return prof

    def _load_payload(self, source: str) -> dict[str, Any]:
        return {"source": source, "init_args": self.reference.init_inputs, "state": self.reference.state,
                "cast_dtype": self.precision.cast_dtype, "allow_streams": self.problem.allow_streams}

    def _load(self, worker: Worker, source: str) -> None:
        header, _ = worker.request({"op": "load"}, self._load_payload(source), self.policy.limits.load_s,
                                   "import and construction")
        if not header.get("ok"):
            raise WorkerFault(Reason.RUNTIME_ERROR, str(header.get("detail", "load failed")))

    def _ncu(self, source: str, trial: Trial, layouts: list[Any], names: list[str]) -> NcuReport:
        why = ncu_unavailable_reason()
        if why:
            return NcuReport(available=False, why=why)
        log_dir = tempfile.mkdtemp(prefix="kw-ncu-")
        log_file = os.path.join(log_dir, "ncu.csv")
        pattern = "regex:^(" + "|".join(re.escape(n) for n in names) + ")" if names else "regex:.*"
        cmd = [shutil.which("ncu") or "ncu", "--csv", "--page", "raw", "--log-file", log_file, "--target-processes", "all",
               "--clock-control", "none", "--kernel-name", pattern, "--launch-count", "3",
               "--metrics", ",".join(NCU_ALL_METRICS)]
        worker = Worker(str(self.device), self.policy.limits, wrapper=cmd)
        try:
            self._load(worker, source)
            with measurement_lock(self.device):
                worker.request({"op": "call", "layouts": layouts, "reuse": False, "profile": False, "poison": False},
                               {"inputs": trial.inputs}, self.policy.limits.first_call_s * 3, "the ncu-profiled run")
            worker.close()
            text = open(log_file).read() if os.path.exists(log_file) else ""
        except WorkerFault as f:
            worker.close()
            return NcuReport(available=False, why=f"the ncu-profiled run failed: {f.detail}")
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        kernels = parse_ncu_csv(text)
        if not kernels:
            tail = " ".join(text.strip().splitlines()[-3:])[:300] if text else worker.log_tail(600).strip()[-300:]
            return NcuReport(available=False, why=f"ncu returned no metrics (counters not readable?): {tail}")
        return NcuReport(available=True, kernels=kernels)

    # -- timing ---------------------------------------------------------------------------------------

    def _time(self, worker: Worker, checks: list[Check]) -> dict[str, Any]:
        pol = self.policy
        with self._ref_lock:
            if self._baselines is None:
                self._baselines = BaselineTimer(self.reference, pol.compile_mode)
        with self._ref_lock, shared_use(self.device):
            pool = self.reference.timing_pool(pol.timing_reps, pol.pool_bytes)
        inputs = [t.inputs for t in pool]
        layouts = [{"shape": list(x.shape), "stride": list(x.stride())} if isinstance(x, torch.Tensor) else None
                   for x in inputs[0]]
        out_bytes = sum(torch.Size(m["shape"]).numel() * torch.empty((), dtype=m["dtype"]).element_size()
                        for m in pool[0].out_meta) * len(pool)
        idx = self.device.index or 0
        with measurement_lock(self.device):
            t_lock = time.monotonic()
            clocks_before = gpu_monitor.read(idx)
            eager_a = self._baselines.eager(inputs, pol.timing_reps, pol.warmup)
            header, payload = worker.request(
                {"op": "time", "reps": pol.timing_reps, "warmup": pol.warmup, "layouts": layouts},
                {"sets": inputs}, pol.limits.timing_s, "timing", max_bytes=out_bytes + (1 << 20))
            # The worker is done: nothing of the candidate's may run while the baseline is timed again.
            self._judge_processes(worker, "timing")
            worker.kill()
            eager_b = self._baselines.eager(inputs, pol.timing_reps, pol.warmup)
            clocks_after = gpu_monitor.read(idx)
            compiled, compile_why = self._baselines.compiled(inputs, pol.timing_reps, pol.warmup)
            measure_s = time.monotonic() - t_lock
        self._judge_record(header, "timing")
        if not header.get("ok"):
            kind = header.get("kind", "exception")
            raise _Reject(_KIND_REASON.get(kind, Reason.RUNTIME_ERROR), f"timing: {header.get('detail', '')}", "timing")
        if header.get("bad_outputs"):
            raise _Reject(Reason.BAD_OUTPUT, "timing: forward returned something other than plain tensors", "timing")
        outs = (payload or {}).get("outputs") or []
        counts = header.get("counts") or []
        if len(counts) != len(pool) or sum(counts) != len(outs):
            raise _Reject(Reason.WORKER_ERROR, "timing: the worker's outputs do not match the input sets", "timing")
        pos = 0
        for k, (trial, n) in enumerate(zip(pool, counts)):
            for i, g in enumerate(trial.gold[:n]):
                c = compare(outs[pos + i], g, self._tolerance or self.precision.tolerance,
                            f"timed repetition on input set {k}, output {i}")
                if not c.ok:
                    raise _Reject(c.reason or Reason.WRONG_OUTPUT, c.detail, "timing")
            pos += n
        checks.append(Check(name="timed_outputs", outcome="pass",
                            detail=f"outputs of {len(pool)} timed input sets re-checked"))
        cand = Samples(event_ms=[float(x) for x in header["event_ms"]], wall_ms=[float(x) for x in header["wall_ms"]],
                       outer_ms=[float(x) for x in header.get("outer_ms", [])],
                       pre_ms=[float(x) for x in header.get("pre_ms", [])])
        summary = self._timing_summary(cand, eager_a, eager_b, compiled, compile_why, clocks_before, clocks_after,
                                       pool[0].inputs, checks)
        summary["measure_s"] = measure_s  # seconds this evaluation held the GPU exclusively
        return summary

    def _timing_summary(self, cand: Samples, eager_a: Samples, eager_b: Samples, compiled: dict[str, float] | None,
                        compile_why: str | None, before: dict[str, Any], after: dict[str, Any], inputs: list[Any],
                        checks: list[Check]) -> dict[str, Any]:
        cs = cand.summary()
        med = cs["median_ms"]
        eager_ms = (eager_a.summary()["median_ms"] + eager_b.summary()["median_ms"]) / 2
        band = noise_band(eager_a, eager_b)
        timing: dict[str, Any] = {
            "median_ms": med, "p25_ms": cs["p25_ms"], "p75_ms": cs["p75_ms"], "min_ms": cs["min_ms"],
            "max_ms": cs["max_ms"], "reps": int(cs["reps"]), "wall_median_ms": cs["wall_median_ms"],
            "noise_band": band, "eager_ms": eager_ms, "speedup_vs_eager": eager_ms / med,
            "vs_eager": judge_speedup(eager_ms / med, band),
            "compile_mode": self.policy.compile_mode,
            "compile_ms": compiled["median_ms"] if compiled else None,
            "speedup_vs_compile": compiled["median_ms"] / med if compiled else None,
            "vs_compile": judge_speedup(compiled["median_ms"] / med, band) if compiled else None,
            "compile_unavailable": compile_why,
            "clocks": {"before": before, "after": after},
        }
        floor = None
        try:
            roof = self._roofline(inputs)
            floor = roof["floor_ms"]
            timing.update({"floor_ms": roof["floor_ms"], "bound": roof["bound"], "fraction_of_floor": roof["floor_ms"] / med,
                           "flops": roof["flops"], "bytes": roof["bytes"]})
        except Exception as e:  # noqa: BLE001 - the floor is informative; its failure must not fail the verdict
            timing["floor_unavailable"] = f"{type(e).__name__}: {e}"[:300]
        flags, flush_spin = suspect_flags(cand, eager_a, floor_ms=floor, clocks={"before": before, "after": after})
        if flush_spin:
            timing["flush_spin_ms"] = flush_spin
        timing["suspect"] = flags
        checks.append(Check(name="timing", outcome="fail" if flags else "pass",
                            detail=f"{med:.4g} ms (p25 {cs['p25_ms']:.4g}, p75 {cs['p75_ms']:.4g}); eager {eager_ms:.4g} ms; "
                                   f"noise band {band:.1%}" + (f"; suspect: {'; '.join(flags)}" if flags else "")))
        return timing

    def _roofline(self, inputs: list[Any]) -> dict[str, float]:
        with self._ref_lock:
            if self._roof is None:
                work = count_work(copy.deepcopy(self.reference.native), inputs)
                with measurement_lock(self.device):
                    peaks = device_peaks(self.device)
                self._roof = {**floor_ms(work, peaks, self.precision.value), "flops": work.flops, "bytes": work.bytes}
            return self._roof

    # -- judging a reply ------------------------------------------------------------------------------

    def _judge_record(self, header: dict[str, Any], label: str) -> None:
        tampered = header.get("tampered") or []
        if tampered:
            raise _Reject(Reason.TAMPERING, f"{label}: the candidate replaced harness functions: "
                          f"{', '.join(map(str, tampered[:6]))}", "tampering")
        violations = header.get("violations") or []
        if violations:
            raise _Reject(Reason.FORBIDDEN_CALL, f"{label}: the candidate attempted: {'; '.join(map(str, violations[:5]))}",
                          "forbidden_calls")
        if int(header.get("threads", 0) or 0) > 0:
            raise _Reject(Reason.FORBIDDEN_CALL, f"{label}: the candidate left {header['threads']} extra thread(s) "
                          "running", "threads")
        ops = header.get("ops") or {}
        if ops:
            shown = ", ".join(f"aten.{k}×{v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:8])
            raise _Reject(Reason.FORBIDDEN_OP, f"{label}: ModelNew.forward ran PyTorch compute ops ({shown}); "
                          "only allocation, views and layout copies are allowed outside Triton kernels", "ops")

    def _judge_processes(self, worker: Worker, label: str) -> None:
        stray = worker.stray_processes()
        if stray:
            raise _Reject(Reason.FORBIDDEN_CALL, f"{label}: the candidate started {len(stray)} process(es) that are "
                          "still running; candidates may not create processes", "processes")

    def _judge_outputs(self, header: dict[str, Any], payload: Any, trial: Trial, label: str) -> list[torch.Tensor]:
        metas = header.get("outputs") or []
        if len(metas) != len(trial.out_meta):
            raise _Reject(Reason.BAD_OUTPUT, f"{label}: forward returned {len(metas)} output(s); the reference returns "
                          f"{len(trial.out_meta)}", "outputs")
        outs = (payload or {}).get("outputs") or []
        for i, (m, ref) in enumerate(zip(metas, trial.out_meta)):
            where = f"{label}, output {i}"
            if m.get("type") != "torch.Tensor":
                raise _Reject(Reason.BAD_OUTPUT, f"{where}: forward returned a {m.get('type')}, not a plain torch.Tensor "
                              "(tensor subclasses and lazy values are not accepted)", "outputs")
            if torch.device(m["device"]) != self.device and not (
                    self.device.type == "cuda" and torch.device(m["device"]).type == "cuda"
                    and (torch.device(m["device"]).index or 0) == (self.device.index or 0)):
                raise _Reject(Reason.WRONG_DEVICE, f"{where}: the output is on {m['device']}, the inputs on {self.device}",
                              "outputs")
            if m["dtype"] != dtype_name(ref["dtype"]):
                raise _Reject(Reason.WRONG_DTYPE, f"{where}: dtype {m['dtype']}, expected {dtype_name(ref['dtype'])}",
                              "outputs")
            if list(m["shape"]) != list(ref["shape"]):
                raise _Reject(Reason.WRONG_SHAPE, f"{where}: shape {tuple(m['shape'])}, expected {tuple(ref['shape'])}",
                              "outputs")
            if not _strides_ok(m["shape"], m["stride"], ref):
                raise _Reject(Reason.WRONG_STRIDES, f"{where}: strides {tuple(m['stride'])}, expected "
                              f"{tuple(ref['stride'])} (or contiguous)", "outputs")
            if m.get("aliases"):
                raise _Reject(Reason.ALIASED_OUTPUT, f"{where}: the output shares memory with "
                              f"{', '.join(m['aliases'])}; every call must return freshly written tensors", "aliasing")
        if len(outs) != len(metas):
            raise _Reject(Reason.WORKER_ERROR, f"{label}: the worker sent {len(outs)} output tensors for "
                          f"{len(metas)} outputs", "outputs")
        return outs

    def _judge_inputs(self, payload: Any, sent: list[torch.Tensor], label: str) -> None:
        after = (payload or {}).get("inputs_after") or []
        if len(after) != len(sent):
            raise _Reject(Reason.WORKER_ERROR, f"{label}: the worker did not report its inputs", "inputs")
        for i, (a, s) in enumerate(zip(after, sent)):
            ref = s.detach().cpu().contiguous()
            if a.shape != ref.shape or not _bitwise_equal(a, ref):
                raise _Reject(Reason.INPUT_MUTATED, f"{label}: input {i} was modified by the forward pass; "
                              "candidates must not write to their inputs", "inputs")

    def _coverage(self, result: EvalResult, checks: list[Check], launch_s: float, forward_s: float,
                  kernel_time: dict[str, float] | None) -> None:
        min_cov = self.policy.min_coverage
        if kernel_time is not None:
            own, other = kernel_time["own_us"], kernel_time["other_us"]
            cov = own / (own + other) if own + other > 0 else 0.0
            basis = f"device time in the candidate's kernels {own:.0f} µs, in other kernels {other:.0f} µs"
        elif self.device.type == "cpu":
            cov = launch_s / forward_s if forward_s > 0 else 0.0
            basis = f"wall time inside Triton launches {launch_s:.3f} s of {forward_s:.3f} s in forward"
        else:
            checks.append(Check(name="coverage", outcome="skip", detail="no profile was taken"))
            return
        result.kernel_coverage = round(cov, 4)
        if cov < min_cov:
            raise _Reject(Reason.DECOY_KERNEL, f"only {cov:.0%} of the forward's time is in the candidate's own Triton "
                          f"kernels ({basis}); the kernels must carry the work", "coverage")
        checks.append(Check(name="coverage", outcome="pass", detail=f"{cov:.0%}: {basis}"))

    def _recheck(self, worker: Worker, sent: list[list[torch.Tensor]], checks: list[Check]) -> None:
        total = sum(o.numel() * o.element_size() for outs in sent for o in outs)
        header, payload = worker.request({"op": "recheck"}, None, self.policy.limits.call_s, "the final re-read",
                                         max_bytes=total + (1 << 20))
        self._judge_record(header, "re-read")
        self._judge_processes(worker, "re-read")
        again = (payload or {}).get("outputs") or []
        counts = header.get("counts") or []
        flat: list[torch.Tensor] = []
        for outs, n in zip(sent, counts):
            flat.extend(outs[:n])
        if len(again) > len(flat) or any(n != len(o) for n, o in zip(counts, sent)):
            raise _Reject(Reason.WORKER_ERROR, "the worker's re-read does not match what it sent", "recheck")
        for k, (a, b) in enumerate(zip(again, flat)):
            if a.shape != b.shape or not _bitwise_equal(a, b):
                raise _Reject(Reason.OUTPUT_CHANGED, f"an output changed after forward returned (output {k}); "
                              "results must be complete when forward returns", "recheck")
        checks.append(Check(name="recheck", outcome="pass", detail=f"{len(again)} earlier outputs unchanged"))


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    if a.is_floating_point():
        ints = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
        return bool(torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)))
    return bool(torch.equal(a, b))


def _strides_ok(shape: list[int], stride: list[int], ref: dict[str, Any]) -> bool:
    def norm(st: list[int]) -> list[int]:
        return [s if n > 1 else 0 for n, s in zip(shape, st)]

    contiguous = []
    acc = 1
    for n in reversed(shape):
        contiguous.append(acc)
        acc *= max(n, 1)
    contiguous.reverse()
    return norm(stride) == norm(ref["stride"]) or norm(stride) == norm(contiguous)
