"""EXPECT: stale_output
PROBLEM: relu.py

Class 6: the kernel writes only the first half of the output; the rest is whatever the allocation held.
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = x.new_empty(x.shape)
        half = x.numel() // 2
        relu_kernel[(triton.cdiv(half, 4096),)](x, y, half, BLOCK=4096)
        return y
