"""EXPECT: wrong_output
PROBLEM: add.py
TRIALS: 4

Class 9: memoises by the inputs' data pointers. The verifier re-fills the same input buffers with new
values between calls, so a pointer hit returns a stale answer.
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
        key = (x.data_ptr(), y.data_ptr())
        if key in self.cache:
            copy_kernel[(triton.cdiv(n, 4096),)](self.cache[key], out, n, BLOCK=4096)
            return out
        add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096)
        self.cache[key] = out.clone()
        return out
