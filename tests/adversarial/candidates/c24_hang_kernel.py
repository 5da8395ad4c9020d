"""EXPECT: timeout
PROBLEM: relu.py
LIMITS: load_s=10 first_call_s=5 call_s=5

Class 24: a kernel that never terminates (a loop whose bound is never reached).
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



@triton.jit
def spin_kernel(p, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    i = 0
    while i < n:
        acc += 1.0
        i += 0
    tl.store(p + offs, acc)


class ModelNew(nn.Module):
    def forward(self, x):
        y = relu(x)
        spin_kernel[(1,)](y, 10, BLOCK=16)
        return y
