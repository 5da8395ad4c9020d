"""EXPECT: nan_output
PROBLEM: softmax_wide.py

Class 13: writes NaN everywhere (a comparison that skips or equates NaNs would pass it).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    z = tl.zeros([BLOCK], dtype=tl.float32)
    tl.store(y_ptr + offs, z / z, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = y.numel()
        fill_kernel[(triton.cdiv(n, 32768),)](y, n, BLOCK=32768)
        return y
