"""EXPECT: aliased_output
PROBLEM: add.py

Class 8: one output buffer allocated once and returned on every call (the caller's earlier results
change under it).
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x, y):
        if self.out is None or self.out.shape != x.shape:
            self.out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 4096),)](x, y, self.out, n, BLOCK=4096)
        return self.out
