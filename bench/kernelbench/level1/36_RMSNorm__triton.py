"""RMS normalisation over dim 1 of a (batch, features, *) fp32 tensor: y = x / sqrt(mean(x^2 over features)
+ eps) (KernelBench level1/36_RMSNorm_ ships 112 x 64 x 512 x 512). The reduction runs down a strided axis,
so each program holds a [features, positions] tile of contiguous positions in registers: one coalesced
read, the per-position sum of squares, one write. The input is read once."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, y_ptr, features, positions, eps, BLOCK_F: tl.constexpr, BLOCK_P: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    f = tl.arange(0, BLOCK_F)
    mask = (f[:, None] < features) & (p[None, :] < positions)
    offs = b * features * positions + f[:, None].to(tl.int64) * positions + p[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / features
    inv = 1.0 / tl.sqrt(ms + eps)
    tl.store(y_ptr + offs, x * inv[None, :], mask=mask)


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
        block_f = triton.next_power_of_2(f)
        block_p = max(16, min(256, 16384 // block_f, triton.next_power_of_2(positions)))
        _rmsnorm[(b, triton.cdiv(positions, block_p))](x, y, f, positions, self.eps, BLOCK_F=block_f,
                                                       BLOCK_P=block_p, num_warps=8)
        return y
