"""Judging a worker's replies: pure functions from what came back to a verdict.

Each function takes plain values (the reply's header dict, the tensors the worker shared, the reference's
output metadata, tolerances, timing samples) and either returns or raises `Reject`, which carries the
stable reason, the bounded detail safe to show a language model, the check that failed and, for static
rules, the rule. No workers, no reference, no evaluator state: the `Evaluator` runs the trials and calls
these in order; the first `Reject` decides the verdict.
"""

from __future__ import annotations

from typing import Any

import torch

from .compare import bitwise_equal, compare
from .result import Check, Reason
from .timing import Samples, judge_speedup, noise_band, split_flag, suspect_flags
from .wire import dtype_name


class Reject(Exception):
    """The candidate fails: `reason` (stable), `detail` (for people and models), the failed `check`.

    `errors` carries the (max, norm) relative errors of a failed comparison, for the result to report."""

    def __init__(self, reason: Reason, detail: str, check: str, rule: str | None = None,
                 errors: tuple[float, float] | None = None) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.check, self.rule = reason, detail, check, rule
        self.errors = errors


KIND_REASON = {
    "import": Reason.COMPILE_ERROR, "missing_model_new": Reason.MISSING_MODEL_NEW, "init": Reason.INIT_ERROR,
    "parameters": Reason.PARAMETER_MISMATCH, "exception": Reason.RUNTIME_ERROR, "out_of_memory": Reason.OUT_OF_MEMORY,
    "cuda_error": Reason.CUDA_ERROR, "protocol": Reason.WORKER_ERROR, "unconfined": Reason.UNCONFINED,
}
"""The worker's failure kinds (header["kind"]) and the verdicts they become; anything else is a runtime error."""


def judge_ok(header: dict[str, Any], check: str, label: str | None = None) -> None:
    """A reply that says the candidate's code failed (import, construction, forward, timing) -> Reject."""
    if not header.get("ok"):
        kind = header.get("kind", "exception")
        detail = f"{label}: {header.get('detail', '')}" if label is not None else str(header.get("detail", ""))
        raise Reject(KIND_REASON.get(kind, Reason.RUNTIME_ERROR), detail, check)


