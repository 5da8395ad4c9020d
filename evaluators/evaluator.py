"""`Evaluator(problem, device, policy).evaluate(source) -> EvalResult`: the only judge of a candidate.

The trusted process (this one) never imports candidate code. It checks the source statically, hands it
to a fresh worker, feeds the worker input sets drawn from a secret seed in random order, and judges every
reply itself: the op record, the Triton launches, the output types and layouts, aliasing, the state of the
inputs after the call and the values against the float64 reference. The first failure decides the verdict.
"""

from __future__ import annotations

import logging
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from . import static
from .compare import compare
from .device import resolve_device
from .inputs import FAMILIES
from .pool import Limits, Worker, WorkerFault, WorkerPool
from .problem import Precision, Problem
from .reference import ReferenceSession, Trial, TrialBattery
from .result import Check, EvalResult, KernelLaunch, Reason, TrialRecord, bound
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
        # Start the first worker before the reference runs: its start-up overlaps ours.
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
            else "timing is not measured by this version of the evaluator"
        )
        worker: Worker | None = None
        try:
            self._static(source, checks)
            worker = self.pool.acquire()
            t0 = time.monotonic()
            battery = self.reference.battery(self.policy.trials, self.policy.families)
            phases["reference_s"] = time.monotonic() - t0
            result.tolerance = battery.tolerance
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
            result.versions = {k: str(v) for k, v in info.get("versions", {}).items()}
            self._run(worker, source, battery, result, checks, phases)
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
        header, _ = worker.request(
            {"op": "load"},
            {"source": source, "init_args": self.reference.init_inputs, "state": self.reference.state,
             "cast_dtype": self.precision.cast_dtype},
            lim.load_s, "import and construction",
        )
        phases["load_s"] = time.monotonic() - t0
        self._judge_record(header, "load")
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
            if not header.get("ok"):
                kind = header.get("kind", "exception")
                raise _Reject(_KIND_REASON.get(kind, Reason.RUNTIME_ERROR), f"{label}: {header.get('detail', '')}",
                              "forward")
            for name, rec in header.get("launches", {}).items():
                entry = launches.setdefault(name, KernelLaunch(name=name, launches=0))
                entry.launches += int(rec.get("count", 0))
                for g in rec.get("grids", []):
                    if g not in entry.grids and len(entry.grids) < 4:
                        entry.grids.append(g)
                launch_s += float(rec.get("seconds", 0.0))
            forward_s += float(header.get("forward_s", 0.0))
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
                c = compare(o, g, battery.tolerance, f"{label}, output {i}")
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
