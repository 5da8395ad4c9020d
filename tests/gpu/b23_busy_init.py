"""EXPECT: ok
PROBLEM: big_add_problem.py

Class 23 (slowing the baseline): queues a second of GPU-saturating spin at import and another in __init__,
and returns at once, hoping the GPU is still busy when the baseline is timed. It cannot be: the baselines
are timed in the trusted process, long after the worker's first correctness call has waited for everything
queued so far, while the worker sits idle. The candidate's own add is honest, so it passes; the test checks
that the eager time it reports matches the one reported for an honest candidate (within 20 %).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

PROGRAMS = 132 * 8  # every SM of an H100, several times over
SPIN_NS = 1_000_000_000


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


_scratch = torch.zeros(PROGRAMS, device="cuda")
spin_kernel[(PROGRAMS,)](_scratch, SPIN_NS)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scratch = torch.zeros(PROGRAMS, device="cuda")
        spin_kernel[(PROGRAMS,)](self.scratch, SPIN_NS)

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
