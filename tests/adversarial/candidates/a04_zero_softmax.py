"""EXPECT: wrong_output
PROBLEM: softmax_wide.py

Class 4: a kernel writes zeros. Every reference output is ~3e-5, so |0 - ref| < 1e-4 everywhere: a bare
absolute tolerance would pass it; the verifier's relative rule must not.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(y_ptr, n, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32) + value, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        n = y.numel()
        fill_kernel[(triton.cdiv(n, 32768),)](y, n, 0.0, BLOCK=32768)
        return y
