"""EXPECT: forbidden_code rule=stream_creation
EXPECT_RUNTIME: forbidden_call
PROBLEM: add_problem.py

Class 16 (side stream), with no stream API named in the text: torch.cuda.Stream and torch.cuda.stream are
reached with getattr and a constant name, which the static filter allows (only the listed attributes are
refused through getattr), so the static check passes. The worker's hook on torch.cuda.Stream.__new__ sees
the candidate's own frame construct the stream in __init__: forbidden_call at load, whether the static
filter is on or off.
Since the static filter follows constant getattr names and local aliases of module attributes, it
refuses this file (rule stream_creation); EXPECT_RUNTIME is the run-time verdict with the filter off, which is
what the text above describes.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_Stream = getattr(torch.cuda, "Stream")
_on = getattr(torch.cuda, "stream")


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = _Stream()

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        with _on(self.side):
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
