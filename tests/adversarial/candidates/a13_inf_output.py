"""EXPECT: nan_output
PROBLEM: add.py

Class 13: +Inf everywhere.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    z = tl.zeros([BLOCK], dtype=tl.float32)
    tl.store(y_ptr + offs, (z + 1.0) / z, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = out.numel()
        fill_kernel[(triton.cdiv(n, 4096),)](out, n, BLOCK=4096)
        return out
