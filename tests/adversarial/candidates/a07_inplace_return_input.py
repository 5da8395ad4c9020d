"""EXPECT: aliased_output
PROBLEM: relu.py

Class 7/8: ReLU in place on the input, which is returned.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_inplace_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(x_ptr + offs, tl.where(x > 0, x, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        n = x.numel()
        relu_inplace_kernel[(triton.cdiv(n, 8192),)](x, n, BLOCK=8192)
        return x
