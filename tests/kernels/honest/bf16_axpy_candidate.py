"""Honest candidate for bf16_axpy_problem: y = alpha * x + z, fp32 math, output in the input dtype."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 32
BLOCK_N = 256


@triton.jit
def axpy_kernel(a_ptr, x_ptr, z_ptr, y_ptr, n_rows, n_cols,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y[r, j] = alpha[j] * x[r, j] + z[r, j], computed in fp32 and stored in y's dtype."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & c_ok[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    a = tl.load(a_ptr + cols, mask=c_ok, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = a[None, :] * x + z
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int = 200):
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(features))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        n_cols = self.alpha.shape[0]
        x2 = x.contiguous().view(-1, n_cols)
        z2 = z.contiguous().view(-1, n_cols)
        n_rows = x2.shape[0]
        y = torch.empty_like(x2)
        grid = (triton.cdiv(n_rows, BLOCK_M), triton.cdiv(n_cols, BLOCK_N))
        axpy_kernel[grid](self.alpha, x2, z2, y, n_rows, n_cols, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return y.view(x.shape)
