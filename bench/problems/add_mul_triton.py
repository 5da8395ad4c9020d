"""Triton candidate for bench/problems/add_mul.py: z = (x + y) * w.

Flat elementwise kernel over three same-shaped inputs (masked tail); one read of each input and one
write, so it moves the minimum 4 x 4 bytes per element.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# ---- tuning knobs (one line each) -------------------------------------------
BLOCK = 2048       # elements per program (power of two)
NUM_WARPS = 8
NUM_STAGES = 1
# -----------------------------------------------------------------------------


@triton.jit
def add_mul_kernel(x_ptr, y_ptr, w_ptr, z_ptr, n_elements, BLOCK: tl.constexpr):
    """z[i] = (x[i] + y[i]) * w[i] in fp32 (the same two roundings as PyTorch's fp32 ops)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    z = (x + y) * w
    tl.store(z_ptr + offs, z.to(z_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.contiguous().view(-1)
        yf = y.contiguous().view(-1)
        wf = w.contiguous().view(-1)
        z = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n = xf.numel()
        add_mul_kernel[(triton.cdiv(n, BLOCK),)](
            xf, yf, wf, z.view(-1), n, BLOCK=BLOCK, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return z
