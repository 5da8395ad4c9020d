"""EXPECT: forbidden_code rule=module_patching
EXPECT_RUNTIME: tampering
PROBLEM: add_problem.py

Class 18 (patching the timer), in __init__: torch.cuda.synchronize no longer waits, so a timer that stops
the clock after synchronising stops it before the work is done. Static filter on: an assignment to an
attribute of torch (rule module_patching). Off: the identity check after construction: tampering at load.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _no_wait(*args, **kwargs):
    return None


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        torch.cuda.synchronize = _no_wait

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
