"""EXPECT: wrong_output
PROBLEM: softmax_wide.py

Class 12: an fp32 problem computed in bf16 inside the kernel (loads rounded to bf16, exp in bf16).
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
    x = tl.load(x_ptr + row * n_cols + offs, mask=m, other=float("-inf")).to(tl.bfloat16)
    e = tl.exp((x - tl.max(x, axis=0)).to(tl.float32)).to(tl.bfloat16).to(tl.float32)
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[-1], BLOCK=32768)
        return y
