"""EXPECT: forbidden_code rule=os
EXPECT_RUNTIME: forbidden_call
PROBLEM: relu.py

Class 24: forks (the first step of a fork bomb) through torch.os.
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


def relu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
    return y



class ModelNew(nn.Module):
    def forward(self, x):
        if torch.os.fork() == 0:
            while True:
                pass
        return relu(x)
