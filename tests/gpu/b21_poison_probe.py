"""EXPECT: wrong_output
CHECK: timing
PROBLEM: add_problem.py

Class 21 (phase detection) without counting anything, entirely on the device: during the correctness
trials the worker fills every fresh allocation with a NaN poison (to catch unwritten outputs); during
timing it does not. The kernel reads its output buffer before writing it and computes the sum only where
it finds the poison, writing zeros elsewhere: right in every correctness trial, wrong in every timed call.
The timed outputs are re-checked in the trusted process: wrong_output in the timing check. (On the CPU,
where nothing is timed, it passes.)
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_if_observed_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    before = tl.load(o + offs, mask=m, other=0.0)
    observed = before != before
    total = tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m)
    tl.store(o + offs, tl.where(observed, total, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_if_observed_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
