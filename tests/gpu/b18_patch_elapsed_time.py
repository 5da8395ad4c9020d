"""EXPECT: forbidden_code rule=module_patching
EXPECT_RUNTIME: tampering
PROBLEM: add_problem.py

Class 18 (patching the timer), at import: every CUDA-event interval now reads 0.1 µs. Static filter on:
an assignment to an attribute of torch (rule module_patching). Off: the worker compares the identities of
the timing functions it captured before the import with what is there after it: tampering at load.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _instant(self, end_event):
    return 1e-4


torch.cuda.Event.elapsed_time = _instant


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
