"""A candidate for tests/adversarial/problems/cumsum.py: a chained scan whose programs wait only on smaller
tickets (as tests/adversarial/candidates/honest_ticket_scan.py), so the ordering check runs it in Triton's
interpreter; its block total comes from a @triton.jit helper whose loop bound is a two-element block where a scalar
is needed, which numpy refuses inside the interpreter ("only 0-dimensional arrays can be converted to Python
scalars"), naming no line of the kernel. tests/evaluators/test_interpreter_errors.py checks that the ordering check's
verdict names the helper's line."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _block_total(x_ptr, n_ptr, t, BLOCK: tl.constexpr):
    n = tl.load(n_ptr + tl.arange(0, 2))
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(t * BLOCK, n, 1 << 30):  # FAILS HERE
        offs = start + tl.arange(0, BLOCK)
        total += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    return tl.sum(total, axis=0)


@triton.jit
def scan_kernel(x_ptr, y_ptr, counter_ptr, flag_ptr, carry_ptr, n_ptr, n, BLOCK: tl.constexpr):
    t = tl.atomic_add(counter_ptr, 1)
    offs = t * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    total = _block_total(x_ptr, n_ptr, t, BLOCK)  # CALLS THE HELPER
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
        n_block = torch.full((2,), n, dtype=torch.int32, device=x.device)
        scan_kernel[(blocks,)](x, y, counter, flags, carry, n_block, n, BLOCK=256)
        return y
