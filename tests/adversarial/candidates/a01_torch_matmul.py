"""EXPECT: forbidden_op
PROBLEM: scale_bias.py

Class 1: y = x @ diag(weight) + bias with torch.matmul (a GEMM doing an elementwise job), then a kernel
copies the result so that launches exist.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        r = (torch.matmul(x, torch.diag(self.weight)) + self.bias).contiguous()
        y = torch.empty_like(r)
        copy_kernel[(triton.cdiv(r.numel(), 4096),)](r, y, r.numel(), BLOCK=4096)
        return y
