"""EXPECT: wrong_output
CHECK: correctness
PROBLEM: add_problem.py

Class 22 (warm caches): memoises on the inputs' data pointers from the first call, so a repeated pointer
pair returns the earlier answer (copied into a fresh output, so nothing aliases). The correctness trials
re-fill the same input buffers with new values, and the allocator hands freed buffers back: stale answers,
wrong_output in the correctness check.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x, y, o, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        key = (x.data_ptr(), y.data_ptr())
        if key in self.cache:
            copy_kernel[(triton.cdiv(n, 1024),)](self.cache[key], out, n, BLOCK=1024)
        else:
            add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
            self.cache[key] = out
        return out
