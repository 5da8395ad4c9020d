"""EXPECT: forbidden_op
PROBLEM: softmax_wide.py

Class 1: F.softmax under an innocent-looking alias, imported from torch.nn.functional.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.nn.functional import softmax as normalise_rows


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
        return normalise_rows(x, dim=-1)
