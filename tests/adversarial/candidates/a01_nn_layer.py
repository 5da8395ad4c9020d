"""EXPECT: forbidden_op
PROBLEM: relu.py

Class 1: an nn compute layer (nn.ReLU) does the work; a kernel copies the result so launches exist.
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
        self.act = nn.ReLU()

    def forward(self, x):
        r = self.act(x).contiguous()
        y = torch.empty_like(r)
        copy_kernel[(triton.cdiv(r.numel(), 4096),)](r, y, r.numel(), BLOCK=4096)
        return y
