"""EXPECT: forbidden_code rule=dynamic_attribute
EXPECT_RUNTIME: forbidden_call
PROBLEM: softmax_wide.py

Class 28: calls the CPU kernel of aten._softmax straight through the operator's _op_dk (a call for one
dispatch key, below the Python key where the op record sits), every name in it computed at run time so
no filter reads it; a Triton kernel copies the result.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_PARTS = ["ops", "aten", "".join(["_soft", "max"]), "default", "".join(["_op", "_dk"])]


def _reach(obj, names):
    for name in names:
        obj = getattr(obj, name)
    return obj


@triton.jit
def copy_kernel(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        key = getattr(getattr(getattr(torch, "".join(["_", "C"])), "Dispatch" + "Key"), x.device.type.upper())
        y = _reach(torch, _PARTS)(key, x.contiguous(), -1, False)
        out = torch.empty_like(y)
        n = y.numel()
        copy_kernel[(triton.cdiv(n, 4096),)](y, out, n, BLOCK=4096)
        return out
