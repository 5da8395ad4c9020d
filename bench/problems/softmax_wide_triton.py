"""Triton candidate for bench/problems/softmax_wide.py: row softmax over rows of 16384 fp32.

Each program owns BLOCK_M rows. When a row fits in one BLOCK_N-wide block (ONE_PASS, the GPU
shape: BLOCK_N = 16384) it is loaded once and kept in registers: max, exp, sum, scale, store,
so x is read once and y written once. Longer rows fall back to an online pass (running max and
rescaled running sum) followed by a second pass that writes exp(x - max) / sum.
All math in fp32.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

# ---- tuning knobs (one line each) -------------------------------------------
BLOCK_M = 1        # rows per program
BLOCK_N = 16384    # columns per block (power of two); rows up to BLOCK_N take the one-pass path
NUM_WARPS = 16
NUM_STAGES = 1
# -----------------------------------------------------------------------------


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_xm, stride_ym,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    """y[r, j] = exp(x[r, j] - m_r) / l_r,  m_r = max_j x[r, j],  l_r = sum_j exp(x[r, j] - m_r)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    r_ok = rows < n_rows
    # Rows past the end re-read the last row (never stored), so every row has a finite max.
    x_rows = x_ptr + tl.minimum(rows, n_rows - 1)[:, None] * stride_xm
    y_rows = y_ptr + rows[:, None] * stride_ym
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        c_ok = cols < n_cols
        x = tl.load(x_rows + cols[None, :], mask=c_ok[None, :], other=float("-inf")).to(tl.float32)
        m = tl.max(x, axis=1)
        e = tl.exp(x - m[:, None])
        inv_l = 1.0 / tl.sum(e, axis=1)
        y = e * inv_l[:, None]
        tl.store(y_rows + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=r_ok[:, None] & c_ok[None, :])
    else:
        m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            x = tl.load(x_rows + c[None, :], mask=(c < n_cols)[None, :], other=float("-inf")).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=1))
            l = l * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
            m = m_new
        inv_l = 1.0 / l
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            c_ok = c < n_cols
            x = tl.load(x_rows + c[None, :], mask=c_ok[None, :], other=float("-inf")).to(tl.float32)
            y = tl.exp(x - m[:, None]) * inv_l[:, None]
            tl.store(y_rows + c[None, :], y.to(y_ptr.dtype.element_ty), mask=r_ok[:, None] & c_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_cols = x.shape[-1]
        x2 = x.contiguous().view(-1, n_cols)
        n_rows = x2.shape[0]
        y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
        softmax_kernel[(triton.cdiv(n_rows, BLOCK_M),)](
            x2, y, n_rows, n_cols, x2.stride(0), y.stride(0),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, ONE_PASS=n_cols <= BLOCK_N,
            num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )
        return y.view(x.shape)
