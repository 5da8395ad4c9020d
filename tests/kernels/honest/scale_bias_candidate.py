"""Honest candidate for scale_bias_problem: y[r, j] = x[r, j] * weight[j] + bias[j]."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 128


@triton.jit
def scale_bias_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """y[r, j] = x[r, j] * w[j] + b[j] over a BLOCK_M x BLOCK_N tile (row-major, contiguous)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ok = cols < n_cols
    mask = (rows < n_rows)[:, None] & c_ok[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask)
    w = tl.load(w_ptr + cols, mask=c_ok)
    b = tl.load(b_ptr + cols, mask=c_ok)
    tl.store(y_ptr + offs, x * w[None, :] + b[None, :], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int = 123):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(features))
        self.bias = nn.Parameter(torch.empty(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = self.weight.shape[0]
        x2 = x.contiguous().view(-1, n_cols)
        n_rows = x2.shape[0]
        y = torch.empty_like(x2)
        grid = (triton.cdiv(n_rows, BLOCK_M), triton.cdiv(n_cols, BLOCK_N))
        scale_bias_kernel[grid](x2, self.weight, self.bias, y, n_rows, n_cols,
                                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return y.view(x.shape)
