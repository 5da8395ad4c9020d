"""EXPECT: forbidden_op
PROBLEM: softmax_wide.py

Class 1: embeds the reference Model and calls it from forward.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


@triton.jit
def touch_kernel(p, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(p + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ref = Model()

    def forward(self, x):
        scratch = torch.empty(16, device=x.device)
        touch_kernel[(1,)](scratch, 16, BLOCK=16)
        return self.ref(x)
