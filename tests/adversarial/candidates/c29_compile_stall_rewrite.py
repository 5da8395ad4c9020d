"""EXPECT: timeout
PROBLEM: relu.py
LIMITS: load_s=10 first_call_s=3 call_s=3 cpu_compile_s=8 compile_base_s=6 compile_variant_s=1 compile_quiet_s=2

Class 29, the cheapest form: a first forward that never returns while it rewrites one file of its Triton
cache through Triton's cache manager, again and again (fresh modification times, no new artefact). That is
no compilation at all: once its one new entry is older than the quiet window (compile_quiet_s here), it
draws nothing from the compile allowance and is judged `timeout` at its 3 s execution limit
(tests/evaluators/test_compile_allowance.py checks the time).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.runtime.cache import get_cache_manager


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=m)


def relu(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 8192),)](x, y, n, BLOCK=8192)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        y = relu(x)
        cache = get_cache_manager("0" * 64)
        while True:
            cache.put("module {}", "relu_kernel.json")
            spin = 0
            while spin < 1_000_000:
                spin += 1
        return y
