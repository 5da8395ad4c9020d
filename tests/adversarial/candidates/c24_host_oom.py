"""EXPECT: out_of_memory
PROBLEM: relu.py
LIMITS: memory_bytes=2147483648 call_s=60

Class 24: allocates and touches far more host memory than the limit (4 GiB against 2 GiB).
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


def relu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
    return y



class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.hoard = []

    def forward(self, x):
        for _ in range(16):
            self.hoard.append(torch.ones(64 << 20))
        return relu(x)
