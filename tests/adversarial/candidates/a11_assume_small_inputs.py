"""EXPECT: wrong_output|nan_output
PROBLEM: softmax_wide.py

Class 11: assumes the data's structure: inputs in [0, 1) as the problem's get_inputs() draws them, so it
skips the max subtraction and replaces exp by a degree-7 Taylor polynomial that is exact to ~1e-5 there.
Right on the problem's own inputs; wrong on the scaled and heavy-tailed families.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=m, other=0.0)
    e = 1.0 + x * (1.0 + x / 2 * (1.0 + x / 3 * (1.0 + x / 4 * (1.0 + x / 5 * (1.0 + x / 6 * (1.0 + x / 7))))))
    e = tl.where(m, e, 0.0)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[-1], BLOCK=32768)
        return y
