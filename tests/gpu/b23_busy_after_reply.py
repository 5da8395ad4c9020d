"""EXPECT: ok
PROBLEM: big_add_problem.py

Class 23 (slowing the baseline) with work that starts exactly when the baseline is timed: during its first
timed call (call 9, after the 8 correctness calls of the test's policy) it hangs an object with a __del__ on
its input tensor (an attribute on a plain tensor, nothing the static filter or the guards look at). The
worker frees the timing input sets when its timing handler returns, right after it has sent its reply; the
finalizer then queues 3 s of GPU-saturating spin in the worker's context (compiled in __init__), while the
trusted process times the eager baseline a second time (eager_b), competing with it for the GPU. The
reported eager time is the mean of the runs before and after, so a slower eager_b inflates the candidate's
speedup (and the noise band). How much time-slicing between the two contexts shows in eager_b's CUDA events
is what this measures: the test expects the eager time within 20 % of an honest candidate's and a noise band
under 10 %. The evaluator now kills the worker (not used again) as soon as its timing reply is in, before
eager_b; on the H100 (2026-11-22) the test passed (it had been marked xfail as a known hole until then).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

PROGRAMS = 132 * 8
SPIN_NS = 3_000_000_000
CORRECTNESS_CALLS = 8


@triton.jit
def spin_kernel(p, ns):
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    acc = tl.load(p + tl.program_id(0))
    while now - start < ns:
        acc = acc * 0.5 + 1.0
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                        pack=1)
    tl.store(p + tl.program_id(0), acc)


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class _Spinner:
    def __init__(self, scratch):
        self.scratch = scratch

    def __del__(self):
        spin_kernel[(PROGRAMS,)](self.scratch, SPIN_NS)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.scratch = torch.zeros(PROGRAMS, device="cuda")
        # Compile the spin now, so the finalizer launches it at once. A negative 64-bit bound divisible by 16
        # gets the same specialisation as SPIN_NS (both i64, both multiples of 16) and returns immediately.
        spin_kernel[(PROGRAMS,)](self.scratch, -(1 << 32))

    def forward(self, x, y):
        self.calls += 1
        if self.calls == CORRECTNESS_CALLS + 1:
            x.kw_spinner = _Spinner(self.scratch)
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
