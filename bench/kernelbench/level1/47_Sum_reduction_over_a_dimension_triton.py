"""Sum over the middle dimension of a (batch, rows, cols) fp32 tensor, keeping it as size 1 (KernelBench
level1/47 ships 128 x 4096 x 4095, summed over the 4096). Each program owns one batch and a strip of
contiguous columns and walks down the rows accumulating a vector, so every load is coalesced along the
columns and the input is read exactly once."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sum_mid(x_ptr, y_ptr, rows, cols, stride_b, stride_r, BLOCK_C: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = c < cols
    base = x_ptr + b * stride_b + c
    acc = tl.zeros([BLOCK_C], tl.float32)
    for r in range(0, rows):
        acc += tl.load(base + r * stride_r, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + b * cols + c, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dim != 1 or x.dim() != 3:
            raise ValueError("this kernel sums over dim 1 of a 3-d tensor")
        x = x.contiguous()
        b, rows, cols = x.shape
        y = torch.empty((b, 1, cols), device=x.device, dtype=x.dtype)
        block = min(512, triton.next_power_of_2(cols))
        _sum_mid[(b, triton.cdiv(cols, block))](x, y, rows, cols, x.stride(0), x.stride(1), BLOCK_C=block,
                                               num_warps=4)
        return y
