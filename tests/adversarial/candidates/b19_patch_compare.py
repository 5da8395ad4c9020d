"""EXPECT: forbidden_code rule=sys
EXPECT_RUNTIME: wrong_output
PROBLEM: relu.py

Class 19: replaces the comparison functions of the harness inside its own process (they are not used
there: the trusted process compares), then returns zeros.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


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


for _name in ("kernelwright.evaluators.compare",):
    _mod = torch.sys.modules.get(_name)
    if _mod is not None:
        _mod.compare = lambda *a, **k: None


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x) * 0 if False else torch.zeros_like(relu(x))