def judge_record(header: dict[str, Any], label: str) -> None:
    """What the worker's guards recorded during a request: tampering, forbidden calls, threads, compute ops."""
    tampered = header.get("tampered") or []
    if tampered:
        raise Reject(Reason.TAMPERING, f"{label}: the candidate replaced harness functions: "
                     f"{', '.join(map(str, tampered[:6]))}", "tampering")
    violations = header.get("violations") or []
    if violations:
        raise Reject(Reason.FORBIDDEN_CALL, f"{label}: the candidate attempted: {'; '.join(map(str, violations[:5]))}",
                     "forbidden_calls")
    if int(header.get("threads", 0) or 0) > 0:
        raise Reject(Reason.FORBIDDEN_CALL, f"{label}: the candidate left {header['threads']} extra thread(s) "
                     "running", "threads")
    ops = header.get("ops") or {}
    if ops:
        shown = ", ".join(f"aten.{k}×{v}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1])[:8])
        raise Reject(Reason.FORBIDDEN_OP, f"{label}: ModelNew.forward ran PyTorch compute ops ({shown}); "
                     "only allocation, views and layout copies are allowed outside Triton kernels", "ops")


def judge_processes(stray: list[Any], label: str) -> None:
    """`stray`: the worker's child processes still running after a request (`Worker.stray_processes()`)."""
    if stray:
        raise Reject(Reason.FORBIDDEN_CALL, f"{label}: the candidate started {len(stray)} process(es) that are "
                     "still running; candidates may not create processes", "processes")


def judge_launches(header: dict[str, Any], label: str) -> None:
    """The forward must have launched at least one of the candidate's own Triton kernels."""
    if not header.get("launches"):
        raise Reject(Reason.NO_CUSTOM_KERNEL,
                     f"{label}: ModelNew.forward launched no Triton kernel; the work must be done by the "
                     "candidate's own @triton.jit kernels", "triton_launch")


def strides_ok(shape: list[int], stride: list[int], ref: dict[str, Any]) -> bool:
    """The output's strides are the reference's or contiguous (a dimension of size 1 has any stride)."""
    def norm(st: list[int]) -> list[int]:
        return [s if n > 1 else 0 for n, s in zip(shape, st)]

    contiguous = []
    acc = 1
    for n in reversed(shape):
        contiguous.append(acc)
        acc *= max(n, 1)
    contiguous.reverse()
    return norm(stride) == norm(ref["stride"]) or norm(stride) == norm(contiguous)


def _same_device(reported: str, device: torch.device) -> bool:
    d = torch.device(reported)
    return d == device or (device.type == "cuda" and d.type == "cuda" and (d.index or 0) == (device.index or 0))


def judge_outputs(header: dict[str, Any], outs: list[torch.Tensor], out_meta: list[dict[str, Any]],
                  device: torch.device, label: str) -> None:
    """The outputs as the worker described them (header["outputs"]) against the reference's `out_meta`
    (dtype, shape, stride per output): count, plain tensors, device, dtype, shape, strides, no aliasing; then
    that the tensors actually shared (`outs`) match the description."""
    metas = header.get("outputs") or []
    if len(metas) != len(out_meta):
        raise Reject(Reason.BAD_OUTPUT, f"{label}: forward returned {len(metas)} output(s); the reference returns "
                     f"{len(out_meta)}", "outputs")
    for i, (m, ref) in enumerate(zip(metas, out_meta)):
        where = f"{label}, output {i}"
        if m.get("type") != "torch.Tensor":
            raise Reject(Reason.BAD_OUTPUT, f"{where}: forward returned a {m.get('type')}, not a plain torch.Tensor "
                         "(tensor subclasses and lazy values are not accepted)", "outputs")
        if not _same_device(m["device"], device):
            raise Reject(Reason.WRONG_DEVICE, f"{where}: the output is on {m['device']}, the inputs on {device}",
                         "outputs")
        if m["dtype"] != dtype_name(ref["dtype"]):
            raise Reject(Reason.WRONG_DTYPE, f"{where}: dtype {m['dtype']}, expected {dtype_name(ref['dtype'])}",
                         "outputs")
        if list(m["shape"]) != list(ref["shape"]):
            raise Reject(Reason.WRONG_SHAPE, f"{where}: shape {tuple(m['shape'])}, expected {tuple(ref['shape'])}",
                         "outputs")
        if not strides_ok(m["shape"], m["stride"], ref):
            raise Reject(Reason.WRONG_STRIDES, f"{where}: strides {tuple(m['stride'])}, expected "
                         f"{tuple(ref['stride'])} (or contiguous)", "outputs")
        if m.get("aliases"):
            raise Reject(Reason.ALIASED_OUTPUT, f"{where}: the output shares memory with "
                         f"{', '.join(m['aliases'])}; every call must return freshly written tensors", "aliasing")
    if len(outs) != len(metas):
        raise Reject(Reason.WORKER_ERROR, f"{label}: the worker sent {len(outs)} output tensors for "
                     f"{len(metas)} outputs", "outputs")
    for i, (o, m) in enumerate(zip(outs, metas)):
        if list(o.shape) != list(m["shape"]) or dtype_name(o.dtype) != m["dtype"]:
            raise Reject(Reason.WORKER_ERROR, f"{label}: output {i} as shared does not match what the worker "
                         "described", "outputs")


def judge_inputs(after: list[torch.Tensor], sent: list[torch.Tensor], label: str) -> None:
    """The inputs as the candidate left them (`after`) must equal, bit for bit, what was sent."""
    if len(after) != len(sent):
        raise Reject(Reason.WORKER_ERROR, f"{label}: the worker did not report its inputs", "inputs")
    for i, (a, s) in enumerate(zip(after, sent)):
        if tuple(a.shape) != tuple(s.shape) or not bitwise_equal(a, s.detach()):
            raise Reject(Reason.INPUT_MUTATED, f"{label}: input {i} was modified by the forward pass; "
                         "candidates must not write to their inputs", "inputs")


def compare_all(outs: list[torch.Tensor], gold: list[torch.Tensor], tol: float, label: str) -> tuple[float, float]:
    """Compare every output with its gold; the worst (max, norm) relative errors, or Reject (whose `errors`
    are the failing comparison's). A function of its own, so no loop variable keeps a gigabyte-sized gold
    tensor alive into the next trial."""
    worst = norm = 0.0
    for i, (o, g) in enumerate(zip(outs, gold)):
        if tuple(o.shape) != tuple(g.shape):
            raise Reject(Reason.WRONG_SHAPE, f"{label}, output {i}: shape {tuple(o.shape)}, expected "
                         f"{tuple(g.shape)}", "correctness")
        c = compare(o, g, tol, f"{label}, output {i}")
        if not c.ok:
            raise Reject(c.reason or Reason.WRONG_OUTPUT, c.detail, "correctness", errors=(c.max_rel, c.norm_rel))
        worst, norm = max(worst, c.max_rel), max(norm, c.norm_rel)
    return worst, norm


def measure_coverage(kernel_time: dict[str, float] | None, launch_s: float, forward_s: float,
                     device_type: str) -> tuple[float, str] | None:
    """The share of the forward's time spent in the candidate's own Triton kernels and how it was measured:
    from the profiled device time when there is one, from wall time in Triton launches on the CPU
    (interpreter), else None (no basis)."""
    if kernel_time is not None:
        own, other = kernel_time["own_us"], kernel_time["other_us"]
        cov = own / (own + other) if own + other > 0 else 0.0
        return cov, f"device time in the candidate's kernels {own:.0f} µs, in other kernels {other:.0f} µs"
    if device_type == "cpu":
        cov = launch_s / forward_s if forward_s > 0 else 0.0
        return cov, f"wall time inside Triton launches {launch_s:.3f} s of {forward_s:.3f} s in forward"
    return None


def judge_coverage(cov: float, basis: str, min_coverage: float) -> Check:
    """Reject decoy kernels: less than `min_coverage` of the time in the candidate's own kernels."""
    if cov < min_coverage:
        raise Reject(Reason.DECOY_KERNEL, f"only {cov:.0%} of the forward's time is in the candidate's own Triton "
                     f"kernels ({basis}); the kernels must carry the work", "coverage")
    return Check(name="coverage", outcome="pass", detail=f"{cov:.0%}: {basis}")


def judge_recheck(changed: Any) -> None:
    """An earlier output changed after forward returned (work still running, or rewritten later)."""
    if changed:
        raise Reject(Reason.OUTPUT_CHANGED, f"an output changed after forward returned ({changed}); "
                     "results must be complete when forward returns", "recheck")


def timing_summary(cand: Samples, eager_a: Samples, eager_b: Samples, compiled: dict[str, Any] | None,
                   compile_why: str | None, before: dict[str, Any], after: dict[str, Any],
                   roof: dict[str, float] | None, floor_unavailable: str | None,
                   compile_mode: str | None, checked: list[int] | None = None) -> tuple[dict[str, Any], Check]:
    """The candidate's timing against the eager runs before and after it (their spread is the A/A noise
    band) and the compiled baseline: speedups judged against the band, the roofline position (`roof`, or
    why it is unavailable), suspect flags. `compile_mode` is the policy's, reported when no compiled
    baseline ran. Returns the fields of a `Timing` and the `timing` check (failed when anything is suspect)."""
    cs = cand.summary()
    med = cs["median_ms"]
    eager_ms = (eager_a.summary()["median_ms"] + eager_b.summary()["median_ms"]) / 2
    band = noise_band(eager_a, eager_b)
    timing: dict[str, Any] = {
        "median_ms": med, "p25_ms": cs["p25_ms"], "p75_ms": cs["p75_ms"], "min_ms": cs["min_ms"],
        "max_ms": cs["max_ms"], "reps": int(cs["reps"]), "wall_median_ms": cs["wall_median_ms"],
        "noise_band": band, "eager_ms": eager_ms, "speedup_vs_eager": eager_ms / med,
        "vs_eager": judge_speedup(eager_ms / med, band),
        "compile_mode": (compiled or {}).get("mode", compile_mode),
        "compile_modes": (compiled or {}).get("modes"),
        "compile_ms": compiled["median_ms"] if compiled else None,
        "speedup_vs_compile": compiled["median_ms"] / med if compiled else None,
        "vs_compile": judge_speedup(compiled["median_ms"] / med, band) if compiled else None,
        "compile_unavailable": compile_why,
        "clocks": {"before": before, "after": after},
    }
    floor = None
    if roof is not None:
        floor = roof["floor_ms"]
        timing.update({"floor_ms": roof["floor_ms"], "bound": roof["bound"], "fraction_of_floor": roof["floor_ms"] / med,
                       "flops": roof["flops"], "bytes": roof["bytes"]})
    else:
        timing["floor_unavailable"] = floor_unavailable
    best = min(eager_ms, compiled["median_ms"]) if compiled else eager_ms
    timing["best_baseline_ms"] = best
    timing["best_baseline"] = "torch.compile" if compiled and compiled["median_ms"] < eager_ms else "eager"
    flags, flush_spin = suspect_flags(cand, eager_a, floor_ms=floor, clocks={"before": before, "after": after},
                                      best_baseline_ms=best)
    split = split_flag(cand, checked, band) if checked is not None else None
    if split:
        flags.append(split)
    if flush_spin:
        timing["flush_spin_ms"] = flush_spin
    timing["suspect"] = flags
    check = Check(name="timing", outcome="fail" if flags else "pass",
                  detail=f"{med:.4g} ms (p25 {cs['p25_ms']:.4g}, p75 {cs['p75_ms']:.4g}); eager {eager_ms:.4g} ms; "
                         f"noise band {band:.1%}" + (f"; suspect: {'; '.join(flags)}" if flags else ""))
    return timing, check
