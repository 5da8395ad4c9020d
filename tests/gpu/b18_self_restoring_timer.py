"""EXPECT: forbidden_code rule=module_patching
EXPECT_RUNTIME: flagged|tampering
PROBLEM: big_add_problem.py

Class 18 (patching the timer) against the identity check: the patch goes in only once timing has begun
(after the 8 correctness calls of the test's policy: 2 trials x 4 input families) and takes itself out
after the 30th timed sample has been read, so the identities the worker compares after timing are the
originals again; it is made through an alias (`_Event = torch.cuda.Event`), which the static filter's
patching rule does not resolve. The fake halves every event interval under 1 ms and leaves longer ones
alone, so the worker's one-off clock calibration (~2.5 ms spins, measured with the same events inside the
first repetition) is not skewed and its 1-ms pre-repetition spin does not give the fake away.

Neither the identity check (restored) nor the wall-clock cross-check (the hidden half, ~30 µs, is under its
50 µs floor) sees it; the worker's timing routine calls Event.elapsed_time through the class rather than a
reference captured before the candidate loaded (a known gap). What flags it is the roofline: half of an
honest memory-bound add is well below the floor. Expected: passes with timing["suspect"] non-empty.
Since the static filter follows constant getattr names and local aliases of module attributes, it
refuses this file (rule module_patching); EXPECT_RUNTIME is the run-time verdict with the filter off, which is
what the text above describes.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_Event = torch.cuda.Event
CORRECTNESS_CALLS = 8
TIMED_SAMPLES = 30


def _install():
    original = _Event.elapsed_time
    left = [TIMED_SAMPLES]

    def elapsed_time(self, end_event):
        ms = original(self, end_event)
        if ms >= 1.0:
            return ms
        left[0] -= 1
        if left[0] <= 0:
            _Event.elapsed_time = original
        return ms * 0.5

    _Event.elapsed_time = elapsed_time


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x, y):
        self.calls += 1
        if self.calls == CORRECTNESS_CALLS + 1:
            _install()
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
