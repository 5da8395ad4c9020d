"""EXPECT: forbidden_op
PROBLEM: softmax_wide.py

Class 2: a broken Triton kernel inside try (wrong argument count), PyTorch in the except branch.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        try:
            softmax_kernel[(x.shape[0],)](x, y, BLOCK=32768)  # n_cols missing: raises
        except Exception:
            y = torch.nn.functional.softmax(x, dim=-1)
        return y
