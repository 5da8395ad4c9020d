"""EXPECT: wrong_shape
PROBLEM: relu.py

Class 11: hard-codes the problem's (64, 257) shape; the problem's get_test_inputs() uses another one.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < 64 * 257
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty(64, 257, device=x.device, dtype=x.dtype)
        relu_kernel[(3,)](x, y, BLOCK=8192)
        return y
