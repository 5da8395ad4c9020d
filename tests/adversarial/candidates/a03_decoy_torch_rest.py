"""EXPECT: forbidden_op
PROBLEM: relu.py

Class 3: the kernel handles the first row; PyTorch does the rest.
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
        y = torch.empty_like(x)
        relu_kernel[(1,)](x, y, x.shape[-1], BLOCK=1024)
        y[1:] = torch.relu(x[1:])
        return y
