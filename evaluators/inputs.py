"""Input families and parameter re-randomisation, all drawn from a secret seed in the trusted process.

A candidate that passes only on the problem's own input distribution (identity passing ReLU on positive
inputs, code that assumes a structure) is caught by the other families: sign-flipped, rescaled and
heavy-tailed versions of the problem's inputs, and the problem's `get_test_inputs()` when defined.
Only floating-point tensors are transformed; integer inputs (indices, labels) keep their meaning.
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


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def seeded_call(fn: Any, seed: int) -> Any:
    """Call a problem hook (get_inputs, Model(...)) with the global RNGs seeded, restoring them after."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return fn()


def transform(family: str, inputs: list[Any], seed: int) -> list[Any]:
    """Apply an input family to a set of inputs drawn from the problem's own `get_inputs()`."""
    if family in ("base", TEST_FAMILY):
        return inputs
    g = _generator(seed)
    out = []
    for x in inputs:
        if not (isinstance(x, torch.Tensor) and x.is_floating_point()):
            out.append(x)
            continue
        src = x.detach().to("cpu", torch.float64)
        if family == "sign_flip":
            y = -src
        elif family == "scaled":
            # log-uniform in [1e-2, 1e2], away from 1 so the scale actually changes
            e = float(torch.rand((), generator=g)) * 1.5 + 0.5
            sign = 1 if float(torch.rand((), generator=g)) < 0.5 else -1
            y = src * (10.0 ** (sign * e))
        elif family == "heavy_tailed":
            # Student-t with 2 degrees of freedom, matched to the input's location and spread
            z = torch.randn(src.shape, generator=g, dtype=torch.float64)
            u = (torch.randn(src.shape, generator=g, dtype=torch.float64) ** 2
                 + torch.randn(src.shape, generator=g, dtype=torch.float64) ** 2) / 2
            t = z / u.clamp_min(1e-12).sqrt()
            std = float(src.std()) if src.numel() > 1 else 1.0
            std = std if math.isfinite(std) and std > 0 else 1.0
            mean = float(src.mean()) if src.numel() else 0.0
            y = mean + std * t.clamp(-1e4, 1e4)
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


@torch.no_grad()
def rerandomize_parameters(model: nn.Module, seed: int) -> None:
    """Draw fresh values for every floating parameter and buffer, so a candidate that assumes the default
    initialisation (ones, zeros, a seeded init) computes the wrong function."""
    g = _generator(seed)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not t.is_floating_point() or t.numel() == 0:
            continue
        src = t.detach().to("cpu", torch.float64)
        rms = float(src.pow(2).mean().sqrt()) if src.numel() else 0.0
        scale = max(rms, 0.05) * 0.5
        noise = torch.randn(src.shape, generator=g, dtype=torch.float64) * scale
        new = src + noise
        if "running_var" in name or name.endswith("var"):
            new = new.abs() + 1e-3  # variances stay positive
        t.copy_(new.to(t.dtype))
