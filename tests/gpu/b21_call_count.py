"""EXPECT: wrong_output
CHECK: timing
PROBLEM: add_problem.py

Class 21 (phase detection) by counting calls: honest for the first 8 calls (the correctness trials of the
test's policy: 2 trials x 4 input families), then it only writes zeros, half the memory traffic of the
add, hoping nobody checks what the timed calls return. They are checked: the trusted side compares the
outputs of the timed repetitions with the expected values, so it fails as wrong_output in the timing check.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CORRECTNESS_CALLS = 8


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def zero_kernel(o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(o + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, y):
        self.calls += 1
        out = torch.empty_like(x)
        n = x.numel()
        if self.calls > CORRECTNESS_CALLS:
            zero_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)
        else:
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
