"""The tolerance rule, done in the trusted process on values the candidate can no longer touch.

Per element: |out - ref| <= tol * (|ref| + rms(ref)), with `ref` the high-precision reference. Never a
bare absolute tolerance (a near-zero output would pass), never `equal_nan` wholesale: a non-finite value
where the reference is finite fails, and where the reference is non-finite the candidate must match it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .result import Reason

# Bit patterns the worker writes into every fresh allocation a candidate makes during a forward.
# Floating patterns are quiet NaNs with a payload no arithmetic produces, so an unwritten element both
# fails (NaN never passes) and is recognisable as "never written".
POISON_BITS: dict[torch.dtype, int] = {
    torch.float64: 0x7FFDA5A5A5A5A5A5,
    torch.float32: 0x7FE5A5A5,
    torch.float16: 0x7E5A,
    torch.bfloat16: 0x7FE5,
    torch.int64: -0x5A5A5A5A5A5A5A5B,
    torch.int32: -0x5A5A5A5B,
    torch.int16: -0x5A5B,
    torch.int8: -0x5B,
    torch.uint8: 0xA5,
}
_INT_VIEW = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def poison_mask(t: torch.Tensor) -> torch.Tensor | None:
    """Elements of `t` that still hold the poison pattern, or None if the dtype has none."""
    bits = POISON_BITS.get(t.dtype)
    if bits is None:
        return None
    view = t.contiguous().view(_INT_VIEW[t.dtype]) if t.dtype in _INT_VIEW else t
    return view == bits


@dataclass
class Comparison:
    ok: bool
    reason: Reason | None = None
    detail: str = ""
    max_rel: float = 0.0
    norm_rel: float = 0.0


def _index(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat_index % s if s else 0)
        flat_index //= s if s else 1
    return tuple(reversed(idx))


def compare(out: torch.Tensor, ref: torch.Tensor, tol: float, label: str = "output") -> Comparison:
    """Compare a candidate's values (any device, the problem's dtype) with the reference values."""
    out = out.to(ref.device)
    shape = tuple(ref.shape)
    n = max(ref.numel(), 1)
    if not ref.is_floating_point() and not ref.is_complex():
        wrong = out.reshape(-1) != ref.reshape(-1)
        count = int(wrong.sum())
        if not count:
            return Comparison(True)
        pm = poison_mask(out)
        if pm is not None and bool((pm.reshape(-1) & wrong).any()):
            k = int((pm.reshape(-1) & wrong).sum())
            return Comparison(False, Reason.STALE_OUTPUT, f"{label}: {k} of {n} elements were never written "
                              "(they still hold the poison value put into fresh allocations)", 1.0, 1.0)
        first = int(wrong.nonzero()[0])
        return Comparison(False, Reason.WRONG_OUTPUT,
                          f"{label}: {count} of {n} integer elements differ; first at index {_index(first, shape)}: "
                          f"got {out.reshape(-1)[first].item()}, expected {ref.reshape(-1)[first].item()}", 1.0, 1.0)

    o = out.reshape(-1).to(torch.float64)
    r = ref.reshape(-1).to(torch.float64)
    if bool(torch.isfinite(r).all()) and bool(torch.isfinite(o).all()):
        rf, of, ref_finite = r, o, None  # the common case: no masking, no copies
    else:
        ref_finite = torch.isfinite(r)
        bad = ref_finite & ~torch.isfinite(o)
        if bool(bad.any()):
            count = int(bad.sum())
            pm = poison_mask(out)
            if pm is not None and bool((pm.reshape(-1) & bad).any()):
                k = int((pm.reshape(-1) & bad).sum())
                return Comparison(False, Reason.STALE_OUTPUT, f"{label}: {k} of {n} elements were never written "
                                  "(they still hold the poison NaN put into fresh allocations)", float("inf"), float("inf"))
            first = int(bad.nonzero()[0])
            return Comparison(False, Reason.NAN_OUTPUT,
                              f"{label}: {count} of {n} elements are NaN or Inf where the reference is finite; "
                              f"first at index {_index(first, shape)}: got {o[first].item()}, expected {r[first].item()}",
                              float("inf"), float("inf"))
        nonfinite_mismatch = ~ref_finite & ~((torch.isnan(r) & torch.isnan(o)) | (r == o))
        if bool(nonfinite_mismatch.any()):
            first = int(nonfinite_mismatch.nonzero()[0])
            return Comparison(False, Reason.WRONG_OUTPUT,
                              f"{label}: where the reference is {r[first].item()} (index {_index(first, shape)}) "
                              f"the candidate gave {o[first].item()}", float("inf"), float("inf"))
        rf, of = r[ref_finite], o[ref_finite]
        if rf.numel() == 0:
            return Comparison(True)
    rms = float(rf.square().mean().sqrt())
    diff = (of - rf).abs_()
    diff_norm = float(diff.norm())
    err = diff.div_(rf.abs().add_(rms).clamp_min_(torch.finfo(torch.float64).tiny))
    max_rel = float(err.max())
    ref_norm = float(rf.norm())
    norm_rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else float("inf"))
    if max_rel <= tol:
        return Comparison(True, max_rel=max_rel, norm_rel=norm_rel)
    over = err > tol
    count = int(over.sum())
    worst = torch.topk(err, k=min(3, err.numel())).indices
    positions = ref_finite.nonzero().reshape(-1) if ref_finite is not None else None
    shown = "; ".join(
        f"index {_index(int(positions[i]) if positions is not None else i, shape)}: "
        f"got {of[i].item():.6g}, expected {rf[i].item():.6g}"
        for i in worst.tolist()
    )
    return Comparison(
        False, Reason.WRONG_OUTPUT,
        f"{label}: {count} of {n} elements exceed the tolerance (worst error {max_rel:.3g} vs tolerance {tol:.3g}, "
        f"relative to |ref| + rms(ref) = {rms:.3g}; norm-wise error {norm_rel:.3g}); worst: {shown}",
        max_rel, norm_rel,
    )


def degenerate_outputs(refs: list[torch.Tensor], inputs: list, tol: float) -> list[str]:
    """Which trivial outputs would pass for this reference output: zeros, a constant, or an input passed through."""
    flags = []
    # A zero-dimensional or one-element output has no "constant" that is not the answer itself.
    floats = [r for r in refs if r.is_floating_point() and r.numel() > 1]
    if not floats:
        return flags
    if all(compare(torch.zeros_like(r), r, tol).ok for r in floats):
        flags.append("degenerate: an all-zero output would pass")
    elif all(compare(torch.full_like(r, float(r[torch.isfinite(r)].mean()) if bool(torch.isfinite(r).any()) else 0.0),
                     r, tol).ok for r in floats):
        flags.append("degenerate: a constant output would pass")
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and len(floats) == 1 and x.shape == floats[0].shape:
            if compare(x.to(floats[0].device), floats[0], tol).ok:
                flags.append(f"degenerate: passing input {i} through unchanged would pass")
    return flags
