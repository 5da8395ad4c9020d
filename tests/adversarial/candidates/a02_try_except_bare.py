"""EXPECT: forbidden_op
PROBLEM: relu.py

Class 2: a kernel that fails at run time (illegal constexpr), a bare except falling back to clamp.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        try:
            relu_kernel[(1,)](x, y, x.numel(), BLOCK=1000)  # not a power of two: raises
        except:  # noqa: E722
            y = x.clamp(min=0)
        return y
