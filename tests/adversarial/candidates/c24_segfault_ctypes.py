"""EXPECT: forbidden_code rule=ctypes
EXPECT_RUNTIME: forbidden_call
PROBLEM: relu.py

Class 24: import ctypes and dereference NULL.
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


import ctypes


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)
        return relu(x)
