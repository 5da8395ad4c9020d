"""A candidate for tests/adversarial/problems/add.py whose kernel fails inside Triton's interpreter, in a
@triton.jit helper, with numpy's error: the loop's bound is a two-element block where a scalar is needed, and numpy
refuses to turn it into a Python int ("only 0-dimensional arrays can be converted to Python scalars"), naming no
line of the kernel. tests/evaluators/test_interpreter_errors.py checks that the verdict names the helper's line."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_rows(x, y, o, n, bound_ptr, BLOCK: tl.constexpr):
    stop = tl.load(bound_ptr + tl.arange(0, 2))
    for start in range(tl.program_id(0) * BLOCK, stop, BLOCK * 4096):  # FAILS HERE
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def add_kernel(x, y, o, n, bound_ptr, BLOCK: tl.constexpr):
    _add_rows(x, y, o, n, bound_ptr, BLOCK)  # CALLS THE HELPER


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        bound = torch.full((2,), n, dtype=torch.int32, device=x.device)
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, bound, BLOCK=1024)
        return out
