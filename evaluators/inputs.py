"""Input families and parameter re-randomisation, all drawn from a secret seed in the trusted process.

A candidate that passes only on the problem's own input distribution (identity passing ReLU on positive
inputs, code that assumes a structure) is caught by the other families: sign-flipped, rescaled and
heavy-tailed versions of the problem's inputs, and the problem's `get_test_inputs()` when defined.
Only floating-point tensors are transformed; integer inputs (indices, labels) keep their meaning.

How extreme a heavy-tailed draw is where it matters is not left to chance: the first heavy-tailed draw of
every battery (`pivots=True`) puts a value of the draw's own extreme magnitude at each tensor's pivot
positions, the first element of every slice along its first dimension (a row's, a sample's, and so the first
group's start). A reduction that shifts its sums by such an element (a one-pass variance taken around a group's
first value) then loses its precision on every battery instead of on one in four (KernelBench level1/35_GroupNorm_
on an H100, issue 23), while a sound one (two passes, Welford, Chan's merge) stays as exact as before.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
from torch import nn

FAMILIES = ("base", "sign_flip", "scaled", "heavy_tailed")
TEST_FAMILY = "test_inputs"


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed derived from the secret run seed and a path of labels."""
    h = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big") >> 1


def _generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def seeded_call(fn: Any, seed: int, device: torch.device | None = None) -> Any:
    """Call a problem hook (get_inputs, Model(...)) with the RNGs seeded, restoring them after.

    With `device`, factory calls that name no device (KernelBench's `torch.rand(batch, dim)`) allocate
    and draw on it: inputs of gigabytes are made where they are used, with no host round trip."""
    devices = [device.index or 0] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        if device is None or device.type == "cpu":
            return fn()
        with torch.device(device):
            return fn()


CHUNK = 1 << 24
T2_CLAMP = 1e4
"""heavy-tailed values are kept within this many spreads of the mean (a finite, if extreme, input)"""


def t2_extreme(n: int) -> float:
    """The magnitude a Student-t draw with two degrees of freedom exceeds about once in `n` values (its
    two-sided quantile: P(|T| > t) = 1 - t / sqrt(t^2 + 2) = 1 / n), within `T2_CLAMP`: the pivots' value."""
    if n < 2:
        return 1.0
    c = 1.0 - 1.0 / n
    return min(T2_CLAMP, c * math.sqrt(2.0 / (1.0 - c * c)))


def pivot_view(y: torch.Tensor) -> torch.Tensor:
    """The pivot positions of a contiguous tensor, as a writable view: the first element of every slice along
    its first dimension (every row of a matrix; every sample's first group of an N x C x H x W batch)."""
    return y.reshape(y.shape[0], -1)[:, 0] if y.dim() >= 2 and y.numel() else y.reshape(-1)[:1]


