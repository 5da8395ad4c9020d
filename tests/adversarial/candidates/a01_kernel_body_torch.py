"""EXPECT: forbidden_op
EXPECT_CUDA: runtime_error
PROBLEM: softmax_wide.py

Class 1: PyTorch called from inside the @triton.jit body. Triton's CPU interpreter runs the body as
Python, so torch.softmax executes "inside a kernel launch", where the interpreter's own tensor
bookkeeping is legitimately exempt from the op record. On a GPU the body is compiled, and Triton refuses
to compile a call into PyTorch: the launch raises.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

STASH = {}


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    STASH["y"].copy_(torch.softmax(STASH["x"], dim=-1))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        STASH["x"], STASH["y"] = x, y
        softmax_kernel[(1,)](x, y, x.shape[-1], BLOCK=16)
        return y
