"""EXPECT: forbidden_code rule=torch_internals
EXPECT_RUNTIME: forbidden_op
PROBLEM: softmax_wide.py

Class 1: calls the private aten kernel (_softmax) through torch.ops.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(p, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(p + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        scratch = torch.empty(16, device=x.device)
        touch_kernel[(1,)](scratch, 16, BLOCK=16)
        return torch.ops.aten._softmax.default(x, -1, False)
