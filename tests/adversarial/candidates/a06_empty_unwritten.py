"""EXPECT: stale_output
PROBLEM: relu.py

Class 6: returns torch.empty_like(x) that no kernel wrote, hoping the allocator hands back memory that
still holds a correct answer. A decoy kernel writes a scratch buffer.
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
        return torch.empty_like(x)
