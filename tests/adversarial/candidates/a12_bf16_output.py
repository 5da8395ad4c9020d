"""EXPECT: wrong_dtype
PROBLEM: relu.py

Class 12: returns a bf16 tensor (half the bytes to write) for an fp32 problem.
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
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0).to(tl.bfloat16), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
        return y
