"""EXPECT: wrong_output
PROBLEM: add.py

Class 9: memoises by input shape: computes once, then returns a fresh copy of the cached result.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x, y):
        n = x.numel()
        out = torch.empty_like(x)
        key = tuple(x.shape)
        if key in self.cache:
            copy_kernel[(triton.cdiv(n, 4096),)](self.cache[key], out, n, BLOCK=4096)
            return out
        add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096)
        self.cache[key] = out.clone()
        return out
