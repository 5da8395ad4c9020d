"""EXPECT: ok
PROBLEM: add_problem.py

Class 21 (phase detection) without counting anything, entirely on the device. The worker poisons free
device memory before every call (to catch unwritten outputs); it once did so only in the correctness trials.
The kernel reads its output buffer before writing it and computes the sum only where it finds the poison,
writing zeros elsewhere: right wherever the poison is, wrong wherever it is not. The poison is now laid
before every call, checked or timed alike (evaluators/poison.py), so the probe finds it everywhere and is
honest throughout: `test_the_poison_is_in_every_timed_call` checks that it passes with timed repetitions
checked (a timed call without the poison would have returned zeros there).
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