def transform(family: str, inputs: list[Any], seed: int, pivots: bool = False) -> list[Any]:
    """Apply an input family to a set of inputs drawn from the problem's own `get_inputs()`.

    Runs where the inputs are (the GPU for a GPU evaluation), in slices, in float32 arithmetic (float64
    for float64 inputs), so a transformed set of gigabytes costs no host memory and little device memory.
    `pivots` (heavy-tailed only): the pivot positions (`pivot_view`) get mean ± spread x `t2_extreme(numel)`,
    each sign drawn, so the draw's extremity sits where a shifted reduction takes its shift."""
    if family in ("base", TEST_FAMILY):
        return inputs
    out = []
    for k, x in enumerate(inputs):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            out.append(x)
            continue
        g = _generator(derive_seed(seed, k), x.device)
        work = torch.float64 if x.dtype == torch.float64 else torch.float32
        src = x.detach().contiguous()
        if family == "sign_flip":
            y = torch.neg(src)
        elif family == "scaled":
            # log-uniform in [1e-2, 1e2], away from 1 so the scale actually changes
            u = torch.rand(2, generator=g, dtype=torch.float64, device=x.device).tolist()
            e = u[0] * 1.5 + 0.5
            sign = 1 if u[1] < 0.5 else -1
            y = (src.to(work) * (10.0 ** (sign * e))).to(x.dtype)
        elif family == "heavy_tailed":
            # Student-t with 2 degrees of freedom, matched to the input's location and spread
            flat = src.reshape(-1)
            if flat.numel() > 1:
                std_t, mean_t = torch.std_mean(flat.to(work))
                std, mean = float(std_t), float(mean_t)
            else:
                std, mean = 1.0, float(flat.to(work).sum()) if flat.numel() else 0.0
            std = std if math.isfinite(std) and std > 0 else 1.0
            mean = mean if math.isfinite(mean) else 0.0
            y = torch.empty_like(src)
            yf = y.reshape(-1)
            for i in range(0, yf.numel(), CHUNK):
                n = min(CHUNK, yf.numel() - i)
                z = torch.randn(n, generator=g, dtype=work, device=x.device)
                a = torch.randn(n, generator=g, dtype=work, device=x.device)
                b = torch.randn(n, generator=g, dtype=work, device=x.device)
                t = z / ((a * a + b * b) / 2).clamp_min_(1e-12).sqrt_()
                yf[i:i + n] = (mean + std * t.clamp_(-T2_CLAMP, T2_CLAMP)).to(x.dtype)
            if pivots and yf.numel():
                at = pivot_view(y)
                signs = torch.randint(0, 2, (at.numel(),), generator=g, device=x.device).to(work) * 2 - 1
                at.copy_((mean + std * t2_extreme(yf.numel()) * signs).to(x.dtype))
        else:
            raise ValueError(f"unknown input family {family!r}")
        out.append(like(x, y))
    return out


def like(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` as a new tensor with x's dtype, device and strides (contiguous if x's strides overlap)."""
    try:
        res = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
        res.copy_(values)
        return res
    except RuntimeError:
        return values.to(dtype=x.dtype, device=x.device).contiguous()


def is_structure(name: str, t: torch.Tensor) -> bool:
    """Whether a floating buffer encodes the problem's structure rather than learned or running state.

    A buffer keeps its values when they are integers (or ±inf) and not all the same: a causal mask kept
    as `tril(ones)`, a `-inf`/0 attention mask, an index or position table. Noise on such a buffer changes
    the function the reference computes (`mask == 0` is false everywhere). Running statistics
    (`running_*`), constant buffers and buffers of fractional values are state: they get fresh values."""
    if "running_" in name or t.numel() < 2:
        return False
    flat = t.detach().reshape(-1)
    if bool(torch.isnan(flat).any()):
        return False
    fin = torch.isfinite(flat)
    if not bool(torch.where(fin, flat == torch.round(flat), True).all()):
        return False  # fractional values: state, not structure
    return not bool((flat == flat[0]).all())


@torch.no_grad()
def rerandomize_parameters(model: nn.Module, seed: int) -> list[str]:
    """Draw fresh values for every floating parameter and every floating buffer that is not structure
    (`is_structure`), on the device the model lives on, so a candidate that assumes the default
    initialisation (ones, zeros, a seeded init, zero running means) computes the wrong function.
    Returns the names of the buffers kept as they were."""
    kept = []
    for k, (name, t) in enumerate(list(model.named_parameters()) + list(model.named_buffers())):
        if not t.is_floating_point() or t.numel() == 0:
            continue
        if not isinstance(t, nn.Parameter) and is_structure(name, t):
            kept.append(name)
            continue
        g = _generator(derive_seed(seed, name, k), t.device)
        work = torch.float64 if t.dtype == torch.float64 else torch.float32
        src = t.detach().to(work)
        rms = float(src.pow(2).mean().sqrt()) if src.numel() else 0.0
        scale = max(rms, 0.05) * 0.5
        new = src + torch.randn(src.shape, generator=g, dtype=work, device=t.device) * scale
        if "running_var" in name or name.endswith("var"):
            new = new.abs() + 1e-3  # variances stay positive
        t.copy_(new.to(t.dtype))
    return kept
