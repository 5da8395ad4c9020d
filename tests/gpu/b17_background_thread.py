"""EXPECT: forbidden_code rule=threading
EXPECT_RUNTIME: forbidden_call
PROBLEM: add_problem.py

Class 17 (background thread): forward returns an unwritten output at once and a thread writes the answer
50 ms later, so the timing events (and a caller reading right away) see no work. Static filter on: it
imports threading. Off: the worker refuses the import itself at load (forbidden_call).
"""
import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl


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
            threading.Event().wait(0.05)
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

        threading.Thread(target=later, daemon=True).start()
        return out
