"""EXPECT: forbidden_code rule=inter_program_wait
EXPECT_RUNTIME: timeout
EXPECT_RUNTIME_CUDA: ok|timeout
PROBLEM: cumsum.py
LIMITS: load_s=20 first_call_s=8 call_s=8

Class 32 (programs waiting on programs that may not run): a chained scan with a ticket that hands the blocks out
back to front, so each program waits on the block of a LATER ticket, whose program may not be running yet. On a
GPU it finishes only while every program is resident; run one program at a time it never finishes, in either
order. Without the static filter (which carries the ordering check) the main evaluation hangs the same way on the
CPU and is cut at its limit; on a GPU, at this grid, every program is resident at once, so it finishes and is
correct (an H200, 2026-11-26): the hazard shows only where residency runs out, which no one grid on one GPU
shows; that is why the ordering check runs it one program at a time.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scan_kernel(x_ptr, y_ptr, counter_ptr, flag_ptr, carry_ptr, n, blocks, BLOCK: tl.constexpr):
    t = tl.atomic_add(counter_ptr, 1)
    b = blocks - 1 - t
    offs = b * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    total = tl.sum(x, axis=0)
    prefix = total * 0.0
    if b > 0:
        while tl.atomic_add(flag_ptr + b - 1, 0) == 0:
            pass
        prefix = tl.atomic_add(carry_ptr + b - 1, 0.0)
    tl.store(carry_ptr + b, prefix + total)
    tl.atomic_xchg(flag_ptr + b, 1)
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
        scan_kernel[(blocks,)](x, y, counter, flags, carry, n, blocks, BLOCK=256)
        return y
