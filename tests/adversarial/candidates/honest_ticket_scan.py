"""EXPECT: ok
PROBLEM: cumsum.py

Control: a chained scan in one launch whose programs wait on one another the one safe way. Each program claims
its block with a ticket (`tl.atomic_add(counter, 1)`: blocks go out in the order programs start), and waits only
for the block before its own, claimed by a program that is already running. The ordering check runs it in
Triton's interpreter with programs one at a time in reverse and forward order: it finishes in both.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scan_kernel(x_ptr, y_ptr, counter_ptr, flag_ptr, carry_ptr, n, BLOCK: tl.constexpr):
    t = tl.atomic_add(counter_ptr, 1)
    offs = t * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    total = tl.sum(x, axis=0)
    prefix = total * 0.0
    if t > 0:
        while tl.atomic_add(flag_ptr + t - 1, 0) == 0:
            pass
        prefix = tl.atomic_add(carry_ptr + t - 1, 0.0)
    tl.store(carry_ptr + t, prefix + total)
    tl.atomic_xchg(flag_ptr + t, 1)
    tl.store(y_ptr + offs, tl.cumsum(x, axis=0) + prefix, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        n = x.numel()
        blocks = triton.cdiv(n, 256)
        y = torch.empty_like(x)
        counter = torch.zeros(1, dtype=torch.int32, device=x.device)
        flags = torch.zeros(blocks, dtype=torch.int32, device=x.device)
        carry = torch.zeros(blocks, dtype=torch.float32, device=x.device)
        scan_kernel[(blocks,)](x, y, counter, flags, carry, n, BLOCK=256)
        return y
