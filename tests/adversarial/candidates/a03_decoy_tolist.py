"""EXPECT: forbidden_call
PROBLEM: relu.py

Class 3: the kernel handles one element; the rest is computed on the host from .tolist().
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        flat = x.reshape(-1)
        vals = [v if v > 0 else 0.0 for v in flat.tolist()]
        y = torch.tensor(vals, dtype=x.dtype, device=x.device)
        relu_kernel[(1,)](flat, y, 1, BLOCK=16)
        return y.reshape(x.shape)
