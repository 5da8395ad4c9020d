"""EXPECT: timeout
EXPECT_RUNTIME: timeout
PROBLEM: relu.py
LIMITS: load_s=10 first_call_s=3 call_s=3 cpu_compile_s=8 compile_base_s=6 compile_variant_s=1 compile_quiet_s=2

Class 29: a first forward that never returns while it keeps the "still compiling" allowance alive through
Triton's own cache manager: about once a second it puts a new cache entry holding a compile's first stage
(`.source`), as a compilation of a new specialisation would, each well within the quiet window
(compile_quiet_s here). It may draw the evaluation's compile allowance (cpu_compile_s here; on a GPU
compile_base_s plus compile_variant_s per declared kernel), never more: `timeout` within its 3 s execution
limit plus the allowance (tests/evaluators/test_compile_allowance.py checks the time and the stated allowance).
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
        k = 0
        while True:
            k += 1
            get_cache_manager(f"{k:064x}").put("module {}", "relu_kernel.source")
            spin = 0
            while spin < 5_000_000:  # about a second of "compiling" before the next entry
                spin += 1
        return y
