"""EXPECT: forbidden_code rule=time
EXPECT_RUNTIME: tampering
PROBLEM: add_problem.py

Class 18 (patching the timer): time.perf_counter, with no `import time` and no `time` in an attribute path:
the time module is fetched from triton.runtime.autotuner with getattr and a constant name, and patched
through a local name. The static filter sees nothing (a known gap: constant getattr names are not checked
against the module rules, and assignments are only checked through imported names). The identity check in
the worker catches it: tampering at load, with the static filter on or off.
Since the static filter follows constant getattr names and local aliases of module attributes, it
refuses this file (rule time); EXPECT_RUNTIME is the run-time verdict with the filter off, which is
what the text above describes.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_clock = getattr(triton.runtime.autotuner, "time", None) or getattr(triton.compiler.compiler, "time")
_clock.perf_counter = lambda: 0.0


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
