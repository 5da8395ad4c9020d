"""Triton candidate for bench/problems/rmsnorm.py: y = x * rsqrt(mean(x^2) + eps) * weight.

Each program owns BLOCK_M rows. When a row fits in one BLOCK_N-wide block (ONE_PASS, the GPU
shape) it is loaded once, kept in registers, reduced and written: one read and one write of x.
Longer rows fall back to two passes over BLOCK_N-wide column blocks (sum of squares, then scale).
All math in fp32.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# ---- tuning knobs (one line each) -------------------------------------------
BLOCK_M = 2        # rows per program
BLOCK_N = 4096     # columns per block (power of two); rows up to BLOCK_N take the one-pass path
NUM_WARPS = 8
NUM_STAGES = 2
# -----------------------------------------------------------------------------


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_rows, n_cols, stride_xm, stride_ym, eps,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    """y[r, j] = x[r, j] * rstd_r * w[j],  rstd_r = 1 / sqrt(sum_j x[r, j]^2 / n_cols + eps)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = rows < n_rows
    cols = tl.arange(0, BLOCK_N)
    x_rows = x_ptr + rows[:, None] * stride_xm
    y_rows = y_ptr + rows[:, None] * stride_ym
    if ONE_PASS:
        c_ok = cols < n_cols
        mask = r_ok[:, None] & c_ok[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=c_ok, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = r_ok[:, None] & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            c_ok = c < n_cols
            mask = r_ok[:, None] & c_ok[None, :]
            x = tl.load(x_rows + c[None, :], mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=c_ok, other=0.0).to(tl.float32)
            y = x * rstd[:, None] * w[None, :]
            tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        n_rows = x2.shape[0]
        w = self.weight.contiguous()
        y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
        rmsnorm_kernel[(triton.cdiv(n_rows, BLOCK_M),)](
            x2, w, y, n_rows, n_cols, x2.stride(0), y.stride(0), self.eps,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, ONE_PASS=n_cols <= BLOCK_N,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return y.view(x.shape)
