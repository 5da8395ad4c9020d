"""EXPECT: forbidden_code rule=threading
EXPECT_RUNTIME: forbidden_call
PROBLEM: add_problem.py

Class 17 (background thread) without importing anything: the threading module PyTorch itself imported,
reached as torch.threading. Static filter on: the attribute path names threading. Off: the worker's hook on
threading.Thread.start refuses the start (and records it) in the first forward: forbidden_call.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_threading = torch.threading


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

        def later():
            _threading.Event().wait(0.05)
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

        _threading.Thread(target=later, daemon=True).start()
        return out
