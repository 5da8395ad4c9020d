"""EXPECT: stale_output|wrong_output|nan_output
CHECK: timing
PROBLEM: big_add_problem.py

Class 30 (unchecked repetitions), the attack that passed on an H200 before the timed repetitions were
sampled: honest on every call it expects to be checked, partial on the others. It counts its calls (the
test's policy: 2 trials x 4 input families = 8 correctness calls, then 3 warm-up calls) and, in the timing,
the distinct input sets it is given; the old timing re-checked only the last repetition of each input set,
so it computes only the first half of its tiles on every timed repetition that is not the last of its set
(about 18 of 30 on this problem: the median comes from them). Each timed repetition may now be checked,
chosen after it ran: the half it never wrote still holds the poison laid before every call, and the check
fails it in the timing.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

CORRECTNESS_CALLS = 8
WARMUP = 3
REPS = 30
ASSUMED_SETS = 16  # before a set comes round again, assume as many sets as fit the default pool


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.seen = []

    def forward(self, x, y):
        self.calls += 1
        out = torch.empty_like(x)
        n = x.numel()
        tiles = triton.cdiv(n, 1024)
        rep = self.calls - CORRECTNESS_CALLS - WARMUP - 1
        if rep >= 0:
            ptr = x.data_ptr()
            if ptr not in self.seen:
                self.seen.append(ptr)
            sets = len(self.seen) if rep >= len(self.seen) else ASSUMED_SETS
            if rep < REPS - sets:  # not the last repetition of its set: nobody looked there
                add_kernel[(tiles // 2,)](x, y, out, n, BLOCK=1024)
                return out
        add_kernel[(tiles,)](x, y, out, n, BLOCK=1024)
        return out
