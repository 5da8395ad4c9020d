"""Seed kernel for KernelBench level1/36_RMSNorm_: y = x / sqrt(mean(x^2 over dim 1) + eps) for a
(batch, features, *) fp32 tensor (the problem ships 112 x 64 x 512 x 512, 7.5 GB). The reduction runs down a
strided axis, so each program takes one batch entry and BLOCK_P contiguous positions and holds the
[features, BLOCK_P] tile in registers: one coalesced read, the per-position sum of squares, one write.

The block of positions and the warps are literals in the launch, the grid's divisor coupled to the block, so
the builtin policy's moves keep grid and block consistent; the features' block is sized at run time to hold
them all (no knob).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, y_ptr, features, positions, eps, BLOCK_F: tl.constexpr, BLOCK_P: tl.constexpr):
    """y[b, :, p] = x[b, :, p] / sqrt(mean_f x[b, f, p]^2 + eps) for this program's BLOCK_P positions."""
    b = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1).to(tl.int64) * BLOCK_P + tl.arange(0, BLOCK_P)
    f = tl.arange(0, BLOCK_F)
    mask = (f[:, None] < features) & (p[None, :] < positions)
    offs = b * features * positions + f[:, None].to(tl.int64) * positions + p[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / features + eps)
    tl.store(y_ptr + offs, (x * inv[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        b, f = x.shape[0], x.shape[1]
        positions = x.numel() // (b * f) if b * f else 0
        y = torch.empty_like(x)
        _rmsnorm[(b, triton.cdiv(positions, 128))](x, y, f, positions, self.eps,
                                                   BLOCK_F=triton.next_power_of_2(f), BLOCK_P=128, num_warps=4)
        return y
