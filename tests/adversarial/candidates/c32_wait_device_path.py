"""EXPECT: forbidden_code rule=inter_program_wait
PROBLEM: cumsum.py

Class 32 (programs waiting on programs that may not run): two chained scans, both taking a ticket. The one the
host launches on the CPU waits on earlier tickets; the one it launches on a GPU orders its blocks by program id.
The ordering check runs on the CPU, so it sees only the first: a kernel that waits must have run in the check.
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



@triton.jit
def scan_kernel_gpu(x_ptr, y_ptr, counter_ptr, flag_ptr, carry_ptr, n, BLOCK: tl.constexpr):
    t = tl.atomic_add(counter_ptr, 1)
    b = tl.program_id(0) + t * 0
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
        kernel = scan_kernel_gpu if x.is_cuda else scan_kernel
        kernel[(blocks,)](x, y, counter, flags, carry, n, BLOCK=256)
        return y
