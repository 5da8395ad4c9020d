"""EXPECT: flagged|wrong_output
PROBLEM: big_add_problem.py

Class 22 (warm caches) aimed at the timing phase only: honest for the 8 correctness calls of the test's
policy (2 trials x 4 input families), then memoised on the inputs' data pointers, a hit copying the earlier
answer (2/3 of the add's memory traffic) into a fresh output. The timing input sets are placed once and not
re-filled, and the pool holds fewer sets than there are repetitions (16 sets of 256 MiB in the 4 GiB pool for
3 warm-up calls and 30 repetitions), so 17 of the 30 timed calls see a pointer pair they have seen before,
with the same values: the hits are right, so the timed repetitions checked (a random share, chosen after
each ran) pass. A known gap: the median is a hit's time. What flags it is the roofline: a copy of 128 MB is below
the floor of an add that must move 192 MB. Expected: passes with timing["suspect"] non-empty.
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
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.cache = {}

    def forward(self, x, y):
        self.calls += 1
        out = torch.empty_like(x)
        n = x.numel()
        key = (x.data_ptr(), y.data_ptr())
        if self.calls > CORRECTNESS_CALLS and key in self.cache:
            copy_kernel[(triton.cdiv(n, 1024),)](self.cache[key], out, n, BLOCK=1024)
            return out
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        if self.calls > CORRECTNESS_CALLS:
            self.cache[key] = out
        return out
