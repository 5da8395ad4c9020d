"""The tolerance rule, done in the trusted process on values the candidate can no longer touch.

Per element: |out - ref| <= tol * (|ref| + rms(ref)), with `ref` the high-precision reference. Never a
bare absolute tolerance (a near-zero output would pass), never `equal_nan` wholesale: a non-finite value
where the reference is finite fails, and where the reference is non-finite the candidate must match it.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass

import torch

from .result import Reason

# Bit patterns of the poison the worker lays in free device memory before every call (`poison.py`) and writes
# into a fresh allocation the candidate makes that did not come from that memory: one 16-bit word, 0xFFF5,
# repeated, which is a quiet NaN as float16, bfloat16, float32 (0xFFF5FFF5) and float64, so an unwritten element
# both fails (NaN never passes) and is recognisable as "never written". Signed, as the integer views hold them.
POISON_BITS: dict[torch.dtype, int] = {
    torch.float64: 0xFFF5FFF5FFF5FFF5 - (1 << 64),
    torch.float32: 0xFFF5FFF5 - (1 << 32),
    torch.float16: 0xFFF5 - (1 << 16),
    torch.bfloat16: 0xFFF5 - (1 << 16),
    torch.int64: 0xFFF5FFF5FFF5FFF5 - (1 << 64),
    torch.int32: 0xFFF5FFF5 - (1 << 32),
    torch.int16: 0xFFF5 - (1 << 16),
    torch.int8: 0xF5 - (1 << 8),
    torch.uint8: 0xF5,
}
INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def poison_mask(t: torch.Tensor) -> torch.Tensor | None:
    """Elements of `t` that still hold the poison pattern, or None if the dtype has none."""
    bits = POISON_BITS.get(t.dtype)
    if bits is None:
        return None
    view = t.contiguous().view(INT_VIEW[t.dtype]) if t.dtype in INT_VIEW else t
    return view == bits


@dataclass
class Comparison:
    ok: bool
    reason: Reason | None = None
    detail: str = ""
    max_rel: float = 0.0
    norm_rel: float = 0.0
    non_finite: bool = False
    """the failure is about NaN/Inf (non-finite where the reference is finite, or not the reference's own NaN/Inf),
    not about the size of an error: said apart so that PyTorch's own result failing this way is never read as a
    (finite, or dropped) error"""


def _index(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat_index % s if s else 0)
        flat_index //= s if s else 1
    return tuple(reversed(idx))


CHUNK = 1 << 24
"""Elements per slice of a comparison: no temporary is ever larger than a few of these in float64,
whatever the size of the output (a 6 GB output is compared in 128 MiB pieces)."""


def _chunks(n: int) -> range:
    return range(0, n, CHUNK)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (NaN payloads included), compared slice by slice."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.numel() == 0:
        return True
    fa, fb = _flat(a), _flat(b.to(a.device))
    if a.is_floating_point():
        ints = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
        fa, fb = fa.view(ints), fb.view(ints)
    differ = torch.zeros((), dtype=torch.int64, device=fa.device)
    for i in _chunks(fa.numel()):
        differ += (fa[i:i + CHUNK] != fb[i:i + CHUNK]).sum()
    return int(differ) == 0


def fingerprint(t: torch.Tensor) -> tuple[int, int]:
    """Two wrapping integer sums over the raw bits of `t`: any later change of its values shows."""
    if t.numel() == 0:
        return (0, 0)
    f = _flat(t)
    if t.dtype == torch.bool:
        f = f.view(torch.uint8)
    elif t.is_floating_point() or t.is_complex():
        f = f.view({8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8, 16: torch.int64}[t.element_size()])
    s1 = torch.zeros((), dtype=torch.int64, device=f.device)
    s2 = torch.zeros((), dtype=torch.int64, device=f.device)
    for i in _chunks(f.numel()):
        w = f[i:i + CHUNK].to(torch.int64)
        s1 += w.sum()
        s2 += (w * w).sum()
    return (int(s1) & ((1 << 64) - 1), int(s2) & ((1 << 64) - 1))


def _int_compare(out: torch.Tensor, ref: torch.Tensor, label: str, shape: tuple[int, ...]) -> Comparison:
    o, r = _flat(out), _flat(ref)
    n = max(r.numel(), 1)
    count = never = 0
    first = -1
    for i in _chunks(r.numel()):
        oc, rc = o[i:i + CHUNK], r[i:i + CHUNK]
        wrong = oc != rc
        c = int(wrong.sum())
        if not c:
            continue
        count += c
        if first < 0:
            first = i + int(wrong.nonzero()[0])
        pm = poison_mask(oc)
        if pm is not None:
            never += int((pm & wrong).sum())
    if not count:
        return Comparison(True)
    if never:
        return Comparison(False, Reason.STALE_OUTPUT, f"{label}: {never} of {n} elements were never written "
                          "(they still hold the poison value put into fresh allocations)", 1.0, 1.0)
    return Comparison(False, Reason.WRONG_OUTPUT,
                      f"{label}: {count} of {n} integer elements differ; first at index {_index(first, shape)}: "
                      f"got {o[first].item()}, expected {r[first].item()}", 1.0, 1.0)


_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_FUSED_BLOCK = 4096
"""Elements per program of the fused kernels: 4096 float64 values over 8 warps is 16 per thread, so a
1.6e9-element output is 390k programs, each writing one entry of each partial buffer."""
_FUSED_WARPS = 8
_KERNELS: dict[str, object] = {}
_KERNELS_LOCK = threading.Lock()
_FUSED_BROKEN: list[str] = []  # set once if the automatic choice hit an error: the torch path from then on


def _kernels() -> dict[str, object]:
    """The two fused Triton kernels, compiled on first use (importing this module never imports triton).

    They are pure functions of their arguments (no run state), so one module-level cache is enough.
    `triton` and `tl` are bound as module globals, not closure variables: every Triton version resolves a
    kernel's names through the function's `__globals__`, while closure capture is recent.

    Finiteness is `tl.abs(x) < float("inf")` on the float64 value: an ordered comparison (`cmpf olt`), false
    for NaN and for +-inf, true otherwise. Triton emits float ops without fast-math flags (only FMA
    contraction), so neither the interpreter nor compiled code may fold it away; the conversion of an fp16,
    bf16 or fp32 NaN or infinity to float64 keeps it non-finite."""
    if _KERNELS:
        return _KERNELS
    with _KERNELS_LOCK:
        if _KERNELS:
            return _KERNELS
        global triton, tl
        import triton
        import triton.language as tl

        @triton.jit
        def _compare_pass1(o_ptr, r_ptr, n, sumsq_ptr, finite_ptr, odd_ptr, BLOCK: tl.constexpr):
            # Per program: sum of squares of the finite reference values, how many are finite, and how many
            # values of ref or out are not (an element non-finite in both counts twice, as in the torch path).
            pid = tl.program_id(0)
            offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            valid = offs < n
            r = tl.load(r_ptr + offs, mask=valid, other=0.0).to(tl.float64)
            o = tl.load(o_ptr + offs, mask=valid, other=0.0).to(tl.float64)
            rfin = tl.abs(r) < float("inf")
            ofin = tl.abs(o) < float("inf")
            rz = tl.where(rfin, r, 0.0)
            tl.store(sumsq_ptr + pid, tl.sum(rz * rz, axis=0))
            tl.store(finite_ptr + pid, tl.sum(tl.where(valid & rfin, 1, 0), axis=0).to(tl.int64))
            # Masked lanes load 0.0, which is finite: they add nothing to the non-finite count.
            odd = tl.where(rfin, 0, 1) + tl.where(ofin, 0, 1)
            tl.store(odd_ptr + pid, tl.sum(odd, axis=0).to(tl.int64))

        @triton.jit
        def _compare_pass2(o_ptr, r_ptr, n, par_ptr, max_ptr, dsq_ptr, BLOCK: tl.constexpr):
            # Per program: the largest |o - r| / max(|r| + rms, tiny) and the sum of (o - r)^2 over the
            # reference's finite values. par = [rms, tiny, nan] in float64 (a Python float argument would
            # be passed as fp32: tiny would flush to zero and rms lose digits).
            pid = tl.program_id(0)
            offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            valid = offs < n
            rms = tl.load(par_ptr)
            tiny = tl.load(par_ptr + 1)
            nan = tl.load(par_ptr + 2)
            r = tl.load(r_ptr + offs, mask=valid, other=0.0).to(tl.float64)
            o = tl.load(o_ptr + offs, mask=valid, other=0.0).to(tl.float64)
            rfin = tl.abs(r) < float("inf")
            rz = tl.where(rfin, r, 0.0)
            diff = tl.abs(tl.where(rfin, o - rz, 0.0))
            tl.store(dsq_ptr + pid, tl.sum(diff * diff, axis=0))
            err = diff / tl.maximum(tl.abs(rz) + rms, tiny)
            # torch's max propagates NaN (inf / inf once float64 overflows); Triton's max reduction need
            # not, so NaNs are counted apart and the program's maximum becomes NaN, as torch would give.
            isnan = err != err
            worst = tl.max(tl.where(isnan, 0.0, err), axis=0)
            nans = tl.sum(tl.where(isnan, 1, 0), axis=0)
            tl.store(max_ptr + pid, tl.where(nans > 0, nan, worst))

        _KERNELS["pass2"] = _compare_pass2
        _KERNELS["pass1"] = _compare_pass1
    return _KERNELS


def _fused_ok(o: torch.Tensor, r: torch.Tensor, need_cuda: bool = True) -> bool:
    """Can the flat views `o`, `r` go through the fused kernels: (CUDA unless `need_cuda` is False) same
    device, same length, not empty, contiguous, and float dtypes Triton loads (fp16, bf16, fp32, fp64)?"""
    if need_cuda and r.device.type != "cuda":
        return False
    return (o.device == r.device and o.dim() == 1 and r.dim() == 1 and o.numel() == r.numel() > 0
            and o.is_contiguous() and r.is_contiguous()
            and o.dtype in _FUSED_DTYPES and r.dtype in _FUSED_DTYPES)


def _mode(o: torch.Tensor, r: torch.Tensor, fused: bool | None) -> str:
    """"torch", "fused" (forced: errors propagate) or "auto" (fused, falling back to torch on an error)."""
    if fused is False:
        return "torch"
    if fused:
        if not _fused_ok(o, r, need_cuda=False):
            raise ValueError(f"compare(fused=True): tensors the fused kernels cannot take ({o.dtype} "
                             f"{tuple(o.shape)} contiguous={o.is_contiguous()} on {o.device}, {r.dtype} "
                             f"{tuple(r.shape)} contiguous={r.is_contiguous()} on {r.device})")
        return "fused"
    if _FUSED_BROKEN or not _fused_ok(o, r):
        return "torch"
    try:
        _kernels()
    except ImportError:
        _FUSED_BROKEN.append("triton is not importable")
        return "torch"
    return "auto"


def _launch(name: str, o: torch.Tensor, r: torch.Tensor, *args: torch.Tensor) -> None:
    kernel = _kernels()[name]
    grid = (_programs(r),)
    if r.device.type == "cuda":
        with torch.cuda.device(r.device):  # Triton launches on the current device
            kernel[grid](o, r, r.numel(), *args, BLOCK=_FUSED_BLOCK, num_warps=_FUSED_WARPS)
    else:  # the interpreter (TRITON_INTERPRET=1), for tests on the CPU
        kernel[grid](o, r, r.numel(), *args, BLOCK=_FUSED_BLOCK, num_warps=_FUSED_WARPS)


def _programs(r: torch.Tensor) -> int:
    return -(-r.numel() // _FUSED_BLOCK)


def _fused_pass1(o: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g, dev = _programs(r), r.device
    sumsq = torch.empty(g, dtype=torch.float64, device=dev)
    finite = torch.empty(g, dtype=torch.int64, device=dev)
    odd = torch.empty(g, dtype=torch.int64, device=dev)
    _launch("pass1", o, r, sumsq, finite, odd)
    return sumsq.sum(), finite.sum(), odd.sum()


def _fused_pass2(o: torch.Tensor, r: torch.Tensor, rms: float, tiny: float) -> tuple[torch.Tensor, torch.Tensor]:
    g, dev = _programs(r), r.device
    par = torch.tensor([rms, tiny, float("nan")], dtype=torch.float64, device=dev)
    worst = torch.empty(g, dtype=torch.float64, device=dev)
    dsq = torch.empty(g, dtype=torch.float64, device=dev)
    _launch("pass2", o, r, par, worst, dsq)
    return worst.max(), dsq.sum()


def _torch_pass1(o: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sum of squares and count of the reference's finite values; count of non-finite values in ref or out."""
    f64, dev = torch.float64, r.device
    sumsq = torch.zeros((), dtype=f64, device=dev)
    finite = torch.zeros((), dtype=torch.int64, device=dev)
    odd = torch.zeros((), dtype=torch.int64, device=dev)
    for i in _chunks(r.numel()):
        rc, oc = r[i:i + CHUNK].to(f64), o[i:i + CHUNK]
        rfin = torch.isfinite(rc)
        finite += rfin.sum()
        sumsq += torch.where(rfin, rc, 0.0).square().sum()
        odd += (~rfin).sum() + (~torch.isfinite(oc)).sum()
    return sumsq, finite, odd


def _torch_pass2(o: torch.Tensor, r: torch.Tensor, rms: float, tiny: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Largest error relative to |ref| + rms, and the sum of squared differences, over the finite references."""
    f64, dev = torch.float64, r.device
    max_rel = torch.zeros((), dtype=f64, device=dev)
    diff_sq = torch.zeros((), dtype=f64, device=dev)
    for i in _chunks(r.numel()):
        rc, oc = r[i:i + CHUNK].to(f64), o[i:i + CHUNK].to(f64)
        rfin = torch.isfinite(rc)
        rz = torch.where(rfin, rc, 0.0)
        diff = torch.where(rfin, oc - rz, 0.0).abs_()
        diff_sq += diff.square().sum()
        err = diff.div_(rz.abs_().add_(rms).clamp_min_(tiny))
        if err.numel():
            max_rel = torch.maximum(max_rel, err.max())
    return max_rel, diff_sq


def _pass(name: str, mode: str, o: torch.Tensor, r: torch.Tensor, *args: float) -> tuple:
    if mode == "fused":
        return (_fused_pass1 if name == "pass1" else _fused_pass2)(o, r, *args)
    if mode == "auto" and not _FUSED_BROKEN:
        try:
            return (_fused_pass1 if name == "pass1" else _fused_pass2)(o, r, *args)
        except Exception as e:  # noqa: BLE001 - a kernel that fails to build must not fail every evaluation
            _FUSED_BROKEN.append(f"{type(e).__name__}: {e}")
            warnings.warn(f"compare: the fused Triton kernels failed ({type(e).__name__}: {e}); using the torch "
                          "path from now on", RuntimeWarning, stacklevel=3)
    return (_torch_pass1 if name == "pass1" else _torch_pass2)(o, r, *args)


def compare(out: torch.Tensor, ref: torch.Tensor, tol: float, label: str = "output",
            fused: bool | None = None) -> Comparison:
    """Compare a candidate's values (any device, the problem's dtype) with the reference values.

    Done in two passes (the reference's rms first, then the errors), so the memory it needs does not grow
    with the output. On CUDA each pass is one fused Triton kernel writing one partial result per block of
    `_FUSED_BLOCK` elements, reduced here with torch; elsewhere (and with `fused=False`) each pass works in
    slices of `CHUNK` elements with torch ops. Either way the sums stay on the device until the end of a
    pass (one synchronisation a pass, not one a slice); only a failing comparison pays for a third pass
    (torch, in slices) that counts and locates the offending elements.

    `fused`: None picks the kernels for CUDA float tensors (the torch path if Triton is missing or fails);
    True forces them (raises if they cannot take the tensors; on the CPU only under TRITON_INTERPRET=1);
    False forces the torch path."""
    out = out.to(ref.device)
    shape = tuple(ref.shape)
    n = max(ref.numel(), 1)
    if not ref.is_floating_point() and not ref.is_complex():
        return _int_compare(out, ref, label, shape)
    o, r = _flat(out), _flat(ref)
    total = r.numel()
    f64 = torch.float64
    mode = _mode(o, r, fused)
    # Pass 1: the rms of the reference's finite values, and whether anything is non-finite at all.
    sumsq, finite, odd = _pass("pass1", mode, o, r)
    finite_n, sumsq_v, odd_n = int(finite), float(sumsq), int(odd)
    if odd_n:
        verdict = _non_finite(o, r, label, shape, n)
        if verdict is not None:
            return verdict
    if finite_n == 0:
        return Comparison(True)
    rms = (sumsq_v / finite_n) ** 0.5
    tiny = torch.finfo(f64).tiny
    # Pass 2: per-element errors relative to |ref| + rms, over the reference's finite values.
    max_rel, diff_sq = _pass("pass2", mode, o, r, rms, tiny)
    worst_v, diff_v = float(max_rel), float(diff_sq)
    norm_rel = (diff_v ** 0.5) / (sumsq_v ** 0.5) if sumsq_v > 0 else (0.0 if diff_v == 0 else float("inf"))
    if worst_v <= tol:
        return Comparison(True, max_rel=worst_v, norm_rel=norm_rel)
    # Pass 3, failures only: how many exceed the tolerance, and where the worst are.
    over = 0
    worst: list[tuple[float, int]] = []
    for i in _chunks(total):
        rc, oc = r[i:i + CHUNK].to(f64), o[i:i + CHUNK].to(f64)
        rfin = torch.isfinite(rc)
        rz = torch.where(rfin, rc, 0.0)
        err = torch.where(rfin, oc - rz, 0.0).abs_().div_(rz.abs().add_(rms).clamp_min_(tiny))
        bad = err > tol
        nb = int(bad.sum())
        if nb:
            over += nb
            top = torch.topk(err, k=min(3, err.numel()))
            worst.extend((float(v), i + int(j)) for v, j in zip(top.values.tolist(), top.indices.tolist()))
    worst = sorted(worst, reverse=True)[:3]
    shown = "; ".join(f"index {_index(j, shape)}: got {o[j].item():.6g}, expected {r[j].item():.6g}" for _, j in worst)
    return Comparison(
        False, Reason.WRONG_OUTPUT,
        f"{label}: {over} of {n} elements exceed the tolerance (worst error {worst_v:.3g} vs tolerance {tol:.3g}, "
        f"relative to |ref| + rms(ref) = {rms:.3g}; norm-wise error {norm_rel:.3g}); worst: {shown}",
        worst_v, norm_rel,
    )


def _non_finite(o: torch.Tensor, r: torch.Tensor, label: str, shape: tuple[int, ...], n: int) -> Comparison | None:
    """The verdict when non-finite values are involved: NaN/Inf (or never-written poison) where the reference
    is finite fails; where the reference is non-finite the candidate must match it. None: nothing wrong."""
    f64 = torch.float64
    bad = never = 0
    first_bad = first_mismatch = -1
    for i in _chunks(r.numel()):
        rc, oc = r[i:i + CHUNK].to(f64), o[i:i + CHUNK]
        rfin = torch.isfinite(rc)
        b = rfin & ~torch.isfinite(oc)
        nb = int(b.sum())
        if nb:
            bad += nb
            if first_bad < 0:
                first_bad = i + int(b.nonzero()[0])
            pm = poison_mask(oc)
            if pm is not None:
                never += int((pm & b).sum())
        od = oc.to(f64)
        mism = ~rfin & ~((torch.isnan(rc) & torch.isnan(od)) | (rc == od))
        if first_mismatch < 0 and bool(mism.any()):
            first_mismatch = i + int(mism.nonzero()[0])
    if bad:
        if never:
            return Comparison(False, Reason.STALE_OUTPUT, f"{label}: {never} of {n} elements were never written "
                              "(they still hold the poison NaN put into fresh allocations)", float("inf"), float("inf"),
                              non_finite=True)
        return Comparison(False, Reason.NAN_OUTPUT,
                          f"{label}: {bad} of {n} elements are NaN or Inf where the reference is finite; "
                          f"first at index {_index(first_bad, shape)}: got {o[first_bad].item()}, "
                          f"expected {r[first_bad].item()}", float("inf"), float("inf"), non_finite=True)
    if first_mismatch >= 0:
        return Comparison(False, Reason.WRONG_OUTPUT,
                          f"{label}: where the reference is {r[first_mismatch].item()} (index "
                          f"{_index(first_mismatch, shape)}) the candidate gave {o[first_mismatch].item()}",
                          float("inf"), float("inf"), non_finite=True)
    return None


def _trivial_passes(ref: torch.Tensor, tol: float, value: float | None = None, other: torch.Tensor | None = None) -> bool:
    """Would a trivial output (the constant `value`, or the tensor `other`) pass against `ref`?
    Computed slice by slice, without materialising the trivial output."""
    r = _flat(ref)
    o = _flat(other) if other is not None else None
    f64 = torch.float64
    sumsq, finite = 0.0, 0
    for i in _chunks(r.numel()):
        rc = r[i:i + CHUNK].to(f64)
        fin = torch.isfinite(rc)
        if not bool(fin.all()):
            return False  # a trivial output never matches a non-finite reference pattern by accident
        finite += rc.numel()
        sumsq += float(rc.square().sum())
    if finite == 0:
        return False
    rms = (sumsq / finite) ** 0.5
    for i in _chunks(r.numel()):
        rc = r[i:i + CHUNK].to(f64)
        cand = o[i:i + CHUNK].to(device=rc.device, dtype=f64) if o is not None else torch.full_like(rc, value or 0.0)
        if not bool(torch.isfinite(cand).all()):
            return False
        err = (cand - rc).abs_().div_(rc.abs().add_(rms).clamp_min_(torch.finfo(f64).tiny))
        if float(err.max()) > tol:
            return False
    return True


def _mean(ref: torch.Tensor) -> float:
    r = _flat(ref)
    total, count = 0.0, 0
    for i in _chunks(r.numel()):
        rc = r[i:i + CHUNK].to(torch.float64)
        fin = torch.isfinite(rc)
        total += float(torch.where(fin, rc, 0.0).sum())
        count += int(fin.sum())
    return total / count if count else 0.0


def degenerate_outputs(refs: list[torch.Tensor], inputs: list, tol: float) -> list[str]:
    """Which trivial outputs would pass for this reference output: zeros, a constant, or an input passed through."""
    flags = []
    # A zero-dimensional or one-element output has no "constant" that is not the answer itself.
    floats = [r for r in refs if r.is_floating_point() and r.numel() > 1]
    if not floats:
        return flags
    if all(_trivial_passes(r, tol, 0.0) for r in floats):
        flags.append("degenerate: an all-zero output would pass")
    elif all(_trivial_passes(r, tol, _mean(r)) for r in floats):
        flags.append("degenerate: a constant output would pass")
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and len(floats) == 1 and x.shape == floats[0].shape:
            if _trivial_passes(floats[0], tol, other=x):
                flags.append(f"degenerate: passing input {i} through unchanged would pass")
    return flags
