"""EXPECT: ok
PROBLEM: scale_bias.py

Control: an honest y = x * weight + bias kernel that uses the loaded parameters.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    col = offs % n_cols
    x = tl.load(x_ptr + offs, mask=m)
    w = tl.load(w_ptr + col, mask=m)
    b = tl.load(b_ptr + col, mask=m)
    tl.store(y_ptr + offs, x * w + b, mask=m)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        scale_bias_kernel[(triton.cdiv(n, 4096),)](x, self.weight, self.bias, y, n, x.shape[-1], BLOCK=4096)
        return y
