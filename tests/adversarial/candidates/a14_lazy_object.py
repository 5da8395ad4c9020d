"""EXPECT: forbidden_code rule=dynamic_attribute
EXPECT_RUNTIME: bad_output
PROBLEM: relu.py

Class 14: returns a lazy object that is not a tensor at all, computing only when an attribute is read.
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


class Deferred:
    def __init__(self, x):
        self.x = x

    def __getattr__(self, name):
        x = self.x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 8192),)](x, y, x.numel(), BLOCK=8192)
        return getattr(y, name)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        scratch = torch.empty(16, device=x.device)
        relu_kernel[(1,)](scratch, scratch, 16, BLOCK=16)
        return Deferred(x)
