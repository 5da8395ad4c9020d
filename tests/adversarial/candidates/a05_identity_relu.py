"""EXPECT: wrong_output
PROBLEM: relu.py

Class 5: a copy kernel (identity). The problem's own inputs are all positive, where ReLU is the identity;
the sign-flipped, heavy-tailed and test-input families are not.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        copy_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
        return y
