"""EXPECT: wrong_strides
PROBLEM: relu.py

Class 14: right values, but returned in a column-major layout the reference never produces (a caller
reading it as row-major memory would see a transposed matrix).
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
        xt = x.t().contiguous()
        yt = torch.empty_like(xt)
        n = xt.numel()
        relu_kernel[(triton.cdiv(n, 8192),)](xt, yt, n, BLOCK=8192)
        return yt.t()
