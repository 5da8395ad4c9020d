"""EXPECT: input_mutated
PROBLEM: relu.py

Class 7: the kernel writes the result both to the output and back into its input.
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
    r = tl.where(x > 0, x, 0.0)
    tl.store(y_ptr + offs, r, mask=m)
    tl.store(x_ptr + offs, r, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
        return y
