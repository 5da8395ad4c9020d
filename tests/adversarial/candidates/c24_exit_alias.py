"""EXPECT: forbidden_code rule=os
EXPECT_RUNTIME: forbidden_call
PROBLEM: relu.py

Class 24/20: exits the worker early (os._exit(0)) through an alias, so a naive harness reads "status 0".
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


_o = torch.os


class ModelNew(nn.Module):
    def forward(self, x):
        _o._exit(0)
