"""EXPECT: forbidden_code rule=torch_compile
EXPECT_RUNTIME: forbidden_call
PROBLEM: relu.py

Class 1: torch.compile of the reference computation (Inductor would write the kernel, not the candidate).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(p, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(p + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


def reference(x):
    return torch.relu(x)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fn = torch.compile(reference)

    def forward(self, x):
        scratch = torch.empty(16, device=x.device)
        touch_kernel[(1,)](scratch, 16, BLOCK=16)
        return self.fn(x)
