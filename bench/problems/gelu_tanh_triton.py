"""Triton candidate for bench/problems/gelu_tanh.py: y = gelu_tanh(x), fp32 math.

Flat elementwise kernel. Uses the exact rewrite 0.5 x (1 + tanh u) = x * sigmoid(2u) = x / (1 + exp(-2u)),
u = sqrt(2/pi) (x + 0.044715 x^3), which needs one exp and one division and is accurate (relative)
for every sign of x.
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
def gelu_tanh_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    """y[i] = x / (1 + exp(-2u)),  u = sqrt(2/pi) * (x + 0.044715 x^3), computed in fp32."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    # exp argument clamped: very negative x gives x * ~1e-35 (the true value underflows) instead of inf.
    y = x / (1.0 + tl.exp(tl.minimum(-2.0 * u, 80.0)))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.contiguous().view(-1)
        y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        n = xf.numel()
        gelu_tanh_kernel[(triton.cdiv(n, BLOCK),)](
            xf, y.view(-1), n, BLOCK=BLOCK, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return y
