"""Writes far outside its buffer: an illegal memory access, a sticky CUDA error in its context."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    v = tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m)
    tl.store(o + offs + (1 << 40), v, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        wild_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out
