"""EXPECT: wrong_output
PROBLEM: relu.py

Class 5: |x| instead of max(x, 0): identical on the problem's positive inputs only.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def abs_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.abs(tl.load(x_ptr + offs, mask=m)), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        abs_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
        return y
