"""EXPECT: decoy_kernel
EXPECT_CUDA: ok
PROBLEM: relu.py

Class 3 (time coverage): the kernel is right, but most of the forward's time is spent on the host
outside any Triton launch, so the kernels do not carry the forward's time. On the CPU coverage is the
share of wall time inside launches, so this fails there. On a GPU coverage is the share of *device* time in
the candidate's kernels (the profiler's), which a host loop does not lower; it is no exploit there either:
the host loop sits between the timing events, so its time is charged to the candidate's median.
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
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
        acc = 0
        for i in range(4_000_000):
            acc += i
        return y
